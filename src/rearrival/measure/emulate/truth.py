"""The emulated stack's ground truth: the truth file, its validation, and the true costs.

docs/DESIGN.md §5, paper Sections II-III. Everything the twin does that the predictor might
get wrong is a value here (``data/emulator_truth.yaml``, each with its reason): the true
decode cost f(b) (PCHIP in log2 b, a quadratic above the largest measured bucket), the
true prefill law, noise, client jitter and HTTP latency. Kept apart from the engine so a
calibration or benchmark can read and vary the truth without building an engine.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from rearrival.errors import RearrivalError
from rearrival.model.cost.profile import Profile
from rearrival.provenance import field_value, read_mapping, shipped_mapping
from rearrival.vocabulary import DUMMY_BLOCKS, RELEASES

# The engine models a serving stack's padding block: none, or the measured pre-eviction.
EMULATED_DUMMY_BLOCKS = tuple(mode for mode in DUMMY_BLOCKS if mode != "reserved")

DEFAULT_TRUTH = "emulator_truth.yaml"


class EmulateError(RearrivalError, ValueError):
    """Arguments or a truth file the emulated backend cannot run; names field and fix."""


@dataclass(frozen=True)
class Truth:
    """The emulated stack's ground truth (times in seconds); see emulator_truth.yaml."""

    version: str
    bucket_cost_s: tuple[tuple[int, float], ...]
    convexity_s_per_bucket2: float
    alpha_s: float
    beta_s: float
    step_noise_sigma: float
    prefill_noise_sigma: float
    release: str
    dummy_block: str
    first_send_spread_s: tuple[float, float]
    turnaround_s: tuple[float, float]
    ingress_median_s: float
    egress_median_s: float
    latency_sigma: float
    # True prefill law ceil(q/chunk) * (per_chunk + per_token * q); None: the profile's fit
    # (the shipped truth), so only a truth file that says otherwise departs from it.
    prefill_per_chunk_s: float | None = None
    prefill_per_token_s: float | None = None

    def __post_init__(self) -> None:
        points = [b for b, _ in self.bucket_cost_s]
        if len(points) < 2 or points != sorted(set(points)) or points[0] < 1:
            raise EmulateError(
                "truth field 'decode.bucket_cost_ms' needs two or more distinct positive buckets"
            )
        costs = [c for _, c in self.bucket_cost_s]
        if any(b <= a for a, b in itertools.pairwise(costs)):
            raise EmulateError(
                "truth field 'decode.bucket_cost_ms' must increase with the "
                "bucket (a monotone f(b) is what PCHIP preserves)"
            )
        if self.release not in RELEASES:
            raise EmulateError(
                f"truth field 'scheduler.release' is {self.release!r}; "
                f"use one of {', '.join(RELEASES)}"
            )
        if self.dummy_block not in EMULATED_DUMMY_BLOCKS:
            raise EmulateError(
                f"truth field 'scheduler.dummy_block' is {self.dummy_block!r}; "
                f"the emulated engine implements {', '.join(EMULATED_DUMMY_BLOCKS)} "
                "('reserved' is a predictor rule of the paper's S9 simulator, not a stack's)"
            )
        nonnegative = {
            "decode.convexity_above_largest_ms_per_bucket2": self.convexity_s_per_bucket2,
            "decode.alpha_ms": self.alpha_s,
            "decode.beta_ms_per_request": self.beta_s,
            "decode.step_noise_sigma": self.step_noise_sigma,
            "prefill.noise_sigma": self.prefill_noise_sigma,
            "http.ingress_median_ms": self.ingress_median_s,
            "http.egress_median_ms": self.egress_median_s,
            "http.latency_sigma": self.latency_sigma,
            "prefill.per_chunk_ms": self.prefill_per_chunk_s or 0.0,
            "prefill.per_token_ms": self.prefill_per_token_s or 0.0,
        }
        if (self.prefill_per_chunk_s is None) != (self.prefill_per_token_s is None):
            raise EmulateError(
                "truth fields 'prefill.per_chunk_ms' and 'prefill.per_token_ms' "
                "go together: give both or neither"
            )
        for name, value in nonnegative.items():
            if not value >= 0:  # also rejects NaN
                raise EmulateError(f"truth field '{name}' must be a number >= 0, got {value}")
        for name, (low, high) in (
            ("client.first_send_spread_ms", self.first_send_spread_s),
            ("client.turnaround_ms", self.turnaround_s),
        ):
            if not 0 <= low <= high:
                raise EmulateError(
                    f"truth field '{name}' must be [low, high] with "
                    f"0 <= low <= high, got {[low, high]}"
                )


def _field(tree: dict[str, Any], dotted: str, source: str) -> Any:
    return field_value(
        tree, dotted, source, error=EmulateError, reference=DEFAULT_TRUTH, require_value=True
    )


def truth_from_mapping(tree: dict[str, Any], source: str = "<truth>") -> Truth:
    """Build a Truth from the parsed YAML tree; milliseconds in the file, seconds here."""

    def ms(dotted: str) -> float:
        return float(_field(tree, dotted, source)) / 1000

    def ms_pair(dotted: str) -> tuple[float, float]:
        low, high = _field(tree, dotted, source)
        return float(low) / 1000, float(high) / 1000

    try:
        costs = _field(tree, "decode.bucket_cost_ms", source)
        values = dict(
            version=str(tree.get("truth_version", "unversioned")),
            bucket_cost_s=tuple(sorted((int(b), float(v) / 1000) for b, v in costs.items())),
            convexity_s_per_bucket2=ms("decode.convexity_above_largest_ms_per_bucket2"),
            alpha_s=ms("decode.alpha_ms"),
            beta_s=ms("decode.beta_ms_per_request"),
            step_noise_sigma=float(_field(tree, "decode.step_noise_sigma", source)),
            prefill_noise_sigma=float(_field(tree, "prefill.noise_sigma", source)),
            release=str(_field(tree, "scheduler.release", source)),
            dummy_block=str(_field(tree, "scheduler.dummy_block", source)),
            first_send_spread_s=ms_pair("client.first_send_spread_ms"),
            turnaround_s=ms_pair("client.turnaround_ms"),
            ingress_median_s=ms("http.ingress_median_ms"),
            egress_median_s=ms("http.egress_median_ms"),
            latency_sigma=float(_field(tree, "http.latency_sigma", source)),
        )
        prefill = tree.get("prefill") or {}
        if "per_chunk_ms" in prefill or "per_token_ms" in prefill:
            values["prefill_per_chunk_s"] = ms("prefill.per_chunk_ms")
            values["prefill_per_token_s"] = ms("prefill.per_token_ms")
    except (AttributeError, TypeError, ValueError) as exc:
        if isinstance(exc, EmulateError):
            raise
        raise EmulateError(f"{source}: unusable truth value ({exc}); see {DEFAULT_TRUTH}") from exc
    try:
        return Truth(**values)
    except EmulateError as exc:
        raise EmulateError(f"{source}: {exc}") from exc


def load_truth(path: str | Path | None = None) -> Truth:
    """Read a truth file; ``None`` gives the shipped twin of the measured RBLN stack."""
    if path is None:
        return default_truth()
    tree = read_mapping(Path(path), error=EmulateError, reference=DEFAULT_TRUTH)
    return truth_from_mapping(tree, str(path))


@cache
def default_truth() -> Truth:
    """The shipped truth file, parsed once per process."""
    """The shipped truth file, parsed once per process."""
    return truth_from_mapping(shipped_mapping(DEFAULT_TRUTH), DEFAULT_TRUTH)


@cache
def _cost_curve(points: tuple[tuple[int, float], ...]) -> tuple[Any, float]:
    """The PCHIP curve through the measured points and its end slope (cached per truth)."""
    # Imported here, not at the top: scipy.interpolate takes 0.35-0.7 s to import
    # (measured after numpy and pandas), and emulate-server imports this module before
    # it starts listening; only a bucket between or above the measured ones needs it.
    from scipy.interpolate import PchipInterpolator

    x = np.log2([b for b, _ in points])
    y = np.array([c for _, c in points])
    curve = PchipInterpolator(x, y, extrapolate=False)
    top = points[-1][0]
    # d f / d b at the largest measured bucket, from the curve's log2-space slope.
    end_slope = float(curve.derivative()(x[-1])) / (top * math.log(2))
    return curve, end_slope


def true_prefill_s(truth: Truth, profile: Profile, computed_tokens: int) -> float:
    """The twin's noise-free prefill time: the truth file's own law when it has one, else
    the profile's fitted T(q) (paper Section III-C), both with T(0) = 0."""
    if truth.prefill_per_chunk_s is None or truth.prefill_per_token_s is None:
        return profile.prefill_s(computed_tokens)
    if computed_tokens <= 0:
        return 0.0
    chunks = math.ceil(computed_tokens / profile.prefill_chunk_tokens)
    return chunks * (truth.prefill_per_chunk_s + truth.prefill_per_token_s * computed_tokens)


def true_bucket_cost_s(truth: Truth, bucket: int) -> float:
    """The twin's true f(b): the measured value where measured (paper Table VII), a
    monotone cubic (PCHIP) in log2(b) between them, and above the largest measured
    bucket the curve's end slope plus a gentle quadratic term (emulator_truth.yaml)."""
    points = truth.bucket_cost_s
    for b, cost in points:
        if b == bucket:
            return cost
    if bucket < points[0][0]:
        raise EmulateError(
            f"bucket {bucket} is below the smallest measured bucket "
            f"{points[0][0]}; the truth has no cost for it"
        )
    curve, end_slope = _cost_curve(points)
    top, top_cost = points[-1]
    if bucket > top:
        excess = bucket - top
        return top_cost + end_slope * excess + truth.convexity_s_per_bucket2 * excess**2
    return float(curve(math.log2(bucket)))
