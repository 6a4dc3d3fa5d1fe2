# Stage 2: predictions of the simulator (paper Section IV) for every plan and condition,
# made before any run of the study and committed by the preregistration stage.


rule predict:
    input:
        plans=rules.plans.output.plans,
        selected=selected_input,
        profile=profile_input,
    output:
        predictions=predictions_path(),
    log:
        "logs/predict/{study}.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
        values=values("predict"),
        selected=selected_option,
        profile=profile_option,
    shell:
        "rearrival study predict --config {params.config_file:q} --study {wildcards.study:q}"
        " --plans {input.plans:q} {params.selected} {params.profile}"
        " --out {output.predictions:q} > {log:q} 2>&1"
