# Stage 2: predictions of the simulator (paper Section IV) for every plan and condition,
# made before any run of the study and committed by the preregistration stage, with the
# base simulator's per-request records and evictions (the report's timeline draws them).
# `predict_exploratory` is the same stage with the other profile for the scorecard's
# exploratory second evaluation: written under results/exploratory/<profile>/, never
# registered.


rule predict:
    input:
        plans=rules.plans.output.plans,
        selected=selected_input,
        profile=profile_input,
    output:
        predictions=predictions_path(),
        requests=predictions_path(table=".requests"),
        evictions=predictions_path(table=".evictions"),
    log:
        "logs/predict/{study}.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
        values=values("predict"),
        selected=selected_option,
        profile=profile_option,
        evaluation="",
    shell:
        "rearrival study predict --config {params.config_file:q} --study {wildcards.study:q}"
        " --values {params.values} --plans {input.plans:q} {params.selected}"
        " {params.profile} {params.evaluation} --out {output.predictions:q}"
        " --requests {output.requests:q} --evictions {output.evictions:q} > {log:q} 2>&1"


use rule predict as predict_exploratory with:
    input:
        plans=rules.plans.output.plans,
        selected=selected_input,
        profile=exploratory_profile_input,
    output:
        predictions=predictions_path(root=exploratory_root()),
        requests=predictions_path(root=exploratory_root(), table=".requests"),
        evictions=predictions_path(root=exploratory_root(), table=".evictions"),
    log:
        "logs/exploratory/{profile}/predict/{study}.log",
    params:
        config_file=CONFIG_FILE,
        values=values("predict"),
        selected=selected_option,
        profile=profile_option,
        evaluation="--exploratory",
