# Stage 5b: a study's run records sealed. The sha256 of every file its runs wrote is
# committed to git (ledger/<study>.json, one commit per study) before channels are
# computed; channels, decisions and `rearrival audit` verify against it. Commits are
# serialised through the `git` resource, like preregistration commits. The ledger is
# append-only (re-run records are refused); with `witness:` set it is published. It takes
# no values digest: a config edit must never rerun a seal (it would be refused).
localrules:
    seal,


rule seal:
    input:
        runs=replicate_run_dirs,
        prereg=rules.preregister.output.record,
    output:
        record=ledger_path(),
    log:
        "logs/seal/{study}.log",
    conda:
        "../envs/workflow.yaml"
    resources:
        git=1,
    params:
        config_file=CONFIG_FILE,
    shell:
        "rearrival study seal --config {params.config_file:q} --study {wildcards.study:q}"
        " --prereg {input.prereg:q} --out {output.record:q} {input.runs:q} > {log:q} 2>&1"
