"""The calibration's measurement plans (paper II-B, III-C, IV): what runs, on which
artifact, to measure which constant.

Decode: one steady-decode plan per (artifact, n) over every bucket a study or the search
can select. Prefill: clocked probe plans (a clock session decodes alone while probes come
back one at a time with nothing cached). Reuse: sessions that come back at once with
their prompt extended, at most half the slots used so every prefix survives. See
``rearrival.measure.calibration`` for how each is read back.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rearrival.config.calibration import CalibrationSettings
from rearrival.errors import RearrivalError
from rearrival.model.configuration import RblnConfiguration
from rearrival.model.cost.profile import measured_profile
from rearrival.model.plans.plan import Plan, PlanMeta, Session

STUDY = "calibration"
# Steps before the last admission: arrival spread (first sends 2-12 ms plus HTTP ingress)
# and one prefill per session; generations are this much longer than the steady window.
ADMISSION_MARGIN_STEPS = 64
# Prefill probes per clocked plan: keeps each plan's clock session well inside 8,192 tokens.
PROBES_PER_PLAN = 8


class CalibrationError(RearrivalError, ValueError):
    """A calibration run or record that cannot give the cost model; names run and fix."""


@dataclass(frozen=True)
class Measurement:
    """One planned calibration run: its plan, the artifact it runs on, what it measures."""

    label: str
    kind: str  # "decode" | "prefill" | "reuse"
    artifact: RblnConfiguration
    plan: Plan
    n: int


def characterised(
    settings: CalibrationSettings,
) -> list[tuple[RblnConfiguration, int, tuple[int, ...]]]:
    """(artifact, bucket, n values) for every measured bucket, each in the first artifact
    that lists it; n runs over every count the scheduler puts in that bucket (thinned to
    ``max_n_per_bucket`` evenly spaced counts, ends kept, when that is set)."""
    seen: set[int] = set()
    out = []
    for artifact in settings.artifacts:
        previous = 0
        for bucket in artifact.buckets:
            counts = tuple(range(previous + 1, bucket + 1))
            previous = bucket
            if bucket in seen:
                continue
            seen.add(bucket)
            limit = settings.max_n_per_bucket
            if limit and len(counts) > limit:
                picks = np.unique(np.linspace(0, len(counts) - 1, limit).round().astype(int))
                counts = tuple(counts[i] for i in picks)
            out.append((artifact, bucket, counts))
    return out


def _meta(seed: int, n: int) -> PlanMeta:
    return PlanMeta(seed=seed, n=n, variant="wait", generator_version="rearrival-calibrate/1")


def decode_measurements(settings: CalibrationSettings, seed: int) -> list[Measurement]:
    """One steady-decode plan per (artifact, n): n identical sessions decoding together."""
    gen = settings.warmup_steps + settings.decode_steps + ADMISSION_MARGIN_STEPS
    out = []
    for artifact, bucket, counts in characterised(settings):
        for n in counts:
            sessions = tuple(
                Session(i, settings.decode_prompt_tokens, gen, 1, 8, 0.0, "calibration")
                for i in range(n)
            )
            out.append(
                Measurement(
                    f"decode-b{bucket}-n{n}", "decode", artifact, Plan(sessions, _meta(seed, n)), n
                )
            )
    return out


def probe_sizes(settings: CalibrationSettings) -> list[int]:
    """Computed-token sizes of the prefill probes: the prompt lengths, and the re-arrival
    remainders (1 generated + appended + one partial block's worth of the 128)."""
    sizes = sorted({*settings.prefill_tokens, *(a + 9 for a in settings.appended_tokens)})
    return [q for q in sizes for _ in range(settings.prefill_repeats)]


def prefill_measurements(
    settings: CalibrationSettings, max_seq_len: int, seed: int
) -> list[Measurement]:
    """Clocked prefill probes (see the module docstring), at most ``PROBES_PER_PLAN`` per
    plan. Session 0 is the clock; probe i sends a 1-token first request at t = 0 and
    comes back after its tool wait with a ``q``-token follow-up (nothing cached: its
    previous prompt is shorter than one block). Waits leave each probe's prefill (at up
    to twice the published T(q)) plus the spread of first completions before the next."""
    reference = measured_profile()
    artifact = settings.artifacts[0]
    sizes = probe_sizes(settings)
    out = []
    for start in range(0, len(sizes), PROBES_PER_PLAN):
        chunk = sizes[start : start + PROBES_PER_PLAN]
        spread = len(chunk) * 2 * reference.prefill_s(1) + 0.3
        waits, at = [], spread
        for q in chunk:
            if q + 2 > max_seq_len:
                raise CalibrationError(
                    f"calibration.prefill_tokens: {q} does not fit "
                    f"max_seq_len {max_seq_len}; use lengths <= "
                    f"{max_seq_len - 2}"
                )
            waits.append(at)
            at += 2 * reference.prefill_s(q) + spread
        step = reference.decode_step_s(1, artifact.padded(1))
        clock_steps = int(2 * (at + spread) / step) + 64
        limit = max_seq_len - settings.decode_prompt_tokens - 2
        if clock_steps > limit:
            raise CalibrationError(
                f"prefill probes {chunk}: the clock session would need "
                f"{clock_steps} tokens, over max_seq_len; lower "
                "calibration.prefill_tokens or prefill_repeats"
            )
        sessions = (
            Session(0, settings.decode_prompt_tokens, clock_steps, 1, 8, 0.0, "calibration"),
            *(
                Session(i + 1, 1, 1, 1, q - 2, wait, "calibration")
                for i, (q, wait) in enumerate(zip(chunk, waits, strict=True))
            ),
        )
        plan = Plan(sessions, _meta(seed, len(sessions)))
        out.append(Measurement(f"prefill-{start // PROBES_PER_PLAN}", "prefill", artifact, plan, 1))
    return out


def reuse_measurements(
    settings: CalibrationSettings, max_seq_len: int, seed: int
) -> list[Measurement]:
    """Reuse probes: each session prefills L0 tokens, emits one token and comes back at
    once with L0 + 1 + appended tokens, so its follow-up should reuse every whole 128-token
    block of L0. At most half the artifact's slots are used per plan, so every follow-up
    finds its prefix alive (no eviction can explain a miss)."""
    artifact = settings.artifacts[0]
    per_plan = max(1, artifact.batch_size // 2)
    lengths = list(settings.prefill_tokens)
    rows = []
    for index, q in enumerate(lengths):
        if q + 3 > max_seq_len:
            raise CalibrationError(
                f"calibration.prefill_tokens: {q} leaves no room for the "
                f"follow-up within max_seq_len {max_seq_len}; use lengths "
                f"<= {max_seq_len - 3}"
            )
        appended = settings.appended_tokens[index % len(settings.appended_tokens)]
        rows.append((q, min(appended, max_seq_len - q - 3)))
    out = []
    for start in range(0, len(rows), per_plan):
        chunk = rows[start : start + per_plan]
        sessions = tuple(
            Session(i, q, 1, 1, appended, 0.0, "calibration")
            for i, (q, appended) in enumerate(chunk)
        )
        out.append(
            Measurement(
                f"reuse-{start // per_plan}",
                "reuse",
                artifact,
                Plan(sessions, _meta(seed, len(sessions))),
                len(sessions),
            )
        )
    return out


def all_measurements(
    settings: CalibrationSettings, max_seq_len: int, seed: int
) -> list[Measurement]:
    """Every calibration run in the order they run: decode, then prefill, then reuse."""
    return (
        decode_measurements(settings, seed)
        + prefill_measurements(settings, max_seq_len, seed)
        + reuse_measurements(settings, max_seq_len, seed)
    )
