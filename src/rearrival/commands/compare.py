"""The ``rearrival compare`` verb (registered by rearrival.cli): one real vLLM run set
beside the predictor's vLLM rules re-run with its observed arrivals
(rearrival.judge.vllm_agreement; docs/DESIGN.md §15 "Agreement")."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

# Exit code when requests the predicted pool never evicted before admitting disagree
# with vLLM: the files are written (the evidence is kept), but no caller may go on as if
# the comparison were sound. User errors exit 2, as everywhere.
PREDICTOR_BUG_EXIT = 1


def register(app: typer.Typer) -> None:
    """Add this area's verbs to the top-level app."""
    app.command("compare")(compare)


def compare(
    run_dir: Annotated[
        Path,
        typer.Option(
            "--run",
            help="A complete, sealed run of `rearrival run --backend vllm`, or of a fleet "
            "(vLLM servers behind vllm-router: compared on its observed placement).",
        ),
    ],
    profile: Annotated[
        Path,
        typer.Option("--profile", help="vLLM profile YAML of the model and device the run served."),
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out", help="Directory to write (requests.parquet, summary.json); replaced whole."
        ),
    ],
    plan_path: Annotated[
        Path | None,
        typer.Option(
            "--plan",
            help="The plan the run replayed (checked by its sha256); default: the manifest's "
            "plan_path.",
        ),
    ] = None,
) -> None:
    """Compare a real vLLM run with the predictor re-run on its observed arrivals.

    Per request: cached tokens vLLM reported against the prediction, and why they
    differ; exact wherever the predicted pool had evicted nothing before admitting the
    request (otherwise exit 1, a predictor bug, after writing the files). The summary
    adds the agreeing share, re-arrivals that lost part of their prefix, prefill
    recomputed because tool waits let blocks be evicted, reuse by round, and device time
    from the profile against vLLM's logged iteration times (docs/DESIGN.md §15).
    """
    import json
    import warnings

    from rearrival.judge.vllm_agreement import (
        SUMMARY_FILE,
        PredictorBugWarning,
        compare_run,
        write_agreement,
    )
    from rearrival.measure.records import read_run
    from rearrival.model.cost.vllm_profile import load_vllm_profile
    from rearrival.model.plans.plan import load_plan

    record = read_run(run_dir, require_complete=False)
    vllm_profile = load_vllm_profile(profile)
    source = plan_path if plan_path is not None else Path(record.manifest["plan_path"])
    plan = load_plan(source)
    if "fleet" in record.manifest:
        compare_fleet(record, plan, vllm_profile, source, out)
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PredictorBugWarning)
        agreement = compare_run(record, plan, vllm_profile, str(source))
    write_agreement(agreement, out)
    s = agreement.summary()
    typer.echo(
        f"{out}: {s['agreeing']}/{s['requests']} requests agree on cached tokens "
        f"({s['no_eviction_agreeing']}/{s['no_eviction_requests']} where the pool had not "
        f"evicted); lost re-arrivals observed {s['re_arrivals_lost_observed']}, predicted "
        f"{s['re_arrivals_lost_predicted']} of {s['re_arrivals']}; device time predicted "
        f"{s['device_s_predicted']:.4f} s vs logged {s['device_s_observed']:.4f} s "
        f"({s['device_s_relative_error']:+.1%}, {vllm_profile.description()})"
    )
    bugs = [w for w in caught if issubclass(w.category, PredictorBugWarning)]
    if bugs:
        for warning in bugs:
            typer.echo(f"rearrival: PREDICTOR BUG: {warning.message}", err=True)
        typer.echo(
            f"rearrival: the disagreeing requests are in {out / SUMMARY_FILE}: "
            f"{json.dumps(s['no_eviction_disagreements'])}",
            err=True,
        )
        raise typer.Exit(PREDICTOR_BUG_EXIT)


def compare_fleet(record: Any, plan: Any, profile: Any, source: Path, out: Path) -> None:
    """A fleet run (README "A study on a real fleet"): the fleet predictor on the run's
    observed arrivals and placement; exit 1 on a predictor error, after writing."""
    import warnings

    from rearrival.judge.fleet_agreement import (
        SUMMARY_FILE,
        compare_fleet_run,
        write_fleet_agreement,
    )
    from rearrival.judge.vllm_agreement import PredictorBugWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PredictorBugWarning)
        agreement = compare_fleet_run(record, plan, profile, str(source))
    write_fleet_agreement(agreement, out)
    s = agreement.summary()
    typer.echo(
        f"{out}: {s['agreeing']}/{s['requests']} requests agree on cached tokens on the "
        f"observed placement ({s['timing_dependent']} timing-dependent); lost re-arrivals "
        f"observed {s['re_arrivals_lost_observed']}, predicted "
        f"{s['re_arrivals_lost_predicted']} of {s['re_arrivals']}; mean TTFT predicted "
        f"{s['ttft_s_mean_predicted']:.4f} s vs observed {s['ttft_s_mean_observed']:.4f} s "
        f"(exploratory)"
    )
    bugs = [w for w in caught if issubclass(w.category, PredictorBugWarning)]
    for warning in bugs:
        typer.echo(f"rearrival: PREDICTOR BUG: {warning.message}", err=True)
    if bugs:
        typer.echo(f"rearrival: the disagreeing requests are in {out / SUMMARY_FILE}", err=True)
        raise typer.Exit(PREDICTOR_BUG_EXIT)
