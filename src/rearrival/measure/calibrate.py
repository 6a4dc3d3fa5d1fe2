"""The calibration stage: measure the cost model on the configured backend (docs/DESIGN.md §3,
"Calibration"; paper II-B, III-C, IV, Tables VII and XV).

The paper's constants came from controlled measurements; this module makes those
measurements a stage of the workflow on whatever backend the study runs on:

- decode step cost: steady decode with exactly n running requests (one plan per n: n
  identical sessions, short prompts, long generations, no tool wait) on calibration
  artifacts whose bucket sets cover every bucket a study or the search can select.
  Per-step durations are the gaps between consecutive ``[BUCKET]`` lines' monotonic
  timestamps inside the steady window (after every session is admitted, before the
  first completion), minus ``warmup_steps``;
- prefill: one "clock" session decodes alone for the whole run while probe sessions
  come back, one at a time (staggered tool waits), with a follow-up whose prompt shares
  no cached block, so its q tokens are all computed. Prefill and decode never share a
  step (II-B), so the gap between the two decode lines around a probe's prefill is T(q)
  plus one decode step: T(q) = gap - the median step gap. This reads server-side time from
  the step log alone, so it works over HTTP and on hardware, where requests carry no
  prefill time. Probe sizes are the studies' prompt lengths and re-arrival remainders;
- reuse: sessions prefill P tokens and come back at once with P + 1 + appended tokens
  (at most half the slots used, so every prefix survives); each follow-up must report
  floor(min(P, L-1)/128)*128 cached tokens.

Every plan runs through the backends dispatcher (``rearrival.measure.backends.run_backend``), so
``emulated``, ``emulated-http`` and ``rbln`` measure the same plans and write the same run
records. ``rearrival.model.fits`` turns the records into numbers; :func:`profile_document`
writes them in the schema of ``data/profile_rbln_ca25.yaml`` with CIs, sample counts,
backend, run ids and a measured/interpolated mark on every bucket.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from rearrival.atomic import atomic_write_bytes, atomic_write_json
from rearrival.config.calibration import Artifact, CalibrationConfig, CalibrationSettings
from rearrival.config.study import Configuration, RblnSettings, StudyConfig
from rearrival.errors import RearrivalError
from rearrival.measure import rbln as rbln_stack
from rearrival.measure.backends import RunRequest, run_backend
from rearrival.measure.emulate.truth import load_truth
from rearrival.measure.records import read_run
from rearrival.measure.steplog import parse_step_times
from rearrival.model.fits import (
    CompileFit,
    DecodeFit,
    PrefillFit,
    ReuseCheck,
    check_reuse,
    fit_compile,
    fit_decode,
    fit_prefill,
    interpolate_bucket,
    kv_bytes_per_token,
)
from rearrival.model.plangen import derive_seed
from rearrival.model.plans import Plan, PlanMeta, Session, write_plan
from rearrival.model.profile import Profile, measured_profile, select_bucket
from rearrival.parquet import write_frame

STUDY = "calibration"
DECODE_STEPS_FILE = "decode_steps.parquet"
PREFILL_FILE = "prefill.parquet"
REUSE_FILE = "reuse.parquet"
PROFILE_FILE = "profile.yaml"
# Steps before the last admission: arrival spread (first sends 2-12 ms plus HTTP ingress)
# and one prefill per session; generations are this much longer than the steady window.
ADMISSION_MARGIN_STEPS = 64
# Prefill probes per clocked plan: keeps each plan's clock session well inside 8,192 tokens.
PROBES_PER_PLAN = 8
# A gap this many times the median step gap holds a prefill (T(q) >= one chunk's cost,
# about twice a decode step on the paper's stack).
PREFILL_GAP_FACTOR = 1.5


class CalibrationError(RearrivalError, ValueError):
    """A calibration run or record that cannot give the cost model; names run and fix."""


@dataclass(frozen=True)
class Measurement:
    """One planned calibration run: its plan, the artifact it runs on, what it measures."""

    label: str
    kind: str  # "decode" | "prefill" | "reuse"
    artifact: Artifact
    plan: Plan
    n: int


def characterised(settings: CalibrationSettings) -> list[tuple[Artifact, int, tuple[int, ...]]]:
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
        step = reference.decode_step_s(1, select_bucket(1, artifact.buckets))
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


# ---------------------------------------------------------------------------- records


def steady_durations(log_text: str, n: int, warmup: int, label: str) -> np.ndarray:
    """Per-step durations (s) at exactly ``n`` running requests from a run's step log.

    The window starts at the first decode line with ``n`` running and ends at the first
    line with another count (the first completion); a prefill inside the window would
    change the count, so every gap inside it is one decode step.
    """
    lines = parse_step_times(log_text)
    if any(t is None for _, _, t in lines):
        raise CalibrationError(
            f"run {label}: the step log has [BUCKET] lines without "
            "t_mono_ns; apply the current observation patch "
            "(`rearrival rbln patch apply`) and re-run calibration"
        )
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
    lines = parse_step_times(log_text)
    if any(t is None for _, _, t in lines):
        raise CalibrationError(
            f"run {label}: the step log has [BUCKET] lines without "
            "t_mono_ns; apply the current observation patch "
            "(`rearrival rbln patch apply`) and re-run calibration"
        )
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
            durations = steady_durations(
                record.server_log or "", m.n, settings.warmup_steps, m.label
            )
            bucket = select_bucket(m.n, m.artifact.buckets)
            decode.append(
                pd.DataFrame(
                    {
                        "label": m.label,
                        "run_id": record.run_id,
                        "artifact": m.artifact.name,
                        "bucket": bucket,
                        "n": m.n,
                        "duration_s": durations,
                    }
                )
            )
            continue
        if m.kind == "prefill":
            sizes = [s.followup_prompt_tokens for s in m.plan.sessions[1:]]
            prefill.append(
                pd.DataFrame(
                    {
                        "label": m.label,
                        "run_id": record.run_id,
                        "computed_tokens": sizes,
                        "prefill_s": probe_prefills(record.server_log or "", len(sizes), m.label),
                    }
                )
            )
            continue
        requests = record.requests
        if requests["cached_tokens"].isna().any():
            raise CalibrationError(
                f"calibration run {m.label}: the backend reported no "
                "cached-token counts, so the reuse rule cannot be "
                "checked; serve with prefix-cache usage details enabled"
            )
        first = requests[requests["turn"] == 0].set_index("session")
        follow = requests[requests["turn"] == 1].set_index("session")
        reuse.append(
            pd.DataFrame(
                {
                    "label": m.label,
                    "run_id": record.run_id,
                    "previous_prompt": first.loc[follow.index, "prompt_tokens"].to_numpy(),
                    "prompt": follow["prompt_tokens"].to_numpy(),
                    "cached_tokens": follow["cached_tokens"].astype("int64").to_numpy(),
                }
            )
        )

    def frame(parts: list[pd.DataFrame]) -> pd.DataFrame:
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()

    return Measured(frame(decode), frame(prefill), frame(reuse), tuple(run_ids))


# ------------------------------------------------------------------------------- driver


@dataclass(frozen=True)
class Calibration:
    """A finished calibration: samples, fits, and where they came from."""

    measured: Measured
    decode: DecodeFit
    prefill: PrefillFit
    reuse: ReuseCheck
    backend: str
    truth_version: str | None
    compile: CompileFit | None = None


def run_measurements(
    measurements: list[Measurement], runs_dir: Path, backend: Any, seed: int
) -> None:
    """Run every calibration plan through the backends dispatcher (fresh server per run
    on HTTP backends); plans are written beside the runs so each manifest names its file."""
    plans_dir = runs_dir.parent / "plans"
    for m in measurements:
        plan_path = write_plan(m.plan, plans_dir / f"{m.label}.parquet")
        configuration = Configuration(
            m.artifact.name, m.artifact.buckets, m.artifact.batch_size, m.artifact.batch_size
        )
        run = RunRequest(
            study=STUDY,
            plan=m.plan,
            plan_path=plan_path,
            configuration=configuration,
            variant="wait",
            label=m.label,
            replicate=0,
            seed=derive_seed(seed, 0, m.n, 0, f"calib:{m.label}"),
            condition_order=[m.label],
            prereg={},
        )
        run_backend(backend, run, runs_dir / m.label)


def calibrate(
    config: CalibrationConfig,
    backend: Any,
    out_dir: Path,
    *,
    seed: int,
    compile_records: list[tuple[int, float, float]] | None = None,
) -> Calibration:
    """Measure, fit and return a calibration; the runs go to ``out_dir/runs``.

    ``backend`` is a :class:`rearrival.measure.backends.BackendSettings`. Any fit that does not
    hold raises (``rearrival.model.fits.FitError``) naming bucket or range and the fix.
    """
    settings = config.calibration
    seed = seed + settings.seed_block
    max_seq_len = config.model.max_seq_len
    measurements = (
        decode_measurements(settings, seed)
        + prefill_measurements(settings, max_seq_len, seed)
        + reuse_measurements(settings, max_seq_len, seed)
    )
    runs_dir = out_dir / "runs"
    if runs_dir.exists():
        raise CalibrationError(
            f"{runs_dir}: exists; calibration writes fresh runs, remove "
            "it (or choose another output directory) and re-run"
        )
    run_measurements(measurements, runs_dir, backend, seed)
    measured = collect(measurements, runs_dir, settings)
    reference = measured_profile()
    decode = fit_decode(
        measured.decode,
        min_steps=settings.min_steps,
        max_residual=settings.max_residual,
        resamples=settings.bootstrap_resamples,
        seed=seed,
    )
    prefill = fit_prefill(
        measured.prefill["computed_tokens"].to_numpy(),
        measured.prefill["prefill_s"].to_numpy(),
        chunk_tokens=reference.prefill_chunk_tokens,
        max_error=settings.max_prefill_error,
        resamples=settings.bootstrap_resamples,
        seed=seed,
        max_tokens=config.model.max_seq_len,
    )
    reuse = check_reuse(
        measured.reuse["previous_prompt"].to_numpy(),
        measured.reuse["prompt"].to_numpy(),
        measured.reuse["cached_tokens"].to_numpy(),
        reference.reuse_block_tokens,
    )
    if reuse.violations:
        p, length, expected, got = reuse.violations[0]
        raise CalibrationError(
            f"reuse rule: {len(reuse.violations)} of {reuse.checked} "
            f"re-arrivals break C = floor(min(P, L-1)/128)*128 (first: "
            f"P={p}, L={length}, expected {expected}, reported {got}); "
            "the predictor's field reuse.block_tokens does not describe "
            "this backend: check the prefix-cache settings"
        )
    truth = None
    if backend.backend != "rbln":
        truth = load_truth(backend.emulator_truth).version
    return Calibration(
        measured,
        decode,
        prefill,
        reuse,
        backend.backend,
        truth,
        fit_compile(compile_records) if compile_records else None,
    )


def write_samples(calibration: Calibration, out_dir: Path) -> None:
    """The samples behind the fits, for Table VII and the step-time figure."""
    write_frame(calibration.measured.decode, out_dir / DECODE_STEPS_FILE)
    write_frame(calibration.measured.prefill, out_dir / PREFILL_FILE)
    write_frame(calibration.measured.reuse, out_dir / REUSE_FILE)


# ------------------------------------------------------------------------------ profile


def _ms(value: float) -> float:
    return round(value * 1e3, 6)


def _ms_pair(pair: tuple[float, float]) -> list[float]:
    return [_ms(pair[0]), _ms(pair[1])]


def profile_document(
    calibration: Calibration,
    config: CalibrationConfig,
    required_buckets: tuple[int, ...] = (),
    reference: Profile | None = None,
) -> dict[str, Any]:
    """The calibrated profile in the schema of ``profile_rbln_ca25.yaml``.

    g(b) = f(b) + alpha is what the step log measures; the split keeps the reference
    profile's alpha (labelled ``assumed``), so f(b) = g(b) - alpha and every prediction,
    which only uses f(b) + alpha + beta*n, is set by the measurements alone.
    """
    reference = reference or measured_profile()
    decode, prefill, settings = calibration.decode, calibration.prefill, config.calibration
    backend, model = calibration.backend, config.model
    by_bucket = calibration.measured.decode.groupby("bucket")
    alpha_ms = _ms(reference.alpha_s)
    costs: dict[int, Any] = {}
    for fit in decode.buckets:
        rows = by_bucket.get_group(fit.bucket)
        costs[fit.bucket] = {
            "value": round(_ms(fit.g_s) - alpha_ms, 6),
            "kind": "measured",
            "g_ms": _ms(fit.g_s),
            "g_ci95_ms": _ms_pair(fit.ci_s),
            "samples": fit.samples,
            "n_values": list(fit.n_values),
            "artifact": str(rows["artifact"].iloc[0]),
            "backend": backend,
            "run_ids": sorted(set(rows["run_id"])),
            "source": "calibration: steady decode at exactly n, step-log durations, "
            "least squares of per-(b, n) medians on g(b) + beta*n; bootstrap CI",
        }
    g_points = {fit.bucket: fit.g_s for fit in decode.buckets}
    interpolated = {}
    for bucket in sorted(set(required_buckets) - set(g_points)):
        value, between = interpolate_bucket(g_points, bucket)
        interpolated[bucket] = {
            "value": round(_ms(value) - alpha_ms, 6),
            "kind": "interpolated",
            "between": list(between),
            "source": "docs/DESIGN.md §3 rule; computed again at run time, never a reference point",
        }
    prefill_runs = sorted(set(calibration.measured.prefill["run_id"]))
    decode_runs = sorted(set(calibration.measured.decode["run_id"]))
    kv_bytes = kv_bytes_per_token(model.layers, model.kv_heads, model.head_dim, model.dtype_bytes)

    def arch(value: int, what: str) -> dict[str, Any]:
        origin = model.config_json or "config model: section"
        return {"value": value, "kind": "model", "source": f"{what} of {model.name} ({origin})"}

    compile_fit = calibration.compile
    if compile_fit is None:
        compile_section = {
            "seconds_intercept": {
                "value": reference.compile_intercept_s,
                "kind": "published",
                "source": "authors' fit (paper Table XIV); compile records "
                "are fitted only on backend rbln",
            },
            "seconds_per_graph": {
                "value": reference.compile_per_graph_s,
                "kind": "published",
                "source": "authors' fit (paper Table XIV)",
            },
            "artifact_gib_intercept": {
                "value": reference.artifact_intercept_gib,
                "kind": "published",
                "source": "paper Table XIV",
            },
            "artifact_gib_per_bucket": {
                "value": reference.artifact_per_bucket_gib,
                "kind": "published",
                "source": "paper Table XIV",
            },
        }
    else:
        fitted = {
            "kind": "fitted",
            "samples": compile_fit.samples,
            "backend": backend,
            "source": "least squares over this backend's compile records",
        }
        compile_section = {
            "seconds_intercept": {"value": compile_fit.seconds_intercept, **fitted},
            "seconds_per_graph": {"value": compile_fit.seconds_per_graph, **fitted},
            "artifact_gib_intercept": {"value": compile_fit.gib_intercept, **fitted},
            "artifact_gib_per_bucket": {"value": compile_fit.gib_per_bucket, **fitted},
        }
    compile_section["budget_s"] = {
        "value": reference.compile_budget_s,
        "kind": "assumed",
        "source": "search compile budget (paper Section V-A)",
    }
    samples_digest = hashlib.sha256(
        json.dumps(
            [sorted(g_points.items()), decode.beta_s, prefill.per_chunk_s, prefill.per_token_s],
        ).encode()
    ).hexdigest()[:12]
    return {
        "profile_version": f"calibrated/{backend}/{samples_digest}",
        "model_id": model.name,
        "stack": {
            "backend": backend,
            "emulator_truth": calibration.truth_version,
            "model": f"{model.name} {model.dtype}, max_seq_len {model.max_seq_len}, "
            f"num_devices {model.num_devices}",
            "artifacts": [
                {"name": a.name, "buckets": list(a.buckets), "batch_size": a.batch_size}
                for a in settings.artifacts
            ],
        },
        "calibration": {
            "backend": backend,
            "run_ids": list(calibration.measured.run_ids),
            "settings": _plain(asdict(settings)),
            "measured_buckets": sorted(g_points),
            "interpolated_buckets": sorted(interpolated),
        },
        "decode": {
            "bucket_cost_ms": costs,
            "alpha_ms": {
                "value": alpha_ms,
                "kind": "assumed",
                "source": "the step log measures g(b) = f(b) + alpha only; alpha "
                "keeps the published split (paper Table VII), so f(b) = "
                "g(b) - alpha and f(b) + alpha is measured",
            },
            "beta_ms_per_request": {
                "value": _ms(decode.beta_s),
                "kind": "fitted",
                "ci95": _ms_pair(decode.beta_ci_s),
                "samples": decode.samples,
                "backend": backend,
                "run_ids": decode_runs,
                "source": "calibration: common slope of the step time in n across buckets",
            },
            "residuals": {
                "bound_relative": settings.max_residual,
                "max_abs_relative": round(decode.max_abs_residual, 6),
                "rms_relative": round(decode.rms_residual, 6),
                "points": [
                    {
                        "bucket": r.bucket,
                        "n": r.n,
                        "samples": r.samples,
                        "median_ms": _ms(r.median_s),
                        "fitted_ms": _ms(r.fitted_s),
                    }
                    for r in decode.residuals
                ],
            },
            "interpolated_bucket_cost_ms": interpolated,
            "unmeasured_buckets": "linear interpolation between measured points; above the "
            "largest, extrapolation along the line through the two "
            "largest (docs/DESIGN.md §3); never used as reference points",
        },
        "prefill": {
            "chunk_tokens": {
                "value": prefill.chunk_tokens,
                "kind": "measured",
                "source": "vllm-rbln prefill chunk (paper Section III-C)",
            },
            "per_chunk_s": {
                "value": prefill.per_chunk_s,
                "kind": "fitted",
                "ci95": list(prefill.per_chunk_ci_s),
                "samples": prefill.samples,
                "backend": backend,
                "run_ids": prefill_runs,
                "source": "calibration: server-side prefill times, relative "
                "least squares on ceil(q/128)*(a + b*q)",
            },
            "per_token_s": {
                "value": prefill.per_token_s,
                "kind": "fitted",
                "ci95": list(prefill.per_token_ci_s),
                "samples": prefill.samples,
                "backend": backend,
                "run_ids": prefill_runs,
                "source": "calibration: same fit",
            },
            "fit_range_tokens": {
                "value": list(prefill.fit_range),
                "kind": "measured",
                "source": "smallest and largest computed tokens measured",
            },
            "errors_by_range": [asdict(r) for r in prefill.ranges],
        },
        "reuse": {
            "block_tokens": {
                "value": calibration.reuse.block_tokens,
                "kind": "checked",
                "checked": calibration.reuse.checked,
                "violations": len(calibration.reuse.violations),
                "source": "calibration: every re-arrival with a surviving "
                "prefix reported floor(min(P, L-1)/128)*128",
            },
        },
        "kv": {
            "layers": arch(model.layers, "num_hidden_layers"),
            "kv_heads": arch(model.kv_heads, "num_key_value_heads"),
            "head_dim": arch(model.head_dim, "head_dim"),
            "bytes_per_element": arch(model.dtype_bytes, model.dtype),
            "slot_tokens": arch(model.max_seq_len, "max_seq_len (eager: one block per sequence)"),
            "num_devices": arch(model.num_devices, "deployment"),
            "bytes_per_token": {
                "value": kv_bytes,
                "kind": "derived",
                "source": "2 x layers x kv_heads x head_dim x bytes",
            },
        },
        "compile": compile_section,
    }


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def write_profile(document: dict[str, Any], path: Path) -> Path:
    """Write the profile YAML atomically with a header saying what it is."""
    header = (
        "# Calibrated substrate profile written by `rearrival calibrate` (docs/DESIGN.md §3).\n"
        "# Same schema as rearrival/data/profile_rbln_ca25.yaml; every value carries\n"
        "# its kind (measured/fitted/interpolated/assumed/model), CI, samples, backend\n"
        "# and run ids. Interpolated buckets are listed for reading only.\n"
    )
    text = header + yaml.safe_dump(document, sort_keys=False, width=100, default_flow_style=None)
    atomic_write_bytes(path, text.encode())
    return path


# ------------------------------------------------------------------ study definition, rbln


def required_buckets(cfg: StudyConfig) -> tuple[int, ...]:
    """Every bucket a configured study or the search can select (docs/DESIGN.md §12: the search
    draws buckets from 1..batch_size for each candidate batch size)."""
    wanted = {b for c in cfg.configurations.values() for b in c.buckets}
    batch_sizes = cfg.search.get("batch_sizes", [8, 10, 12, 16])
    wanted.update(range(1, max(batch_sizes) + 1))
    return tuple(sorted(wanted))


def compile_calibration(config: CalibrationConfig, rbln: RblnSettings, out: Path) -> Path:
    """Compile (or reuse) every calibration artifact with optimum-rbln and record where
    each is and what compiling it cost; the record feeds ``--compiled`` and the compile
    fit (backend rbln only)."""
    model = config.model
    entries = {}
    for artifact in config.calibration.artifacts:
        # Looked up on the module at call time, so a test can stand in for the compiler.
        result = rbln_stack.compile_artifact(
            rbln_stack.CompileConfig(
                model=rbln.model,
                batch_size=artifact.batch_size,
                buckets=artifact.buckets,
                max_seq_len=model.max_seq_len,
                num_devices=model.num_devices,
            ),
            Path(rbln.artifacts),
        )
        entries[artifact.name] = {
            "artifact": str(result.artifact),
            "reused": result.skipped,
            **json.loads(result.record.read_text()),
        }
    atomic_write_json(out, {"study": STUDY, "configurations": entries})
    return out


def compile_records(record_path: Path) -> list[tuple[int, float, float]]:
    """(buckets, compile seconds, artifact GiB) of every artifact in a compile record."""
    try:
        entries = json.loads(record_path.read_text())["configurations"]
        return [
            (
                len(e["config"]["buckets"]),
                float(e["compile_s"]),
                float(e["artifact_bytes"]) / 1024**3,
            )
            for e in entries.values()
        ]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CalibrationError(
            f"{record_path}: not a compile record with config.buckets, "
            f"compile_s and artifact_bytes per artifact ({exc!r}); run "
            "`rearrival calibrate-compile`"
        ) from exc
