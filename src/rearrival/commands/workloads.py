"""CLI verbs of open and closed agent traffic (registered under `rearrival plans`): plans
open, plans closed (docs/DESIGN.md §2 "Open traffic, shared prefixes and renewal")."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rearrival.commands.plans import PLAN_SUFFIXES, PlanOutputError

# The option each library argument comes from, so a refusal names what the user typed.
OPTIONS = {
    "rate": "--rate",
    "horizon_s": "--horizon",
    "time_scale": "--time-scale",
    "arrivals": "--arrivals",
    "sessions": "--sessions",
    "concurrency": "--concurrency",
    "think_s": "--think-s",
    "pool": "--pool",
}

PoolOption = Annotated[
    Path,
    typer.Option(
        "--pool",
        help="Sessions to draw from: a plan file (.json, .parquet), a folder of them, or a "
        "TraceLab round trace (.jsonl[.gz], imported as `plans from-trace` does).",
    ),
]
SeedOption = Annotated[
    int, typer.Option("--seed", help="Seed of the draws; the same inputs give the same bytes.")
]
OutOption = Annotated[Path, typer.Option("--out", help="Plan file to write (.json|.parquet).")]
TokenScaleOption = Annotated[
    float,
    typer.Option("--token-scale", help="Trace pool only: scale every token count (a what-if)."),
]
MaxSeqLenOption = Annotated[
    int | None,
    typer.Option(
        "--max-seq-len",
        min=2,
        help="Trace pool only: the tokens a slot holds (default: the shipped profile's).",
    ),
]


def _pool(path: Path, token_scale: float, max_seq_len: int | None):
    """The pool and the one line that says what it is."""
    from rearrival.model.plans.pool import TRACE_SUFFIXES, load_pool
    from rearrival.model.plans.trace_plans import TraceError
    from rearrival.model.plans.workloads_open import WorkloadError

    if path.suffix not in TRACE_SUFFIXES and (token_scale != 1.0 or max_seq_len is not None):
        option = "--token-scale" if token_scale != 1.0 else "--max-seq-len"
        raise WorkloadError(
            f"option {option}: applies to a trace pool only (it is how the trace is "
            f"imported); {path} is a plan or a folder of plans, whose tokens are as written"
        )
    try:
        pool = load_pool(path, token_scale=token_scale, max_seq_len=max_seq_len)
    except TraceError as exc:
        typer.echo(f"rearrival: error: {exc}", err=True)
        raise typer.Exit(2) from None
    kind = "plans" if pool.meta.source == "pool" else "trace, imported as `plans from-trace` does"
    shared = ", ".join(f"{p.id} {p.tokens:,} tokens" for p in pool.prefixes) or "none"
    return pool, f"pool {path} ({kind}): {pool.n} sessions; shared prefixes: {shared}"


def _seconds(value: float) -> str:
    """Seconds as a reader writes them: 3,600 or 0.25, never 1e+06."""
    return f"{value:,.6f}".rstrip("0").rstrip(".")


def _write(plan, out: Path, pool_line: str, workload_line: str) -> None:
    from rearrival.model.plans.plan import write_plan

    write_plan(plan, out)
    typer.echo(pool_line)
    typer.echo(workload_line)
    typer.echo(
        f"wrote {out}: {plan.n:,} sessions, {plan.requests:,} requests, "
        f"{len(plan.prefixes)} shared prefixes; sha256={plan.sha256()}"
    )


def _run(make):
    """``make()``'s plan; a refusal names the option it came from."""
    from rearrival.model.plans.workloads_open import WorkloadError

    try:
        return make()
    except WorkloadError as exc:
        if exc.argument not in OPTIONS:
            raise
        raise WorkloadError(f"option {OPTIONS[exc.argument]}: {exc}") from None


def _check_out(out: Path) -> None:
    if out.suffix not in PLAN_SUFFIXES:
        raise PlanOutputError(f"option --out '{out}': a plan file ends in .parquet or .json")


def _pool_notes(path: Path, pool) -> dict:
    return {"pool": str(path), "pool_sha256": pool.sha256()}


def open_traffic(
    pool: PoolOption,
    horizon: Annotated[
        float, typer.Option("--horizon", help="Seconds over which sessions start (all before).")
    ],
    seed: SeedOption,
    out: OutOption,
    rate: Annotated[
        float | None,
        typer.Option(
            "--rate",
            help="Session starts per second (poisson, gamma). The same pool and seed draw "
            "the same sessions in the same order at every rate; only the times scale.",
        ),
    ] = None,
    arrivals: Annotated[
        str,
        typer.Option(
            "--arrivals",
            help="poisson; gamma:CV (Gamma gaps with that coefficient of variation, mean "
            "1/rate); trace (the pool's own sessions at their own starts, times --time-scale).",
        ),
    ] = "poisson",
    time_scale: Annotated[
        float,
        typer.Option(
            "--time-scale",
            help="--arrivals trace: multiply the pool's starts (0.5: twice as fast).",
        ),
    ] = 1.0,
    token_scale: TokenScaleOption = 1.0,
    max_seq_len: MaxSeqLenOption = None,
) -> None:
    """Open agent traffic (docs/DESIGN.md §2 "Open traffic, shared prefixes and
    renewal"): sessions drawn with replacement from POOL start over --horizon
    seconds, each with its rounds and shared prefix; writes a multi-round plan for
    `simulate`. At most 100,000 sessions and 1,000,000 requests (rearrival.limits)."""
    from rearrival.model.plans.workloads_open import open_plan

    _check_out(out)
    drawn, pool_line = _pool(pool, token_scale, max_seq_len)
    plan = _run(
        lambda: open_plan(
            drawn.sessions,
            drawn.prefixes,
            rate,
            horizon,
            seed,
            arrivals,
            time_scale,
            _pool_notes(pool, drawn),
        )
    )
    starts = [s.start_s for s in plan.sessions]
    law = plan.meta.notes["workload"]["arrivals"]
    measured = plan.n / horizon
    _write(
        plan,
        out,
        pool_line,
        f"open traffic, {law} arrivals over {_seconds(horizon)} s: {plan.n:,} sessions start "
        f"({measured:.4g} per s; first {starts[0]:.3f} s, last {starts[-1]:.3f} s)",
    )


def closed_traffic(
    pool: PoolOption,
    concurrency: Annotated[
        int, typer.Option("--concurrency", help="Sessions that start at t = 0 (C users).")
    ],
    sessions: Annotated[
        int, typer.Option("--sessions", help="Sessions in all (L >= C), at most 100,000.")
    ],
    seed: SeedOption,
    out: OutOption,
    think_s: Annotated[
        float,
        typer.Option(
            "--think-s", help="Seconds from a session's last response to its follower's start."
        ),
    ] = 0.0,
    token_scale: TokenScaleOption = 1.0,
    max_seq_len: MaxSeqLenOption = None,
) -> None:
    """Closed-loop agent traffic (docs/DESIGN.md §2 "Open traffic, shared prefixes and
    renewal"): C sessions drawn from POOL start at t = 0; each, when it
    finishes, is followed by a fresh one after --think-s (`after` links; with 0 the
    authors' successor), L sessions in all."""
    from rearrival.model.plans.workloads_open import closed_plan

    _check_out(out)
    drawn, pool_line = _pool(pool, token_scale, max_seq_len)
    plan = _run(
        lambda: closed_plan(
            drawn.sessions,
            drawn.prefixes,
            concurrency,
            sessions,
            think_s,
            seed,
            _pool_notes(pool, drawn),
        )
    )
    _write(
        plan,
        out,
        pool_line,
        f"closed loop: {concurrency} sessions at t = 0, each followed after "
        f"{_seconds(think_s)} s "
        f"by a fresh one, {plan.n:,} in all",
    )


def register(plans_app: typer.Typer) -> None:
    """Add the workload verbs to `rearrival plans`."""
    plans_app.command("open")(open_traffic)
    plans_app.command("closed")(closed_traffic)
