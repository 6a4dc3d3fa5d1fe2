# Stage 7b (Table XI, paper Section IV): after a two-round validation study's runs, the
# fixed-arrival simulator on every baseline run's plan with its observed re-arrival
# times, priced with the study's profile (`fixed_arrivals_exploratory`: the exploratory
# evaluation's). Computed after measurement, never registered; the report only reads it.


rule fixed_arrivals:
    input:
        plans=rules.plans.output.plans,
        channels=rules.channels.output.channels,
        runs=replicate_run_dirs,
        ledger=rules.seal.output.record,
        profile=profile_input,
    output:
        fixed=fixed_arrivals_path(),
    log:
        "logs/fixed_arrivals/{study}.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
        values=values("predict"),
        profile=profile_option,
        evaluation="",
    shell:
        "rearrival study fixed-arrivals --config {params.config_file:q}"
        " --study {wildcards.study:q} --values {params.values} --plans {input.plans:q}"
        " --channels {input.channels:q} --ledger {input.ledger:q} {params.profile}"
        " {params.evaluation} --out {output.fixed:q} {input.runs:q} > {log:q} 2>&1"


use rule fixed_arrivals as fixed_arrivals_exploratory with:
    input:
        plans=rules.plans.output.plans,
        channels=rules.channels_exploratory.output.channels,
        runs=replicate_run_dirs,
        ledger=rules.seal.output.record,
        profile=exploratory_profile_input,
    output:
        fixed=fixed_arrivals_path(root=exploratory_root()),
    log:
        "logs/exploratory/{profile}/fixed_arrivals/{study}.log",
    params:
        config_file=CONFIG_FILE,
        values=values("predict"),
        profile=profile_option,
        evaluation="--exploratory",
