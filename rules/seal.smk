# Stage 5b: a study's run records sealed. The sha256 of every file its runs wrote is
# committed to git (ledger/<study>.json, one commit per study) before channels are
# computed; channels, decisions and `rearrival audit` verify against it. Commits are
# serialised through the `git` resource, like preregistration commits.
localrules:
    seal,


rule seal:
    input:
        runs=replicate_run_dirs,
        prereg="results/prereg/{study}.json",
    output:
        "results/ledger/{study}.json",
    log:
        "logs/seal/{study}.log",
    conda:
        "../envs/workflow.yaml"
    resources:
        git=1,
    shell:
        "rearrival study seal --study {wildcards.study:q} --out {output:q} {input.runs:q}"
        " > {log:q} 2>&1"
