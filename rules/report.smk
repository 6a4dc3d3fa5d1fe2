# Stage 8: every paper table (CSV, Markdown, LaTeX), the figures and one HTML report,
# rendered from results only; `rearrival tables` re-renders without rerunning anything.
# The scorecard's second, exploratory evaluation under the other profile (published, or
# the calibrated one for a published study) is recomputed here from the declared plans,
# run records and search pick; it is never registered (rearrival.report.recompute).
# `snakemake --report` shows each table (its CSV, grouped by family) and each figure as
# its own item, captioned from rules/report/.
from rearrival.report.tables import table_family


rule report:
    input:
        unpack(report_inputs),
    output:
        html=report("reports/report.html", caption="report/report.rst", category="Report"),
        tables=report(
            directory("reports/tables"),
            patterns=["table_{table}.csv", "{table,scorecard}.csv"],
            caption="report/tables.rst",
            category="Tables",
            subcategory=lambda wildcards: table_family(wildcards.table),
            labels={"table": "{table}"},
        ),
        figures=report(
            directory("reports/figures"),
            patterns=["{figure}.svg"],
            caption="report/figures.rst",
            category="Figures",
            labels={"figure": "{figure}"},
        ),
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
