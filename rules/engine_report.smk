# The HTML report of studies on real serving engines (docs/DESIGN.md §13, §15), where the
# paper's RBLN report (rules/report.smk) is not run: reports/report.html composed of the
# section files their stages wrote (rules/vllm_report.smk writes the vLLM studies'), in
# the order engine_section_files lists them; it reads nothing else.


rule engine_report:
    input:
        sections=engine_section_files,
    output:
        html=engine_report_path(),
    log:
        "logs/engine_report.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
        values=values("report"),
    shell:
        "rearrival study engine-report --config {params.config_file:q}"
        " --values {params.values} --html {output.html:q} {input.sections:q} > {log:q} 2>&1"
