# Stage 6: cost on two channels (paper II-D) for every complete run of a study:
# A from the step log and the prefill model, B from client in-flight intervals.


rule channels:
    input:
        runs=replicate_run_dirs,
        ledger="results/ledger/{study}.json",
        profile=profile_input,
    output:
        "results/channels/{study}.parquet",
    log:
        "logs/channels/{study}.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
    shell:
        "rearrival study channels --config {params.config_file:q} --study {wildcards.study:q}"
        " --out {output:q} {input.runs:q} > {log:q} 2>&1"
