"""CLI verbs of the study stages (`rearrival study ...`): what each Snakemake rule calls.

One name per stage: rule ``X`` (rules/X.smk) calls ``rearrival study X``, which delegates
to ``rearrival.workflow.X`` or the library package doing the work. Every file a verb reads
or writes is an option or argument the rule fills from its declared inputs and outputs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from rearrival.commands.panels import PIPELINE_PANEL, PanelledGroup

Config = Annotated[Path, typer.Option("--config", help="Study definition (config.yaml).")]
StudyName = Annotated[str, typer.Option("--study", help="Study name under studies:.")]
Plans = Annotated[Path, typer.Option("--plans", help="The study's plans directory.")]
Predictions = Annotated[Path, typer.Option("--predictions", help="Predictions Parquet.")]
Out = Annotated[Path, typer.Option("--out", help="Output file or directory.")]
Selected = Annotated[
    Path | None,
    typer.Option(
        "--selected",
        help="Search result (results/search/selected.json); needed by studies "
        "comparing 'selected'.",
    ),
]
Repo = Annotated[Path, typer.Option("--repo", help="Git repository with preregistration/.")]
PreregRecord = Annotated[
    Path | None,
    typer.Option(
        "--prereg",
        help="The prereg stage's record (results/prereg/<study>.json); it must name a "
        "registration of the study on HEAD's history.",
    ),
]
Profile = Annotated[
    Path | None,
    typer.Option(
        "--profile",
        help="Profile YAML the config's profile: names (calibrated: the calibrate stage's "
        "results/calibration/profile.yaml); none for published.",
    ),
]
Ledger = Annotated[
    Path | None,
    typer.Option(
        "--ledger",
        help="The seal stage's record (results/ledger/<study>.json); it must name the "
        "commit of the study's ledger at HEAD.",
    ),
]

DEFAULT_CONFIG = Path("config/config.yaml")
DEFAULT_REPO = Path(".")


def _config(path: Path):
    from rearrival.config.study import load_study_config

    return load_study_config(path)


@contextlib.contextmanager
def _naming_selected() -> Iterator[None]:
    """Add the flag to the library's "needs the search's pick" error."""
    from rearrival.config.study import SelectionMissingError

    try:
        yield
    except SelectionMissingError as exc:
        raise SelectionMissingError(f"{exc}; pass --selected") from None


def plans(study: StudyName, out: Out, config: Config = DEFAULT_CONFIG) -> None:
    """Write every input plan of a study (one per N and replicate)."""
    from rearrival.workflow.plans import make_plans

    for path in make_plans(_config(config), study, out):
        typer.echo(str(path))


def predict(
    study: StudyName,
    plans: Plans,
    out: Out,
    config: Config = DEFAULT_CONFIG,
    selected: Selected = None,
    profile: Profile = None,
) -> None:
    """Simulate every plan under every condition of a study (paper Section IV)."""
    from rearrival.workflow.predict import predict as run_predict

    with _naming_selected():
        frame = run_predict(_config(config), study, plans, out, selected, profile)
    typer.echo(f"{out}: {len(frame)} predictions")


def prereg(
    study: StudyName,
    plans: Plans,
    predictions: Predictions,
    out: Out,
    config: Config = DEFAULT_CONFIG,
    selected: Selected = None,
    repo: Repo = DEFAULT_REPO,
    profile: Profile = None,
    amended: Annotated[
        Path | None,
        typer.Option(
            "--amended",
            help="Decision table of the study this one amends (results/decisions/<name>.csv).",
        ),
    ] = None,
) -> None:
    """Commit the study's design, criteria, plan hashes and predictions to git."""
    from rearrival.workflow.preregister import preregister

    with _naming_selected():
        record = preregister(
            _config(config),
            study,
            plans_dir=plans,
            predictions_path=predictions,
            repo_dir=repo,
            records_dir=out.parent,
            selected_path=selected,
            profile_path=profile,
            amended_decisions=amended,
        )
    typer.echo(f"{study}: registered at {record['commit']} ({record['committed_at']})")


def run(
    study: StudyName,
    n: Annotated[int, typer.Option("--n", min=1, help="Concurrent sessions N.")],
    replicate: Annotated[int, typer.Option("--replicate", min=0, help="Replicate.")],
    plans: Plans,
    out: Out,
    config: Config = DEFAULT_CONFIG,
    selected: Selected = None,
    repo: Repo = DEFAULT_REPO,
    compiled: Annotated[
        Path | None, typer.Option("--compiled", help="Compile record of the study (backend rbln).")
    ] = None,
    prereg: PreregRecord = None,
    failed_runs: Annotated[
        Path | None,
        typer.Option("--failed-runs", help="Keep the records of runs that did not complete here."),
    ] = None,
) -> None:
    """Run every condition of one replicate in its seeded shuffled order; a run that does
    not complete fails the stage (its record kept under --failed-runs)."""
    from rearrival.workflow.run import run_replicate

    with _naming_selected():
        paths = run_replicate(
            _config(config),
            study,
            n,
            replicate,
            plans_dir=plans,
            out_dir=out,
            repo_dir=repo,
            selected_path=selected,
            compile_record=compiled,
            prereg_path=prereg,
            failed_dir=failed_runs,
        )
    for path in paths:
        typer.echo(str(path))


def injection(out: Out, config: Config = DEFAULT_CONFIG) -> None:
    """Prefill injection: background inter-token gaps per injected prefill size."""
    from rearrival.workflow.run import injection as run_injection

    frame = run_injection(_config(config), out)
    typer.echo(f"{out}: {len(frame)} gaps")


def channels(
    study: StudyName,
    replicates: Annotated[
        list[Path],
        typer.Argument(help="The study's replicate run directories (results/runs/<study>/n*_r*)."),
    ],
    out: Out,
    config: Config = DEFAULT_CONFIG,
    repo: Repo = DEFAULT_REPO,
    profile: Profile = None,
    ledger: Ledger = None,
) -> None:
    """Channel A and B (and reuse, steps, padding) for every run of a study."""
    from rearrival.workflow.channels import channels as run_channels

    frame = run_channels(
        _config(config),
        study,
        replicates,
        out,
        repo_dir=repo,
        profile_path=profile,
        ledger_record=ledger,
    )
    typer.echo(f"{out}: {len(frame)} runs")


def decide(
    study: StudyName,
    channels: Annotated[Path, typer.Option("--channels", help="Channel table.")],
    predictions: Predictions,
    prereg: Annotated[Path, typer.Option("--prereg", help="Prereg record JSON.")],
    out: Out,
    config: Config = DEFAULT_CONFIG,
    repo: Repo = DEFAULT_REPO,
    ledger: Ledger = None,
) -> None:
    """Apply the registered decision rules to the study's replicate-summed ratios."""
    from rearrival.workflow.decide import decide as run_decide

    run_decide(
        _config(config),
        study,
        channels_path=channels,
        predictions_path=predictions,
        prereg_path=prereg,
        repo_dir=repo,
        out=out,
        ledger_record=ledger,
    )
    typer.echo(str(out))


def seal(
    study: StudyName,
    replicates: Annotated[
        list[Path],
        typer.Argument(help="The study's replicate run directories (results/runs/<study>/n*_r*)."),
    ],
    out: Out,
    repo: Repo = DEFAULT_REPO,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", help="Study definition; its signing: and witness: settings apply."
        ),
    ] = None,
    prereg: PreregRecord = None,
) -> None:
    """Commit the sha256 of every run record file of a study (ledger/<study>.json).

    A sealed hash is never overwritten: changed or re-run records are refused unless
    re-measured under a newer registration. With witness: set, the ledger is published.
    """
    from rearrival.workflow.seal import seal as run_seal

    cfg = _config(config) if config is not None else None
    record = run_seal(cfg, study, replicates, out, repo_dir=repo, prereg_path=prereg)
    typer.echo(f"{study}: {record['files']} files sealed at {record['commit']}")
    if cfg is not None and cfg.witness:
        typer.echo(f"{study}: registration and ledger commits published to {cfg.witness}")


def compile_configurations(
    study: StudyName, out: Out, config: Config = DEFAULT_CONFIG, selected: Selected = None
) -> None:
    """Compile every configuration of a study with optimum-rbln (backend rbln only)."""
    from rearrival.workflow.compile import compile_study

    with _naming_selected():
        record = compile_study(_config(config), study, out, selected)
    for name, entry in record["configurations"].items():
        typer.echo(f"{name}: {entry['artifact']}{' (reused)' if entry['reused'] else ''}")


def register(app: typer.Typer) -> None:
    """Add the `study` group: one verb per Snakemake rule (rule X calls `rearrival study
    X`). Calibration, search and report are also top-level verbs for use outside the
    workflow; here they are the same functions under the stage's name."""
    from rearrival.commands.calibrate import calibrate, calibrate_compile
    from rearrival.commands.report import tables
    from rearrival.commands.search import search_app

    study_app = typer.Typer(
        cls=PanelledGroup,
        help="Pipeline stages (one per Snakemake rule; called by the Snakefile).",
        no_args_is_help=True,
    )
    verbs = {
        "calibrate-compile": calibrate_compile,
        "calibrate": calibrate,
        "plans": plans,
        "predict": predict,
        "prereg": prereg,
        "compile": compile_configurations,
        "run": run,
        "injection": injection,
        "seal": seal,
        "channels": channels,
        "decide": decide,
        "report": tables,
    }
    for name, verb in verbs.items():
        study_app.command(name)(verb)
    study_app.add_typer(
        search_app(stage=True), name="search", help="The configuration search stages."
    )
    app.add_typer(study_app, name="study", rich_help_panel=PIPELINE_PANEL)
