"""Fits of the cost model to calibration measurements (paper II-B, III-C, IV; Table VII).

The calibration stage (``rearrival.measure.calibration``) measures; this module only turns the
measurements into the profile's numbers, each with a bootstrap CI, its sample count and
the residuals that say whether the paper's functional form holds on this backend:

- decode: per-step durations at exactly n running requests. The step log cannot split
  f(b) from alpha (both are per step), so the identifiable quantities are
  g(b) = f(b) + alpha per measured bucket and beta, fitted as
  t(n) = g(b(n)) + beta * n by least squares on the per-(b, n) medians (the paper uses
  p50 step components).
- prefill: server-side elapsed times of single prefills, fitted in the chunked
  form T(q) = ceil(q/128) * (a + b*q) on relative error, with the error per token range.
- reuse: every re-arrival with a surviving prefix must report
  floor(min(P, L-1)/128)*128 cached tokens.
- memory from the model's architecture; compile time and artifact size from compile
  records where they exist.

Every fit that does not hold raises :class:`FitError` naming the bucket, field or range
and the fix; nothing falls back to the published constants.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from rearrival.errors import RearrivalError

if TYPE_CHECKING:  # a type hint only: the profile's readers (simulate) need no pandas
    import pandas as pd

CI_LEVEL = 0.95
# Prefill error is reported per range of computed tokens; below 500 the paper's fit was
# extrapolation (III-C), so the short re-arrival remainders get their own row. The last
# range ends at the longest prompt a slot holds (the fit's ``max_tokens``).
PREFILL_BOUNDS = ((1, 499), (500, 1999), (2000, None))


def prefill_ranges(max_tokens: int) -> tuple[tuple[int, int], ...]:
    """The reported token ranges, the last one ending at ``max_tokens``."""
    return tuple((low, max_tokens if high is None else high) for low, high in PREFILL_BOUNDS)


class FitError(RearrivalError, ValueError):
    """Measurements that do not support the cost model; names bucket/field and the fix."""


def _ci(samples: np.ndarray) -> tuple[float, float]:
    low, high = np.quantile(samples, [(1 - CI_LEVEL) / 2, (1 + CI_LEVEL) / 2], axis=0)
    return float(low), float(high)


# ------------------------------------------------------------------------------ decode


@dataclass(frozen=True)
class BucketFit:
    """g(b) = f(b) + alpha of one measured bucket (seconds)."""

    bucket: int
    g_s: float
    ci_s: tuple[float, float]
    samples: int
    n_values: tuple[int, ...]


@dataclass(frozen=True)
class PointResidual:
    """Median step time at one (b, n) beside the fitted line."""

    bucket: int
    n: int
    samples: int
    median_s: float
    fitted_s: float

    @property
    def relative(self) -> float:
        return (self.median_s - self.fitted_s) / self.fitted_s


@dataclass(frozen=True)
class DecodeFit:
    """Per-bucket g(b), the common slope beta, and the residual of every (b, n) point."""

    buckets: tuple[BucketFit, ...]
    beta_s: float
    beta_ci_s: tuple[float, float]
    residuals: tuple[PointResidual, ...]
    resamples: int

    @property
    def samples(self) -> int:
        return sum(b.samples for b in self.buckets)

    @property
    def max_abs_residual(self) -> float:
        return max(abs(r.relative) for r in self.residuals)

    @property
    def rms_residual(self) -> float:
        return float(np.sqrt(np.mean([r.relative**2 for r in self.residuals])))

    def g(self, bucket: int) -> float:
        return next(b.g_s for b in self.buckets if b.bucket == bucket)


def fit_decode(
    steps: pd.DataFrame, *, min_steps: int, max_residual: float, resamples: int, seed: int
) -> DecodeFit:
    """Fit t(n) = g(b(n)) + beta*n to per-step durations (columns ``bucket``, ``n``,
    ``duration_s``), one row per usable decode step.

    Raises :class:`FitError` when a (bucket, n) point has fewer than ``min_steps`` steps,
    when no bucket was seen at two running counts (beta is then not identifiable), or
    when a point's median is further than ``max_residual`` (relative) from the line.
    """
    if steps.empty:
        raise FitError(
            "calibration produced no usable decode steps; check that the step "
            "log carries t_mono_ns (apply the observation patch) and raise "
            "calibration.decode_steps"
        )
    groups = {
        key: np.sort(g["duration_s"].to_numpy(dtype=float))
        for key, g in steps.groupby(["bucket", "n"], sort=True)
    }
    for (bucket, n), values in groups.items():
        if len(values) < min_steps:
            raise FitError(
                f"bucket {bucket}, n={n}: {len(values)} usable decode steps, "
                f"need >= {min_steps} (calibration.min_steps); raise "
                "calibration.decode_steps or lower calibration.min_steps"
            )
    keys = list(groups)
    buckets = sorted({b for b, _ in keys})
    if all(sum(1 for b, _ in keys if b == bucket) < 2 for bucket in buckets):
        raise FitError(
            "no bucket was measured at two running counts, so beta cannot be "
            "told from g(b); add a calibration artifact whose buckets leave gaps "
            "(e.g. 1,2,4,8) to calibration.artifacts"
        )
    design = np.zeros((len(keys), len(buckets) + 1))
    for row, (bucket, n) in enumerate(keys):
        design[row, buckets.index(bucket)] = 1.0
        design[row, -1] = n
    solve = np.linalg.pinv(design)
    medians = np.array([np.median(groups[k]) for k in keys])
    params = solve @ medians
    rng = np.random.default_rng(seed)
    boot = np.empty((resamples, len(keys)))
    for column, key in enumerate(keys):
        values = groups[key]
        picks = rng.integers(0, len(values), size=(resamples, len(values)))
        boot[:, column] = np.median(values[picks], axis=1)
    boot_params = boot @ solve.T
    fitted = design @ params
    residuals = tuple(
        PointResidual(int(b), int(n), len(groups[(b, n)]), float(m), float(f))
        for (b, n), m, f in zip(keys, medians, fitted, strict=True)
    )
    worst = max(residuals, key=lambda r: abs(r.relative))
    if abs(worst.relative) > max_residual:
        raise FitError(
            f"bucket {worst.bucket}, n={worst.n}: median step time "
            f"{worst.median_s * 1e3:.4f} ms is {worst.relative:+.2%} from the fitted "
            f"g(b)+beta*n, beyond calibration.max_residual={max_residual}; check the "
            "device for other load and re-run, or raise the bound if the "
            "backend's step time is not linear in n"
        )
    fits = tuple(
        BucketFit(
            bucket=int(bucket),
            g_s=float(params[i]),
            ci_s=_ci(boot_params[:, i]),
            samples=int(sum(len(groups[k]) for k in keys if k[0] == bucket)),
            n_values=tuple(int(n) for b, n in keys if b == bucket),
        )
        for i, bucket in enumerate(buckets)
    )
    return DecodeFit(
        buckets=fits,
        beta_s=float(params[-1]),
        beta_ci_s=_ci(boot_params[:, -1]),
        residuals=residuals,
        resamples=resamples,
    )


def interpolate_bucket(points: dict[int, float], bucket: int) -> tuple[float, tuple[int, int]]:
    """The docs/DESIGN.md §3 rule for an unmeasured bucket: linear between the measured
    neighbours, above the largest along the line through the two largest, below the
    smallest along the line through the two smallest. Returns (value, the two buckets)."""
    measured = sorted(points)
    if len(measured) < 2:
        raise FitError(
            "interpolation needs two measured buckets; add buckets to calibration.artifacts"
        )
    if bucket > measured[-1]:
        b0, b1 = measured[-2], measured[-1]
    elif bucket < measured[0]:
        b0, b1 = measured[0], measured[1]
    else:
        b1 = next(b for b in measured if b > bucket)
        b0 = max(b for b in measured if b < bucket)
    value = points[b0] + (points[b1] - points[b0]) * (bucket - b0) / (b1 - b0)
    return value, (b0, b1)


# ----------------------------------------------------------------------------- prefill


@dataclass(frozen=True)
class RangeError:
    """Fit error of T(q) over one range of computed tokens."""

    low: int
    high: int
    samples: int
    mean_abs: float
    max_abs: float


@dataclass(frozen=True)
class PrefillFit:
    """T(q) = ceil(q/chunk) * (per_chunk + per_token*q) with CIs and per-range errors."""

    chunk_tokens: int
    per_chunk_s: float
    per_chunk_ci_s: tuple[float, float]
    per_token_s: float
    per_token_ci_s: tuple[float, float]
    samples: int
    fit_range: tuple[int, int]
    ranges: tuple[RangeError, ...]

    def predict(self, q: np.ndarray) -> np.ndarray:
        q = np.asarray(q, dtype=float)
        return np.ceil(q / self.chunk_tokens) * (self.per_chunk_s + self.per_token_s * q)


def _prefill_params(q: np.ndarray, t: np.ndarray, chunk: int) -> np.ndarray:
    chunks = np.ceil(q / chunk)
    # Relative least squares: every prompt length counts alike, short ones included.
    design = np.column_stack([chunks, chunks * q]) / t[:, None]
    return np.linalg.lstsq(design, np.ones_like(t), rcond=None)[0]


def fit_prefill(
    q: np.ndarray,
    t: np.ndarray,
    *,
    chunk_tokens: int,
    max_error: float,
    resamples: int,
    seed: int,
    max_tokens: int,
) -> PrefillFit:
    """Fit the chunked prefill model to (computed tokens, server-side seconds) pairs.

    Raises :class:`FitError` when there are too few distinct lengths, when the fitted
    T(q) is not increasing over 1..``max_tokens`` (a negative coefficient), or when the
    mean relative error in any range exceeds ``max_error``.
    """
    q, t = np.asarray(q, dtype=float), np.asarray(t, dtype=float)
    keep = q > 0
    q, t = q[keep], t[keep]
    if len(np.unique(np.ceil(q / chunk_tokens))) < 3:
        raise FitError(
            "prefill: fewer than three distinct chunk counts measured; add prompt "
            "lengths to calibration.prefill_tokens"
        )
    params = _prefill_params(q, t, chunk_tokens)
    rng = np.random.default_rng(seed)
    boot = np.array(
        [
            _prefill_params(q[i], t[i], chunk_tokens)
            for i in rng.integers(0, len(q), size=(resamples, len(q)))
        ]
    )
    grid = np.arange(1, max_tokens + 1, dtype=float)
    curve = np.ceil(grid / chunk_tokens) * (params[0] + params[1] * grid)
    falls = np.flatnonzero(np.diff(curve) < 0)
    if curve[0] <= 0 or falls.size:
        at = int(grid[falls[0] + 1]) if falls.size else 1
        raise FitError(
            f"prefill fit is not increasing in q (per_chunk_s={params[0]:.6g}, "
            f"per_token_s={params[1]:.6g}; T falls at q={at}); fields "
            "prefill.per_chunk_s/per_token_s cannot be used: measure more "
            "prompt lengths (calibration.prefill_tokens, prefill_repeats) and "
            "check the server-side prefill times"
        )
    relative = np.abs(np.ceil(q / chunk_tokens) * (params[0] + params[1] * q) / t - 1)
    ranges = []
    for low, high in prefill_ranges(max_tokens):
        inside = (q >= low) & (q <= high)
        if not inside.any():
            continue
        error = RangeError(
            low,
            high,
            int(inside.sum()),
            float(relative[inside].mean()),
            float(relative[inside].max()),
        )
        if error.mean_abs > max_error:
            raise FitError(
                f"prefill range {low}-{high} tokens: mean fit error "
                f"{error.mean_abs:.2%} exceeds calibration.max_prefill_error="
                f"{max_error}; the chunked form does not describe this backend "
                "there, or the times are disturbed: re-measure"
            )
        ranges.append(error)
    return PrefillFit(
        chunk_tokens=chunk_tokens,
        per_chunk_s=float(params[0]),
        per_chunk_ci_s=_ci(boot[:, 0]),
        per_token_s=float(params[1]),
        per_token_ci_s=_ci(boot[:, 1]),
        samples=len(q),
        fit_range=(int(q.min()), int(q.max())),
        ranges=tuple(ranges),
    )


# ------------------------------------------------------------------------------- reuse


@dataclass(frozen=True)
class ReuseCheck:
    """Re-arrivals whose previous prompt P survived in a slot, checked against the rule."""

    block_tokens: int
    checked: int
    violations: tuple[tuple[int, int, int, int], ...]  # (P, L, expected C, reported C)


def check_reuse(
    previous: np.ndarray, prompt: np.ndarray, cached: np.ndarray, block_tokens: int
) -> ReuseCheck:
    """C must equal floor(min(P, L-1)/block)*block for every surviving prefix (III-B)."""
    rows = []
    for p, length, c in zip(previous, prompt, cached, strict=True):
        expected = max(0, min(int(p), int(length) - 1) // block_tokens * block_tokens)
        if int(c) != expected:
            rows.append((int(p), int(length), expected, int(c)))
    return ReuseCheck(block_tokens, len(previous), tuple(rows))


# ---------------------------------------------------------------------- memory, compile

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float8": 1, "int8": 1}


@dataclass(frozen=True)
class CompileFit:
    """time = intercept + per_graph * (buckets + 1); size = intercept + per_bucket * buckets."""

    seconds_intercept: float
    seconds_per_graph: float
    gib_intercept: float
    gib_per_bucket: float
    samples: int


def fit_compile(records: list[tuple[int, float, float]]) -> CompileFit:
    """Least squares over compile jobs' own records: (buckets, seconds, artifact GiB)."""
    counts = {r[0] for r in records}
    if len(counts) < 2:
        raise FitError(
            "compile fit needs compile records of at least two bucket counts; "
            "compile another configuration or keep the published fit"
        )
    b = np.array([r[0] for r in records], dtype=float)
    seconds = np.array([r[1] for r in records], dtype=float)
    gib = np.array([r[2] for r in records], dtype=float)
    time_fit = np.polyfit(b + 1, seconds, 1)
    size_fit = np.polyfit(b, gib, 1)
    return CompileFit(
        float(time_fit[1]), float(time_fit[0]), float(size_fit[1]), float(size_fit[0]), len(records)
    )


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """K and V per layer and KV head (Table XV): 2 x layers x kv_heads x head_dim x bytes."""
    return 2 * layers * kv_heads * head_dim * dtype_bytes


def slot_gib(bytes_per_token: int, slot_tokens: int) -> float:
    return bytes_per_token * slot_tokens / 1024**3
