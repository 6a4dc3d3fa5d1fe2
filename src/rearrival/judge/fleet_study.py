"""The decisions of the study on a real fleet (docs/DESIGN.md §18; README "A study on a real
fleet"): count quantities a loaded machine cannot blur, registered before the first server
starts and judged on the observed counts, so every decision is made, never withheld.

The counts of one condition (:class:`FleetCounts`) are read the same way from the fleet
predictor's result and from a run: cached tokens per request, re-arrivals that lost their
prefix (a later round that hit fewer tokens than the full blocks of the round before it, on
whichever replica: a move to another replica loses it as surely as an eviction) and the
prefill recomputed. Time to first token and device time ride along, registered as
exploratory: predicted against observed, never decided.

A criterion (:func:`fleet_criteria`) is data, registered as written: ``fewer`` (one
condition's count below another's), ``zero``, ``positive``, or ``agreement`` (the run's
comparison under its observed placement and arrivals found no predictor error: every
request agrees except those whose replica's predicted pool had evicted before admitting
it, the records' proof of timing dependence). :func:`decide` evaluates each on the
registered predictions and on the observed counts, and says whether it holds and whether
the prediction was right.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from rearrival.config.fleet import FleetStudySettings
from rearrival.errors import StageError

LOST, PREFILL, CACHED = "re_arrivals_lost", "prefill_tokens", "cached_tokens_per_request"
HOLDS, FAILS = "holds", "fails"
# the decision stage's tables (rearrival.workflow.fleet), read by the report
DECISIONS_FILE, CONDITIONS_FILE = "decisions.csv", "conditions.csv"


@dataclass(frozen=True)
class RequestCount:
    """One request as the counts need it."""

    round: int
    replica: int
    prompt_tokens: int
    cached_tokens: int
    cacheable_tokens: int  # the full blocks of the session's round before (0 on round 0)
    ttft_s: float

    @property
    def lost(self) -> bool:
        return self.round > 0 and self.cached_tokens < self.cacheable_tokens


@dataclass(frozen=True)
class FleetCounts:
    """One condition's counts (decided) and first-token times (exploratory)."""

    requests: int
    re_arrivals: int
    re_arrivals_lost: int
    cached_tokens_per_request: float
    prefill_tokens: int
    ttft_s_mean: float
    ttft_s_p90: float
    requests_per_replica: dict[str, int]

    @classmethod
    def of(cls, rows: Sequence[RequestCount]) -> FleetCounts:
        ttft = sorted(r.ttft_s for r in rows)
        per_replica: dict[str, int] = {}
        for r in rows:
            per_replica[str(r.replica)] = per_replica.get(str(r.replica), 0) + 1
        return cls(
            requests=len(rows),
            re_arrivals=sum(r.round > 0 for r in rows),
            re_arrivals_lost=sum(r.lost for r in rows),
            cached_tokens_per_request=_mean([r.cached_tokens for r in rows]),
            prefill_tokens=sum(r.prompt_tokens - r.cached_tokens for r in rows),
            ttft_s_mean=_mean(ttft),
            ttft_s_p90=_p90(ttft),
            requests_per_replica=dict(sorted(per_replica.items())),
        )

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> FleetCounts:
        return cls(**{k: raw[k] for k in cls.__dataclass_fields__})

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _p90(ordered: Sequence[float]) -> float:
    """The nearest-rank 90th percentile of sorted values."""
    if not ordered:
        return math.nan
    return float(ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)])


def _mean(values: Sequence[float] | Sequence[int]) -> float:
    return float(sum(values) / len(values)) if values else math.nan


def observed_rows(frame: Any, side: str = "observed") -> list[RequestCount]:
    """The rows of a comparison's requests table (``rearrival compare`` on a fleet run):
    ``side`` observed (what vLLM reported) or predicted (the re-run on the observed
    placement and arrivals)."""
    return [
        RequestCount(
            int(r["round"]),
            int(r["replica"]),
            int(r["prompt_tokens"]),
            int(r[f"cached_tokens_{side}"]),
            int(r["cacheable_tokens"]),
            float(r[f"ttft_s_{side}"]),
        )
        for r in frame.to_dict("records")
    ]


def fleet_criteria(fleet: FleetStudySettings) -> list[dict[str, Any]]:
    """The registered decision criteria: every policy other than round_robin against
    round_robin on the small pool (lost prefixes, prefill recomputed), session-keeping
    policies lose nothing on the large pool, the small pool makes them lose something (the
    design's premise), and per condition the per-request agreement of cached tokens."""
    small, large = fleet.pools
    criteria: list[dict[str, Any]] = []
    others = [p for p in fleet.policies if p != "round_robin"]
    baseline = "round_robin" if "round_robin" in fleet.policies else None
    for policy in others:
        mine, theirs = f"{policy}-{small}", f"{baseline}-{small}"
        if baseline is not None:
            criteria += [
                _criterion(
                    f"{policy}_loses_fewer_{small}",
                    "fewer",
                    LOST,
                    mine,
                    theirs,
                    f"{policy} loses fewer prefixes than round_robin on {small}",
                ),
                _criterion(
                    f"{policy}_recomputes_less_{small}",
                    "fewer",
                    PREFILL,
                    mine,
                    theirs,
                    f"{policy} recomputes fewer prefill tokens than round_robin on {small}",
                ),
            ]
        criteria += [
            _criterion(
                f"{policy}_loses_none_{large}",
                "zero",
                LOST,
                f"{policy}-{large}",
                None,
                f"with {policy} no re-arrival loses its prefix on {large}",
            ),
            _criterion(
                f"{policy}_loses_some_{small}",
                "positive",
                LOST,
                mine,
                None,
                f"with {policy} re-arrivals do lose prefixes on {small} (evictions)",
            ),
        ]
    criteria += [
        _criterion(
            f"agreement_{c.label}",
            "agreement",
            "cached_tokens",
            c.label,
            None,
            f"{c.label}: cached tokens equal the predictor's on the observed placement, "
            "request by request (timing-dependent ones excepted)",
        )
        for c in fleet.conditions()
    ]
    return criteria


def _criterion(
    name: str, kind: str, quantity: str, left: str, right: str | None, statement: str
) -> dict[str, Any]:
    return {
        "name": name,
        "kind": kind,
        "quantity": quantity,
        "condition": left,
        "versus": right,
        "statement": statement,
    }


@dataclass(frozen=True)
class FleetDecision:
    name: str
    statement: str
    predicted: bool
    observed: bool
    verdict: str  # HOLDS or FAILS, on the observed counts
    prediction_right: bool
    evidence: str


def evaluate(
    criterion: Mapping[str, Any],
    counts: Mapping[str, FleetCounts],
    predictor_errors: Mapping[str, int] | None = None,
) -> tuple[bool, str]:
    """Whether ``criterion`` holds on ``counts`` (per condition label); ``agreement``
    reads ``predictor_errors`` (None: the registered prediction, which expects none)."""
    kind, left = criterion["kind"], criterion["condition"]
    if kind == "agreement":
        if predictor_errors is None:
            return True, "no predictor error"
        errors = predictor_errors[left]
        return errors == 0, f"{errors} predictor error(s)"
    value = getattr(counts[left], criterion["quantity"])
    if kind == "fewer":
        other = getattr(counts[criterion["versus"]], criterion["quantity"])
        return value < other, f"{value} vs {other}"
    if kind == "zero":
        return value == 0, f"{value}"
    if kind == "positive":
        return value > 0, f"{value}"
    raise StageError(f"fleet criterion {criterion['name']}: unknown kind {kind!r}")


def decide(
    criteria: Iterable[Mapping[str, Any]],
    predicted: Mapping[str, FleetCounts],
    observed: Mapping[str, FleetCounts],
    predictor_errors: Mapping[str, int],
) -> list[FleetDecision]:
    """Every criterion decided on the observed counts, beside its registered prediction."""
    missing = sorted(set(predicted) - set(observed))
    if missing:
        raise StageError(f"fleet decisions: no observed counts for {', '.join(missing)}")
    out = []
    for criterion in criteria:
        expected, expected_why = evaluate(criterion, predicted)
        holds, why = evaluate(criterion, observed, predictor_errors)
        out.append(
            FleetDecision(
                criterion["name"],
                criterion["statement"],
                expected,
                holds,
                HOLDS if holds else FAILS,
                expected == holds,
                f"observed {why}; predicted {expected_why}",
            )
        )
    return out


@dataclass(frozen=True)
class ComparedRun:
    """One run's comparison (``rearrival compare`` on a fleet run) as the decisions read
    it: the per-request table and the summary."""

    requests: Any  # pandas.DataFrame, the comparison's requests.parquet
    summary: Mapping[str, Any]


def condition_row(
    rep: int,
    label: str,
    registered_prediction: Mapping[str, Any],
    rerun: FleetCounts,
    observed: FleetCounts,
) -> dict[str, Any]:
    """One row per condition: the three sides' counts, prefixed."""
    row: dict[str, Any] = {
        "replicate": rep,
        "condition": label,
        "policy": registered_prediction["policy"],
        "configuration": registered_prediction["configuration"],
        "router_model": registered_prediction["router_model"],
    }
    for side, counts in (
        ("registered", FleetCounts.from_mapping(registered_prediction["counts"])),
        ("rerun", rerun),
        ("observed", observed),
    ):
        for key, value in counts.as_dict().items():
            row[f"{key}_{side}"] = json.dumps(value) if isinstance(value, dict) else value
    return row


def registered_order(design: Mapping[str, Any]) -> list[tuple[int, str]]:
    """(replicate, condition label) of every run the registered design holds, in its
    order: replicate by replicate, the conditions as the study definition lists them."""
    try:
        labels = [str(c["label"]) for c in design["conditions"]]
        return [(rep, label) for rep in range(int(design["replicates"])) for label in labels]
    except (KeyError, TypeError, ValueError) as exc:
        raise StageError(f"registered fleet design: no conditions or replicates ({exc})") from exc


def decision_tables(
    criteria: Sequence[Mapping[str, Any]],
    predictions: Mapping[str, Any],
    order: Sequence[tuple[int, str]],
    compared: Mapping[str, ComparedRun],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every registered criterion decided per replicate on the observed counts of the
    runs' comparisons (keyed ``r<rep>/<label>``), and one row per condition (the
    registered prediction, the re-run on the observed placement, the observation), in the
    registered ``order``: the decision stage's two tables, which the audit recomputes from
    the sealed records (``rearrival.prereg.audit.fleet_decisions``)."""
    keys = [f"r{rep}/{label}" for rep, label in order]
    missing = sorted({k for k in keys if k not in predictions or k not in compared})
    if missing:
        raise StageError(f"fleet decisions: no prediction or comparison of {', '.join(missing)}")
    decisions, rows = [], []
    for rep in dict.fromkeys(rep for rep, _ in order):
        predicted, observed, errors = {}, {}, {}
        for label in (label for r, label in order if r == rep):
            key = f"r{rep}/{label}"
            run = compared[key]
            predicted[label] = FleetCounts.from_mapping(predictions[key]["counts"])
            observed[label] = FleetCounts.of(observed_rows(run.requests))
            errors[label] = len(run.summary["predictor_errors"])
            rerun = FleetCounts.of(observed_rows(run.requests, "predicted"))
            rows.append(
                condition_row(rep, label, predictions[key], rerun, observed[label])
                | {
                    "agreeing": run.summary["agreeing"],
                    "timing_dependent": run.summary["timing_dependent"],
                    "predictor_errors": errors[label],
                }
            )
        decisions += [
            {"replicate": rep} | asdict(d) for d in decide(criteria, predicted, observed, errors)
        ]
    return decisions, rows


def table_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """A decision stage table as its CSV file holds it (the stage writes it, the audit
    compares its recomputation with it)."""
    import pandas as pd

    return pd.DataFrame(list(rows)).to_csv(index=False)
