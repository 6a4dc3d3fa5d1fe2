# Stage 7: the paper's decision rules applied to replicate-summed channel ratios, with
# the criteria read back from the committed preregistration (SPEC 10).


rule decide:
    input:
        channels=rules.channels.output.channels,
        predictions=rules.predict.output.predictions,
        prereg=rules.preregister.output.record,
        ledger=rules.seal.output.record,
    output:
        decisions=decisions_path(),
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
        " --prereg {input.prereg:q} --ledger {input.ledger:q} --out {output.decisions:q}"
        " > {log:q} 2>&1"
