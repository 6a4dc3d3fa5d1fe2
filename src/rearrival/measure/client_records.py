"""A replay as a run directory (docs/DESIGN.md §6): the engine's step log as steps.parquet,
and the run's status, which is 'complete' only when every request finished, the server's
counter confirms their reuse and the step log covers them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from rearrival.measure.client import ClientRun
from rearrival.measure.counters import CACHED_COUNTER, counter_delta
from rearrival.measure.records import finish_manifest, write_run
from rearrival.measure.records.contract import DECODE, RequestRecord, StepRecord
from rearrival.measure.records.frames import requests_frame, steps_frame, tokens_frame
from rearrival.measure.steplog import StepLogError, parse_step_log


class StepLog(Protocol):
    """How one engine's step log becomes steps.parquet (docs/DESIGN.md §6): the
    ``[BUCKET]`` lines of the patched vllm-rbln and the twin, or vLLM's iteration lines."""

    def steps(self, log_text: str) -> pd.DataFrame:
        """The steps frame; a garbage line raises StepLogError naming it."""
        ...

    def coverage_problem(
        self,
        steps: pd.DataFrame,
        requests: Sequence[RequestRecord],
        counters: Mapping[str, float],
    ) -> str | None:
        """Why these steps cannot be the ones that served these requests, or None.
        ``counters`` is the run's delta of the server's counters."""
        ...


class BucketStepLog:
    """steps.parquet from ``[BUCKET]`` lines (the client's ``StepLog`` for the patched
    vllm-rbln and emulate-server): decode steps only, times unknown (NaN).

    A real server log has no per-step times at useful resolution (paper III-C: 1 s) and
    no prefill line, so prefill is priced from the requests' computed tokens instead.
    """

    def steps(self, log_text: str) -> pd.DataFrame:
        return steps_frame([StepRecord(DECODE, n, b) for n, b in parse_step_log(log_text)])

    def coverage_problem(
        self,
        steps: pd.DataFrame,
        requests: Sequence[RequestRecord],
        counters: Mapping[str, float],
    ) -> str | None:
        """Every generated token after the first comes from one decode step, so the
        decode steps must advance exactly sum(generated - 1) request-tokens; anything else
        means DEBUG logging was off, the patch is missing, or the log slice is wrong."""
        advances = sum(r.generated_tokens - 1 for r in requests)
        logged = int(steps["n"].sum())
        if logged == advances:
            return None
        return (
            f"server log holds {len(steps)} [BUCKET] steps advancing {logged} "
            f"tokens, but the requests needed {advances}; run the server with "
            "VLLM_LOGGING_LEVEL=DEBUG and the observation patch applied "
            "(`rearrival rbln patch apply`)"
        )


BUCKET_STEP_LOG = BucketStepLog()


def reuse_problem(run: ClientRun) -> str | None:
    """Why the per-request cached tokens cannot be trusted, or None: each request must
    report them (the server sends ``prompt_tokens_details``), and their sum must equal
    the run's delta of ``vllm:prompt_tokens_cached_total`` (docs/DESIGN.md §15)."""
    missing = [r for r in run.requests if r.cached_tokens is None]
    if missing:
        first = missing[0]
        return (
            f"session {first.session} round {first.round}: the server reported no "
            "usage.prompt_tokens_details.cached_tokens; start vLLM with "
            "--enable-prompt-tokens-details"
        )
    delta = counter_delta(run.metrics_before, run.metrics_after)
    if CACHED_COUNTER not in delta:
        return f"/metrics has no {CACHED_COUNTER} before and after the run"
    reported = sum(int(r.cached_tokens or 0) for r in run.requests)
    if reported != delta[CACHED_COUNTER]:
        return (
            f"the requests report {reported} cached tokens but {CACHED_COUNTER} moved by "
            f"{delta[CACHED_COUNTER]:g}; the server's reuse reports disagree with its counter"
        )
    return None


def _outcome(run: ClientRun, steps: pd.DataFrame, step_log: StepLog) -> tuple[str, str | None]:
    """The run's status: the client's, unless the requests are not all there, their
    reuse is not confirmed by the counter, or the step log does not cover them."""
    if run.status != "complete":
        return run.status, run.reason
    if len(run.requests) != run.expected_requests:
        return "partial", (f"{len(run.requests)} of {run.expected_requests} requests finished")
    problem = reuse_problem(run) or step_log.coverage_problem(
        steps, run.requests, counter_delta(run.metrics_before, run.metrics_after)
    )
    return ("failed", problem) if problem else ("complete", None)


@dataclass(frozen=True)
class RunOutcome:
    """Where a run directory was written and whether it is usable."""

    path: Path
    status: str
    reason: str | None


def write_client_run(
    out: Path,
    run: ClientRun,
    *,
    manifest: dict[str, Any],
    server_log: str | None,
    step_log: StepLog = BUCKET_STEP_LOG,
    logs: Mapping[str, str] | None = None,
    problem: str | None = None,
) -> RunOutcome:
    """Write a replay as a run directory (docs/DESIGN.md §6); incomplete runs keep their
    reason. ``logs`` are further logs kept by name (a fleet's router and servers);
    ``problem`` a reason the caller found the run unusable (a complete replay then fails)."""
    try:
        steps = step_log.steps(server_log or "")
        status, reason = _outcome(run, steps, step_log)
        if status == "complete" and problem:
            status, reason = "failed", problem
    except StepLogError as exc:
        steps = step_log.steps("")
        status, reason = (
            ("failed", str(exc)) if run.status == "complete" else (run.status, run.reason)
        )
    metrics = {"before": dict(run.metrics_before), "after": dict(run.metrics_after)}
    write_run(
        out,
        requests=requests_frame(run.requests),
        steps=steps,
        metrics=metrics,
        manifest=finish_manifest(manifest, status=status, reason=reason),
        server_log=server_log,
        tokens=tokens_frame(run.tokens(), server_times=False),
        logs=logs,
    )
    return RunOutcome(out, status, reason)
