# Stage 6: cost on two channels (paper II-D) for every complete run of a study:
# A from the step log and the prefill model, B from client in-flight intervals.


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
        profile=profile_option,
    shell:
        "rearrival study channels --config {params.config_file:q} --study {wildcards.study:q}"
        " --ledger {input.ledger:q} {params.profile} --out {output.channels:q}"
        " {input.runs:q} > {log:q} 2>&1"
