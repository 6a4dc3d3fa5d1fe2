# Stage 8: every paper table (CSV, Markdown, LaTeX), the figures and one HTML report,
# rendered from results only: the rule declares every file the report reads and the
# command is given exactly those (rearrival.report.results reads nothing else), among
# them the exploratory evaluation's tables under results/exploratory/<profile>/ that the
# scorecard's second evaluation rests on. `rearrival tables` re-renders without rerunning
# anything. `snakemake --report` shows each table (its CSV, grouped by family) and each
# figure as its own item, captioned from rules/report/.
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
        values=values("report"),
        profile=profile_option,
        files=report_files,
    shell:
        "rearrival study report --config {params.config_file:q} --values {params.values}"
        " {params.profile} --html {output.html:q} --tables {output.tables:q}"
        " --figures {output.figures:q} {params.files} > {log:q} 2>&1"
