# Stage 2: predictions of the simulator (paper Section IV) for every plan and condition,
# made before any run of the study and committed by the preregistration stage.


rule predict:
    input:
        plans="results/plans/{study}",
        selected=selected_input,
        profile=profile_input,
    output:
        "results/predictions/{study}.parquet",
    log:
        "logs/predict/{study}.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
        values=values("predict"),
        selected=selected_option,
    shell:
        "rearrival study predict --config {params.config_file:q} --study {wildcards.study:q}"
        " --plans {input.plans:q} {params.selected} --out {output:q} > {log:q} 2>&1"
