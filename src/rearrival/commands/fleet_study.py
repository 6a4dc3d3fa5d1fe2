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
Comparisons = Annotated[
    list[Path],
    typer.Argument(
        help="Every run's comparison folder (results/fleet/compare/<condition>_r<rep>)."
    ),
]
DEFAULT_CONFIG = Path("config/fleet.yaml")
DEFAULT_REPO = Path(".")
STAGE = "fleet"


def _keyed(folders: list[Path]) -> dict[str, Path]:
    """Each ``<condition>_r<rep>`` folder by its key ``r<rep>/<condition>``."""
    from rearrival.workflow.fleet import run_key

    return {run_key(folder)[0]: folder for folder in folders}


Pool = Annotated[Path, typer.Option("--pool", help="The fleet section's pool file.")]
Profile = Annotated[Path, typer.Option("--profile", help="The study's vLLM profile.")]
Prereg = Annotated[Path, typer.Option("--prereg", help="The registration record.")]


def fleet_plans(
    pool: Pool, out: Out, config: Config = DEFAULT_CONFIG, values: Values = None
) -> None:
    """Write the fleet study's open plans, one per replicate (Poisson session starts)."""
    from rearrival.workflow.fleet import write_fleet_plans

    written = write_fleet_plans(checked_config(config, STAGE, None, values), pool, out)
    typer.echo(f"{out}: {len(written)} open plan(s)")


def fleet_prereg(
    plans: Plans,
    profile: Profile,
    out: Out,
    config: Config = DEFAULT_CONFIG,
    repo: Repo = DEFAULT_REPO,
    values: Values = None,
) -> None:
    """Commit the fleet study's predictions, criteria, design, plans and profile."""
    from rearrival.workflow.fleet import preregister_fleet

    cfg = checked_config(config, STAGE, None, values)
    record = preregister_fleet(cfg, plans, profile, repo, out)
    typer.echo(f"{record}: registered")


def fleet_run(
    condition: Annotated[str, typer.Option("--condition", help="<policy>-<configuration>.")],
    replicate: Annotated[int, typer.Option("--replicate", min=0, help="Replicate.")],
    plans: Plans,
    prereg: Prereg,
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


def fleet_compare(
    run: Annotated[Path, typer.Option("--run", help="The run's folder (<condition>_r<rep>).")],
    plans: Plans,
    profile: Profile,
    ledger: Annotated[Path, typer.Option("--ledger", help="The seal stage's record.")],
    out: Out,
    config: Config = DEFAULT_CONFIG,
    repo: Repo = DEFAULT_REPO,
    values: Values = None,
) -> None:
    """`rearrival compare` on one sealed run of the study: the fleet predictor on its
    observed arrivals and placement (exit 1 on a predictor error, after writing)."""
    from rearrival.commands.compare import compare_fleet
    from rearrival.measure.records import read_run
    from rearrival.model.cost.vllm_profile import load_vllm_profile
    from rearrival.model.plans.plan import load_plan
    from rearrival.prereg.ledger import require_sealed
    from rearrival.workflow.fleet import fleet_of, plan_name, run_key

    fleet = fleet_of(checked_config(config, STAGE, None, values))
    require_sealed(repo, fleet.study, [run], ledger)
    _, label, rep = run_key(run)
    plan = plans / plan_name(rep)
    compare_fleet(read_run(run / label), load_plan(plan), load_vllm_profile(profile), plan, out)


def fleet_decide(
    comparisons: Comparisons,
    out: Out,
    config: Config = DEFAULT_CONFIG,
    repo: Repo = DEFAULT_REPO,
    values: Values = None,
) -> None:
    """Decide every registered criterion on the runs' observed counts."""
    from rearrival.workflow.fleet import decide_fleet

    decisions = decide_fleet(
        checked_config(config, STAGE, None, values), _keyed(comparisons), repo, out
    )
    held = sum(d["verdict"] == "holds" for d in decisions)
    typer.echo(f"{out}: {held} of {len(decisions)} decisions hold")


def fleet_report(
    comparisons: Comparisons,
    decisions: Annotated[Path, typer.Option("--decisions", help="The decision stage's folder.")],
    prereg: Prereg,
    runs: Annotated[
        list[Path], typer.Option("--run", help="Every run's folder (<condition>_r<rep>).")
    ],
    out: Out,
    section: Annotated[
        Path, typer.Option("--section", help="The section file the HTML report reads.")
    ],
    figures: Annotated[Path, typer.Option("--figures", help="Directory of the SVG figures.")],
    config: Config = DEFAULT_CONFIG,
    values: Values = None,
) -> None:
    """The fleet study's report section from the declared files only: as Markdown (--out,
    its figures linked), as the section file of the HTML report (--section) and its
    figures as SVG (--figures)."""
    from rearrival.atomic import atomic_write_text
    from rearrival.report.fleet import FleetReportInputs, fleet_section
    from rearrival.report.sections import relative_dir, section_markdown, write_section
    from rearrival.workflow.fleet import fleet_of, run_key

    fleet = fleet_of(checked_config(config, STAGE, None, values))
    inputs = FleetReportInputs(
        description=fleet.description,
        decisions_dir=decisions,
        prereg_record=prereg,
        comparisons=_keyed(comparisons),
        runs={key: folder / run_key(folder)[1] for key, folder in _keyed(runs).items()},
    )
    built = fleet_section(inputs)
    write_section(built, section, figures)
    atomic_write_text(out, section_markdown(built, relative_dir(figures, out.parent), level=1))
    typer.echo(f"{out} written")


VERBS = {
    "fleet-plans": fleet_plans,
    "fleet-prereg": fleet_prereg,
    "fleet-run": fleet_run,
    "fleet-compare": fleet_compare,
    "fleet-decide": fleet_decide,
    "fleet-report": fleet_report,
}
