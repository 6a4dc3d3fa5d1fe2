"""CLI verbs of a vLLM study's report section (`rearrival study vllm-tables`, `rearrival
study vllm-report`, `rearrival study engine-report`; rules/vllm_report.smk, docs/DESIGN.md
§15): the tables that compare its runs on real vLLM servers with the vllm rule set, the
section rendered from them and the decision tables (Markdown, the HTML report's section
file, SVG figures), and the HTML report composed of such section files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from rearrival.commands.values import Values, checked_config
from rearrival.config.location import DEFAULT_CONFIG

# The options of the study verbs (rearrival.commands.study), spelled alike.
Config = Annotated[Path, typer.Option("--config", help="Study definition (config.yaml).")]
StudyName = Annotated[str, typer.Option("--study", help="Study name under studies:.")]
Plans = Annotated[Path, typer.Option("--plans", help="The study's plans directory.")]
Predictions = Annotated[Path, typer.Option("--predictions", help="Predictions Parquet.")]
Out = Annotated[Path, typer.Option("--out", help="Output file or directory.")]
Repo = Annotated[Path, typer.Option("--repo", help="Git repository with preregistration/.")]
Selected = Annotated[
    Path | None,
    typer.Option("--selected", help="The study's search result (its selected.json)."),
]
Ledger = Annotated[
    Path | None,
    typer.Option("--ledger", help="The seal stage's record (results/ledger/<study>.json)."),
]
DEFAULT_REPO = Path(".")


def vllm_tables(
    study: StudyName,
    replicates: Annotated[
        list[Path],
        typer.Argument(help="The study's replicate run directories (results/runs/<study>/n*_r*)."),
    ],
    plans: Plans,
    predictions: Predictions,
    requests: Annotated[
        Path, typer.Option("--requests", help="The predict stage's per-request table.")
    ],
    channels: Annotated[Path, typer.Option("--channels", help="The study's channel table.")],
    out_requests: Annotated[Path, typer.Option("--out-requests", help="Requests table to write.")],
    out_runs: Annotated[Path, typer.Option("--out-runs", help="Runs table to write.")],
    out_rounds: Annotated[Path, typer.Option("--out-rounds", help="Rounds table to write.")],
    config: Config = DEFAULT_CONFIG,
    repo: Repo = DEFAULT_REPO,
    selected: Selected = None,
    ledger: Ledger = None,
    values: Values = None,
) -> None:
    """A vLLM study's sealed runs beside the vllm rule set's registered predictions, per
    request, per run and per round (cached tokens, device time, recomputed prefill)."""
    from rearrival.workflow.vllm_tables import VllmTableFiles, VllmTableInputs, vllm_study_tables

    vllm_study_tables(
        checked_config(config, "predict", study, values),
        study,
        replicates,
        VllmTableInputs(plans, predictions, requests, channels, ledger, selected),
        VllmTableFiles(out_requests, out_runs, out_rounds),
        repo_dir=repo,
    )
    typer.echo(f"{out_runs}: the vLLM tables of study {study}")


def vllm_agreement(
    study: StudyName,
    replicates: Annotated[
        list[Path],
        typer.Argument(help="The study's replicate run directories (results/runs/<study>/n*_r*)."),
    ],
    plans: Plans,
    profile: Annotated[Path, typer.Option("--profile", help="The study's vLLM profile file.")],
    out: Out,
    config: Config = DEFAULT_CONFIG,
    repo: Repo = DEFAULT_REPO,
    ledger: Ledger = None,
    values: Values = None,
) -> None:
    """Every sealed run of a vLLM study against the predictor re-run on its observed
    arrivals (`rearrival compare` per run), one directory per run under --out."""
    from rearrival.workflow.vllm_tables import vllm_agreement as compare_study

    bugs = compare_study(
        checked_config(config, "predict", study, values),
        study,
        replicates,
        plans_dir=plans,
        profile_path=profile,
        repo_dir=repo,
        out_dir=out,
        ledger_record=ledger,
    )
    for bug in bugs:  # the report shows them; the stage does not hide a study's runs
        typer.echo(f"rearrival: PREDICTOR BUG: {bug}", err=True)
    typer.echo(f"{out}: every complete run of study {study} compared")


def vllm_report(
    studies: Annotated[list[str], typer.Option("--study", help="A vLLM study (repeatable).")],
    decisions: Annotated[list[Path], typer.Option("--decisions", help="Per study, in order.")],
    prereg: Annotated[list[Path], typer.Option("--prereg", help="Per study, in order.")],
    runs: Annotated[list[Path], typer.Option("--runs", help="Per study, in order.")],
    rounds: Annotated[list[Path], typer.Option("--rounds", help="Per study, in order.")],
    requests: Annotated[list[Path], typer.Option("--requests", help="Per study, in order.")],
    agreement: Annotated[list[Path], typer.Option("--agreement", help="Per study, in order.")],
    out: Out,
    section: Annotated[
        Path, typer.Option("--section", help="The section file the HTML report reads.")
    ],
    figures: Annotated[Path, typer.Option("--figures", help="Directory of the SVG figures.")],
    config: Config = DEFAULT_CONFIG,
    values: Values = None,
) -> None:
    """The report section of the vLLM studies from the declared files only: as Markdown
    (--out, its figures linked), as the section file of the HTML report (--section) and
    its figures as SVG (--figures)."""
    import pandas as pd

    from rearrival.atomic import atomic_write_text
    from rearrival.errors import StageError
    from rearrival.parquet import read_frame
    from rearrival.report.sections import relative_dir, section_markdown, write_section
    from rearrival.report.vllm import VllmSection, vllm_section

    checked_config(config, "report", None, values)
    given = (decisions, prereg, runs, rounds, requests, agreement)
    if not all(len(x) == len(studies) for x in given):
        raise StageError(
            "vllm-report: give --decisions, --prereg, --runs, --rounds, --requests and "
            "--agreement once per --study, in the same order"
        )
    inputs = []
    for study, files in zip(studies, zip(*given, strict=True), strict=True):
        decision_file, prereg_file, runs_file, rounds_file, requests_file, agreement_dir = files
        inputs.append(
            VllmSection(
                study,
                json.loads(prereg_file.read_text()),
                pd.read_csv(decision_file),
                read_frame(runs_file, "vllm-tables"),
                read_frame(rounds_file, "vllm-tables"),
                read_frame(requests_file, "vllm-tables"),
                sorted(p.parent for p in agreement_dir.glob("*/*/summary.json")),
            )
        )
    built = vllm_section(inputs)
    write_section(built, section, figures)
    atomic_write_text(out, section_markdown(built, relative_dir(figures, out.parent), level=1))
    typer.echo(str(out))


def engine_report(
    sections: Annotated[
        list[Path],
        typer.Argument(help="Section files, in the order the report shows them."),
    ],
    html: Annotated[Path, typer.Option("--html", help="The HTML report to write.")],
    config: Config = DEFAULT_CONFIG,
    values: Values = None,
) -> None:
    """The HTML report of studies on real engines, composed of their section files only."""
    from rearrival.report.engine import write_engine_report

    write_engine_report(checked_config(config, "report", None, values), sections, html)
    typer.echo(str(html))
