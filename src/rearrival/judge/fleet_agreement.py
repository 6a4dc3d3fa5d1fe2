"""The fleet predictor against a real fleet, per run (README "A study on a real fleet").

For one complete, sealed fleet run (vLLM servers behind vllm-router,
``rearrival.measure.fleet``), the fleet is re-run in the predictor with the run's observed
arrivals (each session's first round when the run sent it, every later round as a fixed
arrival, as ``rearrival.judge.vllm_agreement`` does for one server) and its observed
placement (``routers.observed``: every request on the replica that served it), replica by
replica the ``vllm`` rule set priced by the vLLM profile.

Per request, cached tokens are set beside what vLLM reported. Where the request's own
replica had, in the prediction, evicted no cached block before admitting it, its hit is
what that replica's pool held of its prefix whatever the timing: it must agree, and a
disagreement is a predictor error (``PredictorBugWarning``). Where that pool had evicted,
or where the run's records show requests on that replica admitted or finished on the
other side of its admission or tool wait than in the prediction (on a loaded machine the
real pool can be fuller than the predicted one and evict where it did not), which blocks
survived follows real step times the profile only approximates; such a disagreement is
recorded as timing-dependent, with the reason. Time to
first token (first token minus send) is reported predicted against observed, never
judged: a loaded machine blurs it.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rearrival.atomic import atomic_directory, atomic_write_json
from rearrival.judge.vllm_agreement import (
    AgreementError,
    PredictorBugWarning,
    Timeline,
    _WatchedPool,
    check_plan,
    check_profile,
    observed_rearrivals,
    observed_starts,
    order_differences,
    run_configuration,
)
from rearrival.measure.records import RunRecord
from rearrival.measure.records.contract import ROUND_COLUMN
from rearrival.model.cost.vllm_profile import VllmProfile
from rearrival.model.fleet.routers.observed import Observed
from rearrival.model.fleet.simulate import FleetResult, fleet_result
from rearrival.model.plans.plan import Plan
from rearrival.model.substrates import substrate_of
from rearrival.parquet import write_frame

REQUESTS_FILE = "requests.parquet"
SUMMARY_FILE = "summary.json"
AGREE, TIMING, PREDICTOR_ERROR = "agree", "timing-dependent", "predictor error"


@dataclass(frozen=True)
class FleetRequestAgreement:
    """One request of a fleet run beside its prediction on the observed placement."""

    session: int
    round: int
    replica: int
    prompt_tokens: int
    cached_tokens_observed: int
    cached_tokens_predicted: int
    cacheable_tokens: int  # its hit on a pool that never evicts (the round before's blocks)
    evictions_before: int  # cached blocks its replica's predicted pool evicted before it
    verdict: str  # AGREE, TIMING or PREDICTOR_ERROR
    reason: str  # why a disagreement is timing-dependent ("" where it agrees or is an error)
    send_s: float
    ttft_s_observed: float
    ttft_s_predicted: float


@dataclass(frozen=True)
class FleetAgreement:
    requests: tuple[FleetRequestAgreement, ...]
    run: dict[str, Any]

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame([asdict(r) for r in self.requests])

    def summary(self) -> dict[str, Any]:
        """Counts a loaded machine cannot blur, then first-token times (exploratory)."""
        rows = self.requests
        later = [r for r in rows if r.round > 0]

        def lost(r: FleetRequestAgreement, cached: int) -> bool:
            return r.round > 0 and cached < r.cacheable_tokens

        observed_ttft = [r.ttft_s_observed for r in rows]
        predicted_ttft = [r.ttft_s_predicted for r in rows]
        return {
            "run": self.run,
            "requests": len(rows),
            "agreeing": sum(r.verdict == AGREE for r in rows),
            "timing_dependent": sum(r.verdict == TIMING for r in rows),
            "predictor_errors": [
                f"s{r.session}r{r.round}" for r in rows if r.verdict == PREDICTOR_ERROR
            ],
            "cached_tokens_per_request_observed": _mean([r.cached_tokens_observed for r in rows]),
            "cached_tokens_per_request_predicted": _mean([r.cached_tokens_predicted for r in rows]),
            "re_arrivals": len(later),
            "re_arrivals_lost_observed": sum(lost(r, r.cached_tokens_observed) for r in rows),
            "re_arrivals_lost_predicted": sum(lost(r, r.cached_tokens_predicted) for r in rows),
            "prefill_tokens_observed": sum(
                r.prompt_tokens - r.cached_tokens_observed for r in rows
            ),
            "prefill_tokens_predicted": sum(
                r.prompt_tokens - r.cached_tokens_predicted for r in rows
            ),
            "ttft_s_mean_observed": _mean(observed_ttft),
            "ttft_s_mean_predicted": _mean(predicted_ttft),
            "requests_per_replica": _per_replica(rows),
        }


def _mean(values: list[float] | list[int]) -> float:
    return float(sum(values) / len(values)) if values else math.nan


def _per_replica(rows: tuple[FleetRequestAgreement, ...]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in rows:
        counts[str(r.replica)] = counts.get(str(r.replica), 0) + 1
    return counts


def fleet_placement(record: RunRecord) -> list[int]:
    """Each request's replica, in (session, round) order; refuses a run that is not a
    fleet's (no replica column)."""
    requests = record.requests.sort_values(["session", ROUND_COLUMN])
    if "replica" not in requests.columns or "fleet" not in record.manifest:
        raise AgreementError(
            f"{record.path / 'requests.parquet'}: no replica per request, so this is not a "
            "fleet run; compare it as a single-server run"
        )
    return [int(r) for r in requests["replica"]]


def _watched(fleet: Any, num_blocks: int, before: list[int]) -> None:
    """Swap every replica's (still empty) pool for one that counts evictions, recording per
    request the count on its replica at its first admission."""
    for replica in fleet.engines:
        inner = replica.engine

        def admitted(evictions: int, inner: Any = inner) -> None:
            rid = inner.waiting[0].rid
            if before[rid] < 0:
                before[rid] = evictions

        inner.pool = _WatchedPool(num_blocks, admitted)


def compare_fleet_run(
    record: RunRecord, plan: Plan, profile: VllmProfile, source: str
) -> FleetAgreement:
    """Compare one sealed fleet run with the fleet predictor on its observed arrivals and
    placement (module docstring)."""
    configuration = run_configuration(record)
    check_profile(profile, record)
    check_plan(plan, record, source)
    placement = fleet_placement(record)
    requests = record.requests.sort_values(["session", ROUND_COLUMN]).reset_index(drop=True)
    replicas = int(record.manifest["fleet"]["replicas"])
    variant = observed_starts(plan.variant(str(record.manifest["variant"])), requests)
    fixed = observed_rearrivals(requests)
    fleet = substrate_of(configuration).fleet(
        variant, configuration, profile.step_cost, replicas, True, source
    )
    before = [-1] * len(placement)
    _watched(fleet, configuration.num_blocks, before)
    predicted = fleet_result(fleet, replicas, "observed", Observed(placement), fixed)
    if [r.replica for r in predicted.requests] != placement:
        raise AssertionError("the observed router did not place as observed: a fleet bug")
    rows = _rows(requests, predicted, before)
    bugs = [r for r in rows if r.verdict == PREDICTOR_ERROR]
    if bugs:
        warnings.warn(
            PredictorBugWarning(
                f"run {record.run_id}: {len(bugs)} request(s) disagree with vLLM where their "
                "replica's predicted pool had evicted nothing and no neighbour on it moved "
                f"across their admission or tool wait (first: s{bugs[0].session}r"
                f"{bugs[0].round} on replica {bugs[0].replica}, observed "
                f"{bugs[0].cached_tokens_observed}, predicted {bugs[0].cached_tokens_predicted}"
                " cached tokens): a bug in the vLLM rules or the measurement"
            ),
            stacklevel=2,
        )
    router = record.manifest["fleet"]["router"]
    return FleetAgreement(
        tuple(rows),
        {
            "run_id": record.run_id,
            "study": record.manifest["study"],
            "condition": record.manifest["condition"],
            "replicate": record.replicate,
            "router": router["name"],
            "router_version": router["version"],
            "policy": router["policy"],
            "replicas": replicas,
            "configuration": configuration.as_dict() | {"id": configuration.id},
            "profile": profile.identity(),
        },
    )


def _rows(
    requests: pd.DataFrame, predicted: FleetResult, before: list[int]
) -> list[FleetRequestAgreement]:
    observed = requests.to_dict("records")
    neighbours = _order_differences(observed, predicted)
    rows = []
    for rid, (obs, pred) in enumerate(zip(observed, predicted.requests, strict=True)):
        cached = int(obs["cached_tokens"])
        verdict, reason = AGREE, ""
        if cached != pred.cached_tokens:
            verdict, reason = _disagreement(before[rid], neighbours(rid))
        rows.append(
            FleetRequestAgreement(
                session=pred.session,
                round=pred.round,
                replica=pred.replica,
                prompt_tokens=int(obs["prompt_tokens"]),
                cached_tokens_observed=cached,
                cached_tokens_predicted=pred.cached_tokens,
                cacheable_tokens=predicted.prediction.cacheable_tokens(rid),
                evictions_before=before[rid],
                verdict=verdict,
                reason=reason,
                send_s=float(obs["send_s"]),
                ttft_s_observed=float(obs["first_token_s"] - obs["send_s"]),
                ttft_s_predicted=float(pred.first_token_s - pred.arrival_s),
            )
        )
    return rows


def _disagreement(evictions: int, neighbours: list[str]) -> tuple[str, str]:
    """Why a request's cached tokens may differ: its replica's predicted pool had evicted
    before admitting it, or, on its replica, requests were admitted or finished on the other
    side of its admission or tool wait in the run than in the prediction (the records'
    proof that the pool it met was another one); else a predictor error."""
    if evictions > 0:
        return TIMING, f"its replica's predicted pool had evicted {evictions} block(s) before"
    if neighbours:
        return TIMING, "on its replica, " + "; ".join(neighbours[:3])
    return PREDICTOR_ERROR, ""


def _order_differences(observed: list[dict[str, Any]], predicted: FleetResult) -> Any:
    """``rid`` -> the requests on the same replica whose order against ``rid``'s admission
    or tool wait differs between the run and the prediction (``order_differences`` of the
    single-server comparison, on that replica's requests only)."""
    labels = [f"s{r.session}r{r.round}" for r in predicted.requests]

    def of(rid: int) -> list[str]:
        replica = predicted.requests[rid].replica
        mine = [q for q, r in enumerate(predicted.requests) if r.replica == replica]
        run = Timeline(
            [(float(observed[q]["first_token_s"]),) for q in mine],
            [float(observed[q]["complete_s"]) for q in mine],
            False,
        )
        # both sides timed alike: admitted when the first token came, freed at the last
        pred = Timeline(
            [(predicted.requests[q].first_token_s,) for q in mine],
            [predicted.requests[q].finish_s for q in mine],
            False,
        )
        local = mine.index(rid)
        previous = rid - 1 if predicted.requests[rid].round else None
        before = mine.index(previous) if previous in mine else None
        return order_differences(local, before, run, pred, [labels[q] for q in mine])

    return of


def write_fleet_agreement(agreement: FleetAgreement, out_dir: Path) -> Path:
    """The comparison's directory: per-request table and summary, published together."""
    with atomic_directory(out_dir) as staging:
        write_frame(agreement.frame(), staging / REQUESTS_FILE)
        atomic_write_json(staging / SUMMARY_FILE, agreement.summary())
    return out_dir
