"""CLI verbs of the study on a real fleet (`rearrival study fleet-*`; rules/fleet.smk,
docs/DESIGN.md §18): its open plans, its registration, one run on a fresh fleet, the
decisions and the report section. Sealing is `rearrival study seal` and the per-run
comparison `rearrival compare`, the verbs every study uses."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rearrival.commands.values import Values, checked_config

Config = Annotated[Path, typer.Option("--config", help="Study definition (config/fleet.yaml).")]
Plans = Annotated[Path, typer.Option("--plans", help="The fleet study's plans directory.")]
Out = Annotated[Path, typer.Option("--out", help="Output file or directory.")]
Repo = Annotated[Path, typer.Option("--repo", help="Git repository with preregistration/.")]
Keyed = Annotated[
    list[str],
    typer.Argument(help="r<rep>/<condition>=<directory>, one per run (or its comparison)."),
]
DEFAULT_CONFIG = Path("config/fleet.yaml")
DEFAULT_REPO = Path(".")
STAGE = "fleet"


def _keyed(pairs: list[str]) -> dict[str, Path]:
    """``key=path`` arguments as a mapping; a bad one is one line naming it."""
    out = {}
    for pair in pairs:
        key, sep, path = pair.partition("=")
        if not sep or not key or not path:
            raise typer.BadParameter(f"{pair!r}: give r<rep>/<condition>=<directory>")
        out[key] = Path(path)
    return out


def fleet_plans(out: Out, config: Config = DEFAULT_CONFIG, values: Values = None) -> None:
    """Write the fleet study's open plans, one per replicate (Poisson session starts)."""
    from rearrival.workflow.fleet import write_fleet_plans

    written = write_fleet_plans(checked_config(config, STAGE, None, values), out)
    typer.echo(f"{out}: {len(written)} open plan(s)")


def fleet_prereg(
    plans: Plans,
    out: Out,
    config: Config = DEFAULT_CONFIG,
    repo: Repo = DEFAULT_REPO,
    values: Values = None,
) -> None:
    """Commit the fleet study's predictions, criteria, design, plans and profile."""
    from rearrival.workflow.fleet import preregister_fleet

    record = preregister_fleet(checked_config(config, STAGE, None, values), plans, repo, out)
    typer.echo(f"{record}: registered")


def fleet_run(
    condition: Annotated[str, typer.Option("--condition", help="<policy>-<configuration>.")],
    replicate: Annotated[int, typer.Option("--replicate", min=0, help="Replicate.")],
    plans: Plans,
    out: Out,
    failed_runs: Annotated[
        Path, typer.Option("--failed-runs", help="Where a failed run's record is kept.")
    ],
    config: Config = DEFAULT_CONFIG,
    repo: Repo = DEFAULT_REPO,
    values: Values = None,
) -> None:
    """One condition's run on a fresh fleet (two vLLM servers behind vllm-router)."""
    from rearrival.measure.process_groups import Interrupted
    from rearrival.workflow.fleet import run_fleet_condition

    cfg = checked_config(config, STAGE, None, values)
    try:
        run = run_fleet_condition(
            cfg,
            condition,
            replicate,
            plans_dir=plans,
            repo_dir=repo,
            out_dir=out,
            failed_dir=failed_runs,
        )
    except Interrupted as stop:
        raise stop.naming(f"{stop}: {out}") from None
    typer.echo(f"{run} complete")


def fleet_decide(
    comparisons: Keyed,
    out: Out,
    config: Config = DEFAULT_CONFIG,
    repo: Repo = DEFAULT_REPO,
    values: Values = None,
) -> None:
    """Decide every registered criterion on the runs' observed counts."""
    from rearrival.workflow.fleet import decide_fleet

    table = decide_fleet(
        checked_config(config, STAGE, None, values), _keyed(comparisons), repo, out
    )
    held = int((table["verdict"] == "holds").sum())
    typer.echo(f"{out}: {held} of {len(table)} decisions hold")


def fleet_report(
    comparisons: Keyed,
    decisions: Annotated[Path, typer.Option("--decisions", help="The decision stage's folder.")],
    prereg: Annotated[Path, typer.Option("--prereg", help="The registration record.")],
    runs: Annotated[
        list[str], typer.Option("--run", help="r<rep>/<condition>=<run directory>, per run.")
    ],
    out: Out,
    config: Config = DEFAULT_CONFIG,
    values: Values = None,
) -> None:
    """Render reports/fleet.md and its figures from the declared files only."""
    from rearrival.report.fleet import FleetReportInputs, write_fleet_report
    from rearrival.workflow.fleet import fleet_of

    fleet = fleet_of(checked_config(config, STAGE, None, values))
    inputs = FleetReportInputs(
        description=fleet.description,
        decisions_dir=decisions,
        prereg_record=prereg,
        comparisons=_keyed(comparisons),
        runs=_keyed(runs),
    )
    typer.echo(f"{write_fleet_report(inputs, out)} written")


VERBS = {
    "fleet-plans": fleet_plans,
    "fleet-prereg": fleet_prereg,
    "fleet-run": fleet_run,
    "fleet-decide": fleet_decide,
    "fleet-report": fleet_report,
}
