"""CLI verbs of the study stages (`rearrival study ...`): what each Snakemake rule calls.

One name per stage: rule ``X`` (rules/X.smk) calls ``rearrival study X``, which delegates
to ``rearrival.workflow.X`` or the library package doing the work. Every file a verb reads
or writes is an option or argument the rule fills from its declared inputs and outputs,
and every verb whose rule passes the digest of its config values checks it (``--values``,
``rearrival.commands.values``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from rearrival.commands.panels import PIPELINE_PANEL, PanelledGroup
from rearrival.commands.values import Values, checked_config
from rearrival.config.location import DEFAULT_CONFIG

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

Exploratory = Annotated[
    bool,
    typer.Option(
        "--exploratory",
        help="The exploratory second evaluation: predict or price with the other profile "
        "(published, or the calibrated one for a published study); never registered.",
    ),
]

DEFAULT_REPO = Path(".")


@contextlib.contextmanager
def _naming_selected() -> Iterator[None]:
    """Add the flag to the library's "needs the search's pick" error."""
    from rearrival.config.study import SelectionMissingError

    try:
        yield
    except SelectionMissingError as exc:
        raise SelectionMissingError(f"{exc}; pass --selected") from None


def plans(
    study: StudyName, out: Out, config: Config = DEFAULT_CONFIG, values: Values = None
) -> None:
    """Write every input plan of a study (one per N and replicate)."""
    from rearrival.workflow.plans import make_plans

    for path in make_plans(checked_config(config, "plans", study, values), study, out):
        typer.echo(str(path))


def predict(
    study: StudyName,
    plans: Plans,
    out: Out,
    requests: Annotated[
        Path,
        typer.Option("--requests", help="Parquet of the base simulator's per-request records."),
    ],
    evictions: Annotated[
        Path, typer.Option("--evictions", help="Parquet of the base simulator's KV evictions.")
    ],
    config: Config = DEFAULT_CONFIG,
    selected: Selected = None,
    profile: Profile = None,
    exploratory: Exploratory = False,
    values: Values = None,
) -> None:
    """Simulate every plan under every condition of a study (paper Section IV)."""
    from rearrival.workflow.predict import PredictionFiles
    from rearrival.workflow.predict import predict as run_predict

    cfg = checked_config(config, "predict", study, values)
    files = PredictionFiles(out, requests, evictions)
    with _naming_selected():
        made = run_predict(cfg, study, plans, files, selected, profile, exploratory)
    typer.echo(f"{out}: {len(made.summaries)} predictions")


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
    values: Values = None,
) -> None:
    """Commit the study's design, criteria, plan hashes and predictions to git."""
    from rearrival.workflow.preregister import preregister

    with _naming_selected():
        record = preregister(
            checked_config(config, "prereg", study, values),
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
    values: Values = None,
) -> None:
    """Run every condition of one replicate in its seeded shuffled order; a run that does
    not complete fails the stage (its record kept under --failed-runs)."""
    from rearrival.workflow.run import run_replicate

    with _naming_selected():
        paths = run_replicate(
            checked_config(config, "run", study, values),
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


def injection(out: Out, config: Config = DEFAULT_CONFIG, values: Values = None) -> None:
    """Prefill injection: background inter-token gaps per injected prefill size."""
    from rearrival.workflow.run import injection as run_injection

    frame = run_injection(checked_config(config, "injection", None, values), out)
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
    exploratory: Exploratory = False,
    values: Values = None,
) -> None:
    """Channel A and B (and reuse, steps, padding) for every run of a study."""
    from rearrival.workflow.channels import channels as run_channels

    frame = run_channels(
        checked_config(config, "predict", study, values),
        study,
        replicates,
        out,
        repo_dir=repo,
        profile_path=profile,
        ledger_record=ledger,
        exploratory=exploratory,
    )
    typer.echo(f"{out}: {len(frame)} runs")


def decide(
    study: StudyName,
    channels: Annotated[Path, typer.Option("--channels", help="Channel table.")],
    predictions: Predictions,
    out: Out,
    prereg: Annotated[
        Path | None,
        typer.Option("--prereg", help="Prereg record JSON (needed unless --exploratory)."),
    ] = None,
    config: Config = DEFAULT_CONFIG,
    repo: Repo = DEFAULT_REPO,
    ledger: Ledger = None,
    exploratory: Annotated[
        bool,
        typer.Option(
            "--exploratory",
            help="The exploratory second evaluation: the same rules on the other profile's "
            "predictions and channels, with the config's criteria; never registered.",
        ),
    ] = False,
    values: Values = None,
) -> None:
    """Apply the registered decision rules to the study's replicate-summed ratios."""
    from rearrival.errors import StageError
    from rearrival.workflow.decide import decide as run_decide
    from rearrival.workflow.decide import decide_exploratory

    cfg = checked_config(config, "decide", study, values)
    paths = {"channels_path": channels, "predictions_path": predictions, "out": out}
    if exploratory:
        decide_exploratory(cfg, study, repo_dir=repo, ledger_record=ledger, **paths)
    elif prereg is None:
        raise StageError(
            f"study {study}: a registered decision needs --prereg (or pass "
            "--exploratory for the exploratory evaluation)"
        )
    else:
        run_decide(cfg, study, prereg_path=prereg, repo_dir=repo, ledger_record=ledger, **paths)
    typer.echo(str(out))


def fixed_arrivals(
    study: StudyName,
    replicates: Annotated[
        list[Path],
        typer.Argument(help="The study's replicate run directories (results/runs/<study>/n*_r*)."),
    ],
    plans: Plans,
    channels: Annotated[Path, typer.Option("--channels", help="The study's channel table.")],
    out: Out,
    config: Config = DEFAULT_CONFIG,
    repo: Repo = DEFAULT_REPO,
    profile: Profile = None,
    ledger: Ledger = None,
    exploratory: Exploratory = False,
    values: Values = None,
) -> None:
    """The fixed-arrival simulator (Table XI) on every baseline run of a study."""
    from rearrival.workflow.fixed_arrivals import fixed_arrivals as run_fixed_arrivals

    frame = run_fixed_arrivals(
        checked_config(config, "predict", study, values),
        study,
        replicates,
        plans_dir=plans,
        channels_path=channels,
        repo_dir=repo,
        out=out,
        profile_path=profile,
        ledger_record=ledger,
        exploratory=exploratory,
    )
    typer.echo(f"{out}: {len(frame)} fixed-arrival predictions")


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
    from rearrival.config.study import load_study_config
    from rearrival.workflow.seal import seal as run_seal

    cfg = load_study_config(config) if config is not None else None
    record = run_seal(cfg, study, replicates, out, repo_dir=repo, prereg_path=prereg)
    typer.echo(f"{study}: {record['files']} files sealed at {record['commit']}")
    if cfg is not None and cfg.witness:
        typer.echo(f"{study}: registration and ledger commits published to {cfg.witness}")


def compile_configurations(
    study: StudyName,
    out: Out,
    config: Config = DEFAULT_CONFIG,
    selected: Selected = None,
    values: Values = None,
) -> None:
    """Compile every configuration of a study with optimum-rbln (backend rbln only)."""
    from rearrival.workflow.compile import compile_study

    cfg = checked_config(config, "compile", study, values)
    with _naming_selected():
        record = compile_study(cfg, study, out, selected)
    for name, entry in record["configurations"].items():
        typer.echo(f"{name}: {entry['artifact']}{' (reused)' if entry['reused'] else ''}")


def capacity(
    pool: Annotated[Path, typer.Option("--pool", help="The capacity section's pool.")],
    out: Out,
    config: Config = DEFAULT_CONFIG,
    values: Values = None,
    profile: Annotated[
        Path | None, typer.Option("--profile", help="The capacity section's profile file.")
    ] = None,
) -> None:
    """The capacity stage (docs/DESIGN.md §17): `rearrival capacity` with the options of
    the study definition's capacity: section, on the files its rule declares."""
    from rearrival.commands.capacity import CapacityOptionError, capacity_command

    cfg = checked_config(config, "capacity", None, values)
    if cfg.capacity is None:
        raise CapacityOptionError(
            f"{config}: no capacity: section; add one (docs/DESIGN.md §17) to run the stage"
        )
    options = cfg.capacity.command_options() | {"pool": pool, "out": out}
    options["profile"] = profile
    capacity_command(**options)


def show_config(config: Config = DEFAULT_CONFIG) -> None:
    """Print the study definition as the workflow reads it: every key, the defaults of
    the keys the file leaves out filled in (the section models are their one source)."""
    import yaml

    from rearrival.config.study import effective_definition, load_study_config

    typer.echo(yaml.safe_dump(effective_definition(load_study_config(config)), sort_keys=False))


def show_schema() -> None:
    """Print the JSON schema of the study definition (as YAML), drawn from the section
    models, its one source; config/schema.yaml is this output (`rearrival study schema >
    config/schema.yaml` after a model changes)."""
    from rearrival.config.study import schema_text

    typer.echo(schema_text(), nl=False)


def register(app: typer.Typer) -> None:
    """Add the `study` group: one verb per Snakemake rule (rule X calls `rearrival study
    X`; an `X_exploratory` rule calls it with --exploratory), `study config` and `study
    schema`.
    Calibration and search are also top-level verbs for use outside the workflow; here
    they are the same functions under the stage's name. `study report` renders from the
    files its rule declares, `rearrival tables` from a whole results tree."""
    from rearrival.commands.calibrate import calibrate, calibrate_compile
    from rearrival.commands.fleet_study import VERBS as FLEET_VERBS
    from rearrival.commands.report import study_report
    from rearrival.commands.search import search_app
    from rearrival.commands.vllm_study import (
        engine_report,
        vllm_agreement,
        vllm_report,
        vllm_tables,
    )

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
        "fixed-arrivals": fixed_arrivals,
        "capacity": capacity,
        "report": study_report,
        "vllm-tables": vllm_tables,
        "vllm-agreement": vllm_agreement,
        "vllm-report": vllm_report,
        "engine-report": engine_report,
        "config": show_config,
        "schema": show_schema,
        **FLEET_VERBS,
    }
    for name, verb in verbs.items():
        study_app.command(name)(verb)
    study_app.add_typer(
        search_app(stage=True), name="search", help="The configuration search stages."
    )
    app.add_typer(study_app, name="study", rich_help_panel=PIPELINE_PANEL)
