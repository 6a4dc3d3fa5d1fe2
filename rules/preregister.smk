# Stage 3: predictions and decision criteria committed to git (GitPython) before any run
# they judge (docs/DESIGN.md §8). Amending studies wait for the decision they amend.
# Commits are serialised through the `git` resource so two jobs never race for the index.
localrules:
    preregister,


rule preregister:
    input:
        unpack(prereg_inputs),
        plans=rules.plans.output.plans,
        selected=selected_input,
        profile=profile_input,
    output:
        record=prereg_path(),
    log:
        "logs/prereg/{study}.log",
    conda:
        "../envs/workflow.yaml"
    resources:
        git=1,
    params:
        config_file=CONFIG_FILE,
        values=values("prereg"),
        selected=selected_option,
        profile=profile_option,
        amended=amended_option,
    shell:
        "rearrival study prereg --config {params.config_file:q} --study {wildcards.study:q}"
        " --values {params.values} --plans {input.plans:q}"
        " --predictions {input.predictions:q} {params.selected} {params.profile}"
        " {params.amended} --out {output.record:q} > {log:q} 2>&1"
