"""The one-off ``rearrival decide --table`` verb (registered by rearrival.cli): the paper's
decision rules re-applied to a published table. Not the pipeline's decide stage, which is
``rearrival study decide`` (rules/decide.smk -> rearrival.workflow.decide)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rearrival.commands.panels import PIPELINE_PANEL


def register(app: typer.Typer) -> None:
    """Add this area's verbs to the top-level app."""
    app.command("decide", rich_help_panel=PIPELINE_PANEL)(rejudge)


def rejudge(
    table: Annotated[
        Path,
        typer.Option(
            "--table",
            help="Comparison CSV: comparison,n,ratio_pred,ratio_obs_a,ratio_obs_b,"
            "rule,r_base_s,b_base_s.",
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Write the judged CSV here (atomically) instead of stdout."),
    ] = None,
    criteria: Annotated[
        Path | None,
        typer.Option(
            "--criteria", help="Preregistered criteria JSON; default: the paper's thresholds."
        ),
    ] = None,
) -> None:
    """Re-judge a comparison table with the paper's decision rules (Sections II-D, IV).

    Adds tau, channel_diff, error and verdict (pass, fail, withheld or exploratory).
    Rule 'fixed' uses tau 0.02; rule 'tau' uses max(0.02, r_base_s / b_base_s) from the
    baseline sums over the study's replicates (as many as the config's replicates:).
    With the paper's criteria (the default; --criteria gives the registered ones)
    confirmatory N 6 and 8 pass when the error is at most 0.03 and prediction and
    observation share a side of 1 or both lie in the band 0.98 to 1.02; other N are
    exploratory. See docs/DESIGN.md §9.
    """
    from rearrival.judge.decide import DEFAULT_CRITERIA, decide_table, load_criteria

    rules = DEFAULT_CRITERIA if criteria is None else load_criteria(criteria)
    text = decide_table(table, out, criteria=rules)
    if out is None:
        typer.echo(text, nl=False)
    else:
        typer.echo(f"{out}: {text.count(chr(10)) - 1} comparisons judged", err=True)
