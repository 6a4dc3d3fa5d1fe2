"""Calibration runs back into samples: steady-decode windows and probe prefills from the
step log, cached-token counts from the run records (paper II-B, III-C, IV).

Everything here reads server-side time from ``[BUCKET]`` lines' monotonic timestamps, so
it works over HTTP and on hardware, where requests carry no prefill time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from rearrival.config.calibration import CalibrationSettings
from rearrival.errors import RearrivalError
from rearrival.measure.calibration.design import CalibrationError, Measurement
from rearrival.measure.records import RunRecord, read_run
from rearrival.measure.records.contract import ROUND_COLUMN
from rearrival.measure.steplog import parse_step_times

# A gap this many times the median step gap holds a prefill (T(q) >= one chunk's cost,
# about twice a decode step on the paper's stack).
PREFILL_GAP_FACTOR = 1.5


def _timed_lines(log_text: str, label: str) -> list[tuple[int, int, int | None]]:
    """The step log's (running, bucket, t_mono_ns) lines; every line must carry its time."""
    lines = parse_step_times(log_text)
    if any(t is None for _, _, t in lines):
        raise CalibrationError(
            f"run {label}: the step log has [BUCKET] lines without "
            "t_mono_ns; apply the current observation patch "
            "(`rearrival rbln patch apply`) and re-run calibration"
        )
    return lines


def steady_durations(log_text: str, n: int, warmup: int, label: str) -> np.ndarray:
    """Per-step durations (s) at exactly ``n`` running requests from a run's step log.

    The window starts at the first decode line with ``n`` running and ends at the first
    line with another count (the first completion); a prefill inside the window would
    change the count, so every gap inside it is one decode step.
    """
    lines = _timed_lines(log_text, label)
    start = next((i for i, (count, _, _) in enumerate(lines) if count == n), None)
    if start is None:
        return np.empty(0)
    stop = start
    while stop < len(lines) and lines[stop][0] == n:
        stop += 1
    stamps = np.array([t for _, _, t in lines[start:stop]], dtype=np.int64)
    return (np.diff(stamps) / 1e9)[warmup:]


def probe_prefills(log_text: str, probes: int, label: str) -> np.ndarray:
    """T(q) of each probe, in send order, from the clock session's step log: the last
    ``probes`` gaps longer than ``PREFILL_GAP_FACTOR`` median gaps, less one median gap
    (the decode step inside each). Earlier long gaps are the 1-token first requests."""
    lines = _timed_lines(log_text, label)
    stamps = np.array([t for n, _, t in lines if n == 1], dtype=np.int64)
    gaps = np.diff(stamps) / 1e9
    if gaps.size == 0:
        raise CalibrationError(
            f"run {label}: no decode steps of the clock session in the "
            "step log; check that the server logs [BUCKET] lines"
        )
    step = float(np.median(gaps))
    long_gaps = gaps[gaps > PREFILL_GAP_FACTOR * step]
    if long_gaps.size < probes:
        raise CalibrationError(
            f"run {label}: found {long_gaps.size} prefill gaps in the "
            f"clock session's step log, expected at least {probes}; a "
            "probe prefill ran while the clock was not decoding (it "
            "ended early or started late): lower calibration."
            "prefill_tokens or check the server for other load"
        )
    return long_gaps[-probes:] - step


@dataclass(frozen=True)
class Measured:
    """Every calibration sample, as tables (one row per step, prefill or re-arrival)."""

    decode: pd.DataFrame  # label, run_id, artifact, bucket, n, duration_s
    prefill: pd.DataFrame  # label, run_id, computed_tokens, prefill_s
    reuse: pd.DataFrame  # label, run_id, previous_prompt, prompt, cached_tokens
    run_ids: tuple[str, ...]


def decode_samples(m: Measurement, record: RunRecord, warmup: int) -> pd.DataFrame:
    """One row per steady decode step of a decode run, at its n and bucket."""
    durations = steady_durations(record.server_log or "", m.n, warmup, m.label)
    return pd.DataFrame(
        {
            "label": m.label,
            "run_id": record.run_id,
            "artifact": m.artifact.name,
            "bucket": m.artifact.padded(m.n),
            "n": m.n,
            "duration_s": durations,
        }
    )


def prefill_samples(m: Measurement, record: RunRecord) -> pd.DataFrame:
    """One row per probe of a clocked prefill run: its computed tokens and T(q)."""
    sizes = [s.followup_prompt_tokens for s in m.plan.sessions[1:]]
    return pd.DataFrame(
        {
            "label": m.label,
            "run_id": record.run_id,
            "computed_tokens": sizes,
            "prefill_s": probe_prefills(record.server_log or "", len(sizes), m.label),
        }
    )


def reuse_samples(m: Measurement, record: RunRecord) -> pd.DataFrame:
    """One row per follow-up of a reuse run: both prompts and the cached tokens reported."""
    requests = record.requests
    if requests["cached_tokens"].isna().any():
        raise CalibrationError(
            f"calibration run {m.label}: the backend reported no "
            "cached-token counts, so the reuse rule cannot be "
            "checked; serve with prefix-cache usage details enabled"
        )
    first = requests[requests[ROUND_COLUMN] == 0].set_index("session")
    follow = requests[requests[ROUND_COLUMN] == 1].set_index("session")
    return pd.DataFrame(
        {
            "label": m.label,
            "run_id": record.run_id,
            "previous_prompt": first.loc[follow.index, "prompt_tokens"].to_numpy(),
            "prompt": follow["prompt_tokens"].to_numpy(),
            "cached_tokens": follow["cached_tokens"].astype("int64").to_numpy(),
        }
    )


def collect(
    measurements: list[Measurement], runs_dir: Path, settings: CalibrationSettings
) -> Measured:
    """Read the written runs back (complete ones only) into sample tables."""
    decode, prefill, reuse, run_ids = [], [], [], []
    for m in measurements:
        try:
            record = read_run(runs_dir / m.label)
        except RearrivalError as exc:
            raise CalibrationError(f"calibration run {m.label}: {exc}") from exc
        run_ids.append(record.run_id)
        if m.kind == "decode":
            decode.append(decode_samples(m, record, settings.warmup_steps))
        elif m.kind == "prefill":
            prefill.append(prefill_samples(m, record))
        else:
            reuse.append(reuse_samples(m, record))
    return Measured(_frame(decode), _frame(prefill), _frame(reuse), tuple(run_ids))


def _frame(parts: list[pd.DataFrame]) -> pd.DataFrame:
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
