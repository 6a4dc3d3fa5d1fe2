# Stage 7: the paper's decision rules applied to replicate-summed channel ratios, with
# the criteria read back from the committed preregistration (SPEC 10).


rule decide:
    input:
        channels="results/channels/{study}.parquet",
        predictions="results/predictions/{study}.parquet",
        prereg="results/prereg/{study}.json",
        ledger="results/ledger/{study}.json",
    output:
        "results/decisions/{study}.csv",
    log:
        "logs/decide/{study}.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
        values=values("decide"),
    shell:
        "rearrival study decide --config {params.config_file:q} --study {wildcards.study:q}"
        " --channels {input.channels:q} --predictions {input.predictions:q}"
        " --prereg {input.prereg:q} --out {output:q} > {log:q} 2>&1"
