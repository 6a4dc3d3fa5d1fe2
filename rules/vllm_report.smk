# The report section of a study on a real vLLM server (docs/DESIGN.md §15; README "A study
# on a real vLLM server"). `vllm_tables` sets a study's sealed runs beside the vllm rule
# set's registered predictions (per request, per run, per round); `vllm_agreement`
# compares every run with the predictor re-run on its observed arrival times (`rearrival
# compare` per run); `vllm_report` renders the section from those files, the decision
# tables and the prereg records only: as Markdown (reports/vllm.md), as the section file
# the HTML report composes (rules/engine_report.smk) and its figures as SVG.


rule vllm_tables:
    input:
        runs=replicate_run_dirs,
        ledger=rules.seal.output.record,
        plans=rules.plans.output.plans,
        predictions=rules.predict.output.predictions,
        requests=rules.predict.output.requests,
        channels=rules.channels.output.channels,
        selected=selected_input,
    output:
        requests=vllm_tables_path(table="requests"),
        runs=vllm_tables_path(table="runs"),
        rounds=vllm_tables_path(table="rounds"),
    log:
        "logs/vllm_tables/{study}.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
        values=values("predict"),
        selected=selected_option,
    shell:
        "rearrival study vllm-tables --config {params.config_file:q}"
        " --study {wildcards.study:q} --values {params.values} --plans {input.plans:q}"
        " --predictions {input.predictions:q} --requests {input.requests:q}"
        " --channels {input.channels:q} --ledger {input.ledger:q} {params.selected}"
        " --out-requests {output.requests:q}"
        " --out-runs {output.runs:q} --out-rounds {output.rounds:q} {input.runs:q}"
        " > {log:q} 2>&1"


rule vllm_agreement:
    input:
        runs=replicate_run_dirs,
        ledger=rules.seal.output.record,
        plans=rules.plans.output.plans,
        profile=profile_input,
    output:
        agreement=directory(vllm_agreement_path()),
    log:
        "logs/vllm_agreement/{study}.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
        values=values("predict"),
    shell:
        "rearrival study vllm-agreement --config {params.config_file:q}"
        " --study {wildcards.study:q} --values {params.values} --plans {input.plans:q}"
        " --profile {input.profile:q} --ledger {input.ledger:q} --out {output.agreement:q}"
        " {input.runs:q} > {log:q} 2>&1"


rule vllm_report:
    input:
        decisions=[decisions_path(name) for name in STUDY_NAMES],
        prereg=[prereg_path(name) for name in STUDY_NAMES],
        runs=[vllm_tables_path(name, "runs") for name in STUDY_NAMES],
        rounds=[vllm_tables_path(name, "rounds") for name in STUDY_NAMES],
        requests=[vllm_tables_path(name, "requests") for name in STUDY_NAMES],
        agreement=[vllm_agreement_path(name) for name in STUDY_NAMES],
    output:
        markdown=vllm_report_path(),
        section=vllm_section_path(),
        figures=directory(vllm_figures_path()),
    log:
        "logs/vllm_report.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
        values=values("report"),
        files=vllm_report_files,
    shell:
        "rearrival study vllm-report --config {params.config_file:q}"
        " --values {params.values} {params.files} --out {output.markdown:q}"
        " --section {output.section:q} --figures {output.figures:q} > {log:q} 2>&1"
