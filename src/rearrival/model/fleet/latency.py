"""Latency of predicted requests and SLO attainment (docs/DESIGN.md §16), computed
in one place from the per-request times (``records.RequestOutcome``), never re-derived by a
report or a verb.

Per request: ``queue_s`` = first_scheduled_s - arrival_s; ``ttft_s`` = first_token_s -
arrival_s; ``tpot_s`` = (finish_s - first_token_s) / (gen_tokens - 1) for gen_tokens >= 2
(none for a single token); ``e2e_s`` = finish_s - arrival_s. The measured window holds the
requests that arrive in [warm-up, horizon]; earlier and later ones were simulated but are
not counted. A request meets an SLO when every threshold it sets holds (a request with one
generated token has no tpot_s and meets that threshold); attainment is the share of measured
requests that meet it, and a run meets the SLO when attainment >= the required share.
Percentiles are numpy's default (linear interpolation between order statistics).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rearrival.errors import RearrivalError
from rearrival.model.fleet.records import RequestOutcome

METRICS = ("ttft_s", "tpot_s", "e2e_s", "queue_s")
PERCENTILES = (50, 90, 99)
DEFAULT_ATTAINMENT = 0.9


class SloError(RearrivalError, ValueError):
    """An SLO or measurement window that cannot be used; the message names the fix."""


@dataclass(frozen=True)
class Latency:
    queue_s: float
    ttft_s: float
    tpot_s: float | None
    e2e_s: float


def latency(r: RequestOutcome) -> Latency:
    tpot = (r.finish_s - r.first_token_s) / (r.gen_tokens - 1) if r.gen_tokens >= 2 else None
    return Latency(
        r.first_scheduled_s - r.arrival_s,
        r.first_token_s - r.arrival_s,
        tpot,
        r.finish_s - r.arrival_s,
    )


@dataclass(frozen=True)
class LatencyColumns:
    """``latency`` of many requests at once, one numpy column per metric (the same float
    operations, element by element); ``tpot_s`` is NaN where ``has_tpot`` is false."""

    queue_s: np.ndarray
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray
    has_tpot: np.ndarray


def latency_columns(
    arrival_s: np.ndarray,
    first_scheduled_s: np.ndarray,
    first_token_s: np.ndarray,
    finish_s: np.ndarray,
    gen_tokens: np.ndarray,
) -> LatencyColumns:
    """``latency`` of each request, from the columns a compiled core writes."""
    has_tpot = gen_tokens >= 2
    tpot = np.full(len(gen_tokens), np.nan)
    np.divide(finish_s - first_token_s, gen_tokens - 1, out=tpot, where=has_tpot)
    return LatencyColumns(
        first_scheduled_s - arrival_s,
        first_token_s - arrival_s,
        tpot,
        finish_s - arrival_s,
        has_tpot,
    )


@dataclass(frozen=True)
class Slo:
    """Thresholds in seconds (None: not part of the SLO) and the share that must meet them."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    attainment: float = DEFAULT_ATTAINMENT

    def __post_init__(self) -> None:
        given = [v for v in (self.ttft_s, self.tpot_s, self.e2e_s) if v is not None]
        if not given:
            raise SloError("an SLO needs at least one threshold: ttft=SECONDS,tpot=SECONDS")
        if not all(math.isfinite(v) and v > 0 for v in given):
            raise SloError("SLO thresholds must be positive numbers of seconds")
        if not 0 < self.attainment <= 1:
            raise SloError(f"attainment {self.attainment}: give a share in (0, 1], e.g. 0.9")

    def met(self, value: Latency) -> bool:
        return (
            (self.ttft_s is None or value.ttft_s <= self.ttft_s)
            and (self.tpot_s is None or value.tpot_s is None or value.tpot_s <= self.tpot_s)
            and (self.e2e_s is None or value.e2e_s <= self.e2e_s)
        )

    def met_columns(self, values: LatencyColumns) -> np.ndarray:
        """``met`` of each request of ``values``."""
        met = np.ones(len(values.ttft_s), dtype=bool)
        if self.ttft_s is not None:
            met &= values.ttft_s <= self.ttft_s
        if self.tpot_s is not None:
            met &= ~values.has_tpot | (values.tpot_s <= self.tpot_s)
        if self.e2e_s is not None:
            met &= values.e2e_s <= self.e2e_s
        return met

    @classmethod
    def parse(cls, text: str, attainment: float = DEFAULT_ATTAINMENT) -> Slo:
        """``ttft=0.3,tpot=0.03[,e2e=5]`` (seconds)."""
        thresholds: dict[str, float] = {}
        for part in text.split(","):
            name, _, value = part.partition("=")
            name = name.strip()
            if name not in ("ttft", "tpot", "e2e") or not value:
                raise SloError(
                    f"--slo {text!r}: give NAME=SECONDS pairs with NAME ttft, tpot or e2e, "
                    "e.g. ttft=0.3,tpot=0.03"
                )
            try:
                thresholds[f"{name}_s"] = float(value)
            except ValueError:
                raise SloError(f"--slo {text!r}: {value!r} is not a number of seconds") from None
        return cls(**thresholds, attainment=attainment)


def measured(
    requests: Sequence[RequestOutcome], warmup_s: float = 0.0, horizon_s: float = math.inf
) -> list[RequestOutcome]:
    """The requests that arrive in [warmup_s, horizon_s]."""
    _check_window(warmup_s, horizon_s)
    return [r for r in requests if warmup_s <= r.arrival_s <= horizon_s]


def measured_mask(
    arrival_s: np.ndarray, warmup_s: float = 0.0, horizon_s: float = math.inf
) -> np.ndarray:
    """``measured`` on a column of arrival times: which requests it keeps."""
    _check_window(warmup_s, horizon_s)
    return (warmup_s <= arrival_s) & (arrival_s <= horizon_s)


def _check_window(warmup_s: float, horizon_s: float) -> None:
    if not (math.isfinite(warmup_s) and warmup_s >= 0) or not horizon_s > warmup_s:
        raise SloError(f"measurement window [{warmup_s}, {horizon_s}]: give 0 <= warm-up < horizon")


def percentiles(requests: Sequence[RequestOutcome]) -> dict[str, dict[str, float | None]]:
    """p50/p90/p99 of each metric over ``requests`` (None where no request has one)."""
    values = [latency(r) for r in requests]
    out: dict[str, dict[str, float | None]] = {}
    for metric in METRICS:
        series = [getattr(v, metric) for v in values if getattr(v, metric) is not None]
        if not series:
            out[metric] = {f"p{p}": None for p in PERCENTILES}
            continue
        qs = np.quantile(series, [p / 100 for p in PERCENTILES])
        out[metric] = {f"p{p}": float(q) for p, q in zip(PERCENTILES, qs, strict=True)}
    return out


def attainment(requests: Sequence[RequestOutcome], slo: Slo) -> float:
    """Share of ``requests`` meeting ``slo`` (0 for no request: nothing was served)."""
    if not requests:
        return 0.0
    return sum(1 for r in requests if slo.met(latency(r))) / len(requests)
