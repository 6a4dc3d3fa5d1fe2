# Stage 1: input plans, one per N and replicate, seeded from (study seed, study block, N,
# replicate). Fixed inputs only; every condition of a replicate runs the same plan.


rule plans:
    output:
        plans=directory(plans_path()),
    log:
        "logs/plans/{study}.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
        values=values("plans"),
    shell:
        "rearrival study plans --config {params.config_file:q} --study {wildcards.study:q}"
        " --values {params.values} --out {output.plans:q} > {log:q} 2>&1"
