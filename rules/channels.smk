# Stage 6: cost on two channels (paper II-D) for every complete run of a study:
# A from the step log and the prefill model, B from client in-flight intervals.
# `channels_exploratory` prices channel A with the exploratory evaluation's profile.


rule channels:
    input:
        runs=replicate_run_dirs,
        ledger=rules.seal.output.record,
        profile=profile_input,
    output:
        channels=channels_path(),
    log:
        "logs/channels/{study}.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
        values=values("predict"),
        profile=profile_option,
        evaluation="",
    shell:
        "rearrival study channels --config {params.config_file:q} --study {wildcards.study:q}"
        " --values {params.values} --ledger {input.ledger:q} {params.profile}"
        " {params.evaluation} --out {output.channels:q} {input.runs:q} > {log:q} 2>&1"


use rule channels as channels_exploratory with:
    input:
        runs=replicate_run_dirs,
        ledger=rules.seal.output.record,
        profile=exploratory_profile_input,
    output:
        channels=channels_path(root=exploratory_root()),
    log:
        "logs/exploratory/{profile}/channels/{study}.log",
    params:
        config_file=CONFIG_FILE,
        values=values("predict"),
        profile=profile_option,
        evaluation="--exploratory",
