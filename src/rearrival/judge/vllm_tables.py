"""What a vLLM study's report section shows (docs/DESIGN.md §15): its runs on real vLLM
servers beside the predictions of the ``vllm`` rule set, as three tables the report reads
(it computes nothing itself).

- ``requests``: one row per request of every complete run: the cached tokens vLLM
  reported, the registered prediction's (planned arrivals), the predictor's re-run with
  the run's own re-arrival send times (``fixed``: the scheduler rules alone, the arrival
  clock taken as observed) and what a pool that never evicts would have held
  (``cacheable``);
- ``runs``: one row per run: how many requests agree with each prediction, the cached
  tokens against vLLM's own ``vllm:prompt_tokens_cached_total`` delta, device time
  predicted (registered and fixed) vs channel A (the profile's step costs on the logged
  steps) vs the logged iteration times, and the prefill recomputed because tool waits
  let blocks be evicted, observed and predicted;
- ``rounds``: reuse by round and configuration, observed and predicted, summed over runs.

Recomputed prefill is measured against the same request on a pool that never evicts:
``cacheable - cached`` summed over re-arrivals (``VllmInputs.cacheable_tokens``, the rule
the simulator's summary uses), so observed and predicted figures read alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from rearrival.measure.records import RunRecord
from rearrival.measure.records.contract import ROUND_COLUMN
from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.vllm_profile import VllmStepCost
from rearrival.model.plans.plan import Plan
from rearrival.model.simulator.vllm.sim import simulate_vllm

CACHED_COUNTER = "vllm:prompt_tokens_cached_total"
RUN_KEYS = ("study", "n", "replicate", "configuration", "variant")


def observed_re_arrivals(requests: pd.DataFrame) -> list[float]:
    """The run's re-arrival send times in (session, round) order: the fixed arrivals the
    predictor is re-run with."""
    later = requests[requests[ROUND_COLUMN] >= 1].sort_values(["session", ROUND_COLUMN])
    return [float(t) for t in later["send_s"]]


def counter_delta(record: RunRecord, name: str) -> float:
    """How far one of vLLM's own counters moved over the run (metrics.json)."""
    metrics = record.metrics
    return float(metrics["after"].get(name, 0.0)) - float(metrics["before"].get(name, 0.0))


def request_rows(
    record: RunRecord,
    plan: Plan,
    configuration: VllmConfiguration,
    step_cost: VllmStepCost,
    registered: pd.DataFrame,
) -> tuple[list[dict[str, Any]], float]:
    """Per-request rows of one run and the fixed-arrival prediction's device seconds;
    ``registered`` is the registered prediction's request rows for this run's condition."""
    manifest = record.manifest
    observed = record.requests.sort_values(["session", ROUND_COLUMN])
    fixed = simulate_vllm(
        plan.variant(manifest["variant"]),
        configuration,
        step_cost,
        fixed_arrivals=observed_re_arrivals(observed),
    )
    predicted = {
        (int(r.session), int(r.round)): int(r.cached_tokens) for r in registered.itertuples()
    }
    rows = []
    for rid, (mine, seen) in enumerate(zip(fixed.requests, observed.itertuples(), strict=True)):
        key = (int(seen.session), int(getattr(seen, ROUND_COLUMN)))
        rows.append(
            {
                "run_id": manifest["run_id"],
                **{k: manifest[k] for k in ("study", "n", "replicate", "variant")},
                "configuration": manifest["configuration"]["name"],
                "session": key[0],
                "round": key[1],
                "prompt_tokens": int(seen.prompt_tokens),
                "cached_observed": int(seen.cached_tokens),
                "cached_registered": predicted[key],
                "cached_fixed": mine.cached_tokens,
                "cacheable": fixed.cacheable_tokens(rid) if key[1] else 0,
            }
        )
    return rows, fixed.device_s


def run_row(
    requests: pd.DataFrame,
    record: RunRecord,
    channel: pd.Series,
    registered: pd.Series,
    fixed_device_s: float,
) -> dict[str, Any]:
    """One run's agreement, cached-token check and device times (module docstring)."""
    later = requests[requests["round"] >= 1]
    lost = (later["cacheable"] - later["cached_observed"]).clip(lower=0)
    return {
        "run_id": record.manifest["run_id"],
        **{k: requests.iloc[0][k] for k in RUN_KEYS},
        "requests": len(requests),
        "re_arrivals": len(later),
        "agree_registered": int(
            (requests["cached_observed"] == requests["cached_registered"]).sum()
        ),
        "agree_fixed": int((requests["cached_observed"] == requests["cached_fixed"]).sum()),
        "cached_observed": int(requests["cached_observed"].sum()),
        "cached_metrics_delta": counter_delta(record, CACHED_COUNTER),
        "cached_registered": int(requests["cached_registered"].sum()),
        "cached_fixed": int(requests["cached_fixed"].sum()),
        "re_arrivals_lost_observed": int((lost > 0).sum()),
        "recomputed_prefill_observed": int(lost.sum()),
        "recomputed_prefill_registered": int(registered["recomputed_prefill_tokens"]),
        "device_s_registered": float(registered["device_s"]),
        "device_s_fixed": fixed_device_s,
        "channel_a_s": float(channel["a_s"]),
        "logged_elapsed_s": float(channel["a_elapsed_s"]),
        "channel_b_s": float(channel["b_s"]),
    }


def rounds_table(requests: pd.DataFrame) -> pd.DataFrame:
    """Reuse by round: re-arrivals, prompt tokens and cached tokens (observed, registered,
    fixed) per configuration and round, summed over every run."""
    return (
        requests.groupby(["configuration", "round"], sort=True)
        .agg(
            requests=("prompt_tokens", "size"),
            prompt_tokens=("prompt_tokens", "sum"),
            cached_observed=("cached_observed", "sum"),
            cached_registered=("cached_registered", "sum"),
            cached_fixed=("cached_fixed", "sum"),
            cacheable=("cacheable", "sum"),
        )
        .reset_index()
    )


def vllm_tables(
    records: Sequence[RunRecord],
    plan_for: Callable[[int, int], Plan],
    configurations: dict[str, VllmConfiguration],
    step_cost: VllmStepCost,
    predictions: pd.DataFrame,
    predicted_requests: pd.DataFrame,
    channels: pd.DataFrame,
) -> dict[str, pd.DataFrame]:
    """The three tables of a vLLM study's complete runs (module docstring)."""
    request_frames, runs = [], []
    for record in records:
        m = record.manifest
        name = m["configuration"]["name"]
        key = {"n": m["n"], "replicate": m["replicate"], "configuration": name}
        match = (predicted_requests[list(key)] == pd.Series(key)).all(axis=1)
        rows, fixed_s = request_rows(
            record,
            plan_for(m["n"], m["replicate"]),
            configurations[name],
            step_cost,
            predicted_requests[match & (predicted_requests["variant"] == m["variant"])],
        )
        frame = pd.DataFrame(rows)
        request_frames.append(frame)
        summary = predictions[
            (predictions[list(key)] == pd.Series(key)).all(axis=1)
            & (predictions["variant"] == m["variant"])
        ].iloc[0]
        channel = channels[channels["run_id"] == m["run_id"]].iloc[0]
        runs.append(run_row(frame, record, channel, summary, fixed_s))
    requests = pd.concat(request_frames, ignore_index=True)
    return {
        "requests": requests,
        "runs": pd.DataFrame(runs),
        "rounds": rounds_table(requests),
    }
