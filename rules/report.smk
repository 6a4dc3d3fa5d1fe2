# Stage 8: every paper table (CSV, Markdown, LaTeX), the figures and one HTML report,
# rendered from results only; `rearrival tables` re-renders without rerunning anything.


rule report:
    input:
        decisions=expand("results/decisions/{study}.csv", study=STUDY_NAMES),
        search="results/search/summary.json",
        injection="results/injection/gaps.parquet",
        calibration="results/calibration/profile.yaml",
    output:
        html=report("reports/report.html", category="Report"),
    log:
        "logs/report.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
    shell:
        "rearrival tables --config {params.config_file:q} --results results --out reports"
        " > {log:q} 2>&1"
