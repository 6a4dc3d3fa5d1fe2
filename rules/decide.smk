# Stage 7: the paper's decision rules applied to replicate-summed channel ratios, with
# the criteria read back from the committed preregistration (docs/DESIGN.md §9).
# `decide_exploratory` applies them to the exploratory evaluation's predictions and
# channels with the study definition's criteria; nothing of it is registered.


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
        prereg=prereg_option,
    shell:
        "rearrival study decide --config {params.config_file:q} --study {wildcards.study:q}"
        " --values {params.values} --channels {input.channels:q}"
        " --predictions {input.predictions:q} {params.prereg} --ledger {input.ledger:q}"
        " --out {output.decisions:q} > {log:q} 2>&1"


use rule decide as decide_exploratory with:
    input:
        channels=rules.channels_exploratory.output.channels,
        predictions=rules.predict_exploratory.output.predictions,
        ledger=rules.seal.output.record,
    output:
        decisions=decisions_path(root=exploratory_root()),
    log:
        "logs/exploratory/{profile}/decide/{study}.log",
