"""The two cost channels of the paper (Section II-D; docs/DESIGN.md §7).

The serving stack does not report device time, so the paper cross-checks two channels:

* Channel A reconstructs device time from the step log: every decode step costs
  f(b_t) + alpha + beta * n_t and every request's prefill costs T(q) for the q tokens
  actually computed. It depends on the cost models (the same ones the predictor uses).
* Channel B is the length of the union of the client's in-flight intervals
  [send, complete]. It uses no cost model but includes queueing, HTTP and scheduler
  overhead, so it is an activity-time proxy, not device time.

r = B - A is reported per run; it is not a fixed overhead (Section II-D).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rearrival.errors import RearrivalError
from rearrival.measure.records import REQUESTS_FILE, SERVER_LOG_FILE, STEPS_FILE, RunRecord
from rearrival.measure.steplog import parse_step_log
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


def channels(record: RunRecord, profile: Profile | None = None) -> dict[str, Any]:
    """Both channels and r = B - A of one run, as printed by ``rearrival channels``."""
    a = channel_a(record, profile)
    b = channel_b(record)
    return {
        "a_s": a.total_s,
        "a_decode_s": a.decode_s,
        "a_prefill_s": a.prefill_s,
        "b_s": b,
        "r_s": b - a.total_s,
    }
