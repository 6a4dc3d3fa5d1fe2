# The preregistered open-traffic study on a real fleet (docs/DESIGN.md §18; README "A study
# on a real fleet"): open plans, the registration committed before the first server
# starts, one run per condition on a fresh fleet (two vLLM servers behind vllm-router;
# the `device` resource: one fleet at a time), the seal, `rearrival compare` per run on
# its observed arrivals and placement, the count-based decisions and the report section
# (reports/fleet.md, and reports/fleet/section.json for reports/report.html).
# Included only when the study definition has a fleet: section (Snakefile).
localrules:
    fleet_prereg,
    fleet_seal,


rule fleet_plans:
    input:
        pool=FLEET.pool,
    output:
        plans=directory(fleet_plans_path()),
    log:
        "logs/fleet/plans.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
        values=values("fleet"),
    shell:
        "rearrival study fleet-plans --config {params.config_file:q} --values {params.values}"
        " --pool {input.pool:q} --out {output.plans:q} > {log:q} 2>&1"


rule fleet_prereg:
    input:
        plans=rules.fleet_plans.output.plans,
        profile=profile_input,
    output:
        record=fleet_prereg_path(),
    log:
        "logs/fleet/prereg.log",
    conda:
        "../envs/workflow.yaml"
    resources:
        git=1,
    params:
        config_file=CONFIG_FILE,
        values=values("fleet"),
    shell:
        "rearrival study fleet-prereg --config {params.config_file:q} --values {params.values}"
        " --plans {input.plans:q} --profile {input.profile:q} --out {output.record:q}"
        " > {log:q} 2>&1"


rule fleet_run:
    input:
        plans=rules.fleet_plans.output.plans,
        prereg=rules.fleet_prereg.output.record,
    output:
        run=directory(fleet_run_path()),
    log:
        run="logs/fleet/runs/{condition}_r{rep}.log",
        failed="logs/fleet/runs/{condition}_r{rep}.failed",
    conda:
        "../envs/workflow.yaml"
    resources:
        device=1,
    params:
        config_file=CONFIG_FILE,
        values=values("fleet"),
    # exec: a signal to the job reaches the verb's handler, which stops router and servers
    shell:
        "exec rearrival study fleet-run --config {params.config_file:q}"
        " --values {params.values} --condition {wildcards.condition:q}"
        " --replicate {wildcards.rep} --plans {input.plans:q} --prereg {input.prereg:q}"
        " --failed-runs {log.failed:q} --out {output.run:q} > {log.run:q} 2>&1"


rule fleet_seal:
    input:
        runs=fleet_run_dirs,
        prereg=rules.fleet_prereg.output.record,
    output:
        record=fleet_ledger_path(),
    log:
        "logs/fleet/seal.log",
    conda:
        "../envs/workflow.yaml"
    resources:
        git=1,
    params:
        config_file=CONFIG_FILE,
        study=FLEET.study,
    shell:
        "rearrival study seal --config {params.config_file:q} --study {params.study:q}"
        " --prereg {input.prereg:q} --out {output.record:q} {input.runs:q} > {log:q} 2>&1"


rule fleet_compare:
    input:
        run=fleet_run_path(),
        ledger=rules.fleet_seal.output.record,
        plans=rules.fleet_plans.output.plans,
        profile=profile_input,
    output:
        comparison=directory(fleet_compare_path()),
    log:
        "logs/fleet/compare/{condition}_r{rep}.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
        values=values("fleet"),
    # `rearrival compare` on the sealed run (the ledger checked first)
    shell:
        "rearrival study fleet-compare --config {params.config_file:q} --values {params.values}"
        " --run {input.run:q} --plans {input.plans:q} --profile {input.profile:q}"
        " --ledger {input.ledger:q} --out {output.comparison:q} > {log:q} 2>&1"


rule fleet_decide:
    input:
        comparisons=fleet_compare_dirs,
    output:
        decisions=directory(fleet_decisions_path()),
    log:
        "logs/fleet/decide.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
        values=values("fleet"),
    shell:
        "rearrival study fleet-decide --config {params.config_file:q} --values {params.values}"
        " --out {output.decisions:q} {input.comparisons:q} > {log:q} 2>&1"


rule fleet_report:
    input:
        comparisons=fleet_compare_dirs,
        runs=fleet_run_dirs,
        decisions=rules.fleet_decide.output.decisions,
        prereg=rules.fleet_prereg.output.record,
    output:
        markdown=fleet_report_path(),
        section=fleet_section_path(),
        figures=directory(fleet_figures_path()),
    log:
        "logs/fleet/report.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
        values=values("fleet"),
        runs=fleet_run_options,
    shell:
        "rearrival study fleet-report --config {params.config_file:q} --values {params.values}"
        " --decisions {input.decisions:q} --prereg {input.prereg:q} {params.runs}"
        " --out {output.markdown:q} --section {output.section:q} --figures {output.figures:q}"
        " {input.comparisons:q} > {log:q} 2>&1"
