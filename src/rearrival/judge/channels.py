"""The two cost channels of the paper (Section II-D; docs/DESIGN.md §7).

The serving stack does not report device time, so the paper cross-checks two channels:

* Channel A reconstructs device time from the step log: every decode step costs
  f(b_t) + alpha + beta * n_t and every request's prefill costs T(q) for the q tokens
  actually computed. It depends on the cost models (the same ones the predictor uses).
* Channel B is the length of the union of the client's in-flight intervals
  [send, complete]. It uses no cost model but includes queueing, HTTP and scheduler
  overhead, so it is an activity-time proxy, not device time.

r = B - A is reported per run; it is not a fixed overhead (Section II-D).

On the vllm backend (docs/DESIGN.md §15) the step log is vLLM's own iteration line, and
channel A prices every logged step with the vLLM profile's step cost (rule 7: base + per
decode token x D_pad + per prefill token x P + per KV token x C); a second, direct figure
is the sum of the steps' logged elapsed times. Channel B is the same on every backend.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from rearrival.errors import RearrivalError
from rearrival.measure.records import REQUESTS_FILE, SERVER_LOG_FILE, STEPS_FILE, RunRecord
from rearrival.measure.records.contract import ITERATION_COLUMNS
from rearrival.measure.steplog import StepLogError, parse_step_log
from rearrival.measure.vllm.iterations import PREEMPTIONS_COUNTER, parse_iterations
from rearrival.model.cost.profile import Profile, measured_profile


class ChannelError(RearrivalError, ValueError):
    """A run record from which a channel cannot be computed; names the file and the fix."""


@dataclass(frozen=True)
class ChannelA:
    """Channel A of one run, split into its decode and prefill parts (seconds).

    ``step_source`` says where the (n, b) pairs came from: ``steps.parquet`` or the
    ``server.log`` of a real server whose steps were not tabulated.
    """

    decode_s: float
    prefill_s: float
    decode_steps: int
    step_source: str

    @property
    def total_s(self) -> float:
        return self.decode_s + self.prefill_s


def union_length(intervals: Iterable[tuple[float, float]]) -> float:
    """Lebesgue measure of a union of closed intervals [start, end].

    Overlapping, nested, touching and zero-length intervals and any input order are
    allowed; an interval with end < start or a non-finite bound is refused because it
    would make channel B silently wrong.
    """
    spans = sorted((float(start), float(end)) for start, end in intervals)
    total = 0.0
    current_start = current_end = None
    for start, end in spans:
        if not (math.isfinite(start) and math.isfinite(end)) or end < start:
            raise ValueError(
                f"interval [{start}, {end}] is not a finite interval with start <= end"
            )
        if current_end is None or start > current_end:
            if current_end is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_end is not None:
        total += current_end - current_start
    return total


def _decode_pairs(record: RunRecord) -> tuple[list[tuple[int, int]], str]:
    """(n, b) per decode step: steps.parquet when it has decode rows, else server.log."""
    decode = record.steps[record.steps["kind"] == "decode"]
    if len(decode):
        pairs = list(zip(decode["n"].astype(int), decode["b"].astype(int), strict=True))
        return pairs, STEPS_FILE
    if record.server_log is not None:
        log_path = record.path / SERVER_LOG_FILE
        # Given the path, the parser's garbage-line errors name the file.
        source = log_path if log_path.is_file() else record.server_log
        return parse_step_log(source), SERVER_LOG_FILE
    return [], STEPS_FILE


def channel_a(record: RunRecord, profile: Profile | None = None) -> ChannelA:
    """Device time D reconstructed from the step log and the computed prefill tokens.

    Unknown computed tokens are an error, never 0: a run whose reuse was not observed
    cannot price its prefills (a missing value is never replaced silently; docs/DESIGN.md §7).
    """
    profile = profile or measured_profile()
    pairs, source = _decode_pairs(record)
    requests = record.requests
    expected_advances = int((requests["generated_tokens"] - 1).clip(lower=0).sum())
    if not pairs and expected_advances > 0:
        raise ChannelError(
            f"{record.path / STEPS_FILE}: no decode steps recorded (and no "
            f"[BUCKET] lines in {SERVER_LOG_FILE}) although requests generated "
            f"{expected_advances} tokens after prefill; re-run with step "
            "logging on (rbln: apply the observation patch)"
        )
    decode_s = math.fsum(profile.decode_step_s(n, b) for n, b in pairs)
    computed = requests["computed_tokens"]
    unknown = computed.isna()
    if unknown.any():
        row = int(unknown.to_numpy().nonzero()[0][0])
        raise ChannelError(
            f"{record.path / REQUESTS_FILE}: row {row} column 'computed_tokens' "
            "is unknown; channel A needs the computed prefill tokens of every "
            "request, re-run with cached-token reporting on"
        )
    prefill_s = math.fsum(profile.prefill_s(int(q)) for q in computed)
    return ChannelA(
        decode_s=decode_s, prefill_s=prefill_s, decode_steps=len(pairs), step_source=source
    )


def channel_b(record: RunRecord) -> float:
    """Union length of the client's in-flight intervals [send_s, complete_s] (seconds)."""
    requests = record.requests
    if not len(requests):
        raise ChannelError(
            f"{record.path / REQUESTS_FILE}: no requests; channel B needs the "
            "client's send and completion times, re-run the condition"
        )
    try:
        return union_length(zip(requests["send_s"], requests["complete_s"], strict=True))
    except ValueError as exc:
        raise ChannelError(
            f"{record.path / REQUESTS_FILE}: columns send_s/complete_s: {exc}; re-run the condition"
        ) from None


class StepCost(Protocol):
    """What channel A on vLLM needs of the vLLM profile: the cost of one step with
    ``decode_tokens`` decode tokens as run (padded to the capture size), ``prefill_tokens``
    prefill tokens and ``kv_tokens`` tokens of context read (docs/DESIGN.md §15 rule 7)."""

    def step_s(self, decode_tokens: int, prefill_tokens: int, kv_tokens: int) -> float: ...


@dataclass(frozen=True)
class IterationChannelA:
    """Channel A of a vLLM run: ``total_s`` the profile's cost of the logged steps (None
    without a profile), ``elapsed_s`` the steps' own logged elapsed times; ``kv_tokens``
    the context the steps read (None when the log cannot say, see ``kv_tokens_read``)."""

    total_s: float | None
    elapsed_s: float
    steps: int
    kv_tokens: int | None


def is_iteration_log(record: RunRecord) -> bool:
    """Whether the run's steps are vLLM iterations (the vllm backend's step log)."""
    return ITERATION_COLUMNS[0][0] in record.steps.columns


def kv_tokens_read(record: RunRecord) -> int | None:
    """The context all steps read (C summed over steps), derived from the requests.

    The log gives no per-step context, but C enters the cost linearly, so the sum is
    enough: a request's prefill reads its cached prefix, and its k-th decode step
    (k = 1 .. G-1) reads P + k - 1 tokens (P its prompt). That holds exactly when every
    prefill ran in one step and nothing was preempted (no recompute): the steps' context
    requests then number the requests and the preemption counter did not move. Otherwise
    the chunk boundaries are not in the log, and the sum is unknown (None).
    """
    requests, steps = record.requests, record.steps
    metrics = record.metrics
    preempted = metrics["after"].get(PREEMPTIONS_COUNTER, 0.0) - metrics["before"].get(
        PREEMPTIONS_COUNTER, 0.0
    )
    if preempted or int(steps["context_requests"].sum()) != len(requests):
        return None
    total = 0
    for prompt, cached, generated in zip(
        requests["prompt_tokens"],
        requests["cached_tokens"],
        requests["generated_tokens"],
        strict=True,
    ):
        decodes = int(generated) - 1
        total += int(cached) + decodes * int(prompt) + decodes * (decodes - 1) // 2
    return total


def _check_iterations_logged(record: RunRecord) -> None:
    """The steps are the server log's iteration lines (a file edited after writing, or a
    log with garbage, is refused here, never priced)."""
    log_path = record.path / SERVER_LOG_FILE
    source = log_path if log_path.is_file() else (record.server_log or "")
    try:
        logged = parse_iterations(source)
    except StepLogError as exc:
        raise ChannelError(str(exc)) from None
    names = [name for name, _, _ in ITERATION_COLUMNS if name not in ("elapsed_s",)]
    table = record.steps[names].astype("float64").to_numpy().tolist()
    if [[float(getattr(s, n)) for n in names] for s in logged] != table:
        raise ChannelError(
            f"{record.path / STEPS_FILE}: the steps differ from the iteration lines of "
            f"{SERVER_LOG_FILE}; re-run the condition"
        )


def iteration_channel_a(record: RunRecord, step_cost: StepCost | None) -> IterationChannelA:
    """Channel A of a vLLM run from its logged iterations (docs/DESIGN.md §15).

    Each step costs ``step_s(b, context_tokens, 0)`` (b the decode tokens as run, 0 when
    nothing decodes); the KV term is added once for the run's whole context read, which
    is exact because it is linear. When that context is unknown the profile's KV
    coefficient must be zero (channel A then uses the base, decode and prefill terms
    only), else channel A is refused rather than guessed.
    """
    _check_iterations_logged(record)
    steps = record.steps
    elapsed = math.fsum(float(x) for x in steps["elapsed_s"])
    kv = kv_tokens_read(record)
    if step_cost is None:
        return IterationChannelA(None, elapsed, len(steps), kv)
    decode = steps["b"].fillna(0).astype("int64")
    total = math.fsum(
        step_cost.step_s(int(d), int(p), 0)
        for d, p in zip(decode, steps["context_tokens"], strict=True)
    )
    kv_term = step_cost.step_s(0, 0, kv or 1) - step_cost.step_s(0, 0, 0)
    if kv is None and kv_term != 0:
        raise ChannelError(
            f"{record.path / STEPS_FILE}: the profile prices context reads, but this run's "
            "context per step is not in vLLM's log (a chunked prefill or a preemption); "
            "channel A on it needs a profile whose KV coefficient is zero"
        )
    return IterationChannelA(total + (kv_term if kv else 0.0), elapsed, len(steps), kv)


def channels(
    record: RunRecord, profile: Profile | None = None, step_cost: StepCost | None = None
) -> dict[str, Any]:
    """Both channels and r = B - A of one run, as printed by ``rearrival channels``.

    A vLLM run's channel A comes from ``step_cost`` (the vLLM profile; without one its
    ``a_s`` is None) and carries the direct figure ``a_elapsed_s`` beside it.
    """
    b = channel_b(record)
    if is_iteration_log(record):
        vllm = iteration_channel_a(record, step_cost)
        return {
            "a_s": vllm.total_s,
            "a_elapsed_s": vllm.elapsed_s,
            "a_kv_tokens": vllm.kv_tokens,
            "b_s": b,
            "r_s": None if vllm.total_s is None else b - vllm.total_s,
            "r_elapsed_s": b - vllm.elapsed_s,
        }
    a = channel_a(record, profile)
    return {
        "a_s": a.total_s,
        "a_decode_s": a.decode_s,
        "a_prefill_s": a.prefill_s,
        "b_s": b,
        "r_s": b - a.total_s,
    }
