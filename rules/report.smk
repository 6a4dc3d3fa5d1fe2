# Stage 8: every paper table (CSV, Markdown, LaTeX), the figures and one HTML report,
# rendered from results only; `rearrival tables` re-renders without rerunning anything.


rule report:
    input:
        unpack(report_inputs),
    output:
        html=report("reports/report.html", category="Report"),
        tables=directory("reports/tables"),
        figures=directory("reports/figures"),
    log:
        "logs/report.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
        values=constant("report"),
        results=results_root,
        out=lambda wildcards, output: str(Path(output.html).parent),
    shell:
        "rearrival tables --config {params.config_file:q} --results {params.results:q}"
        " --out {params.out:q} > {log:q} 2>&1"
