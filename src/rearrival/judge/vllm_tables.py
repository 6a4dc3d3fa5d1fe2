"""A vLLM study's runs beside what it registered before them (docs/DESIGN.md §15): three
tables the report section reads (it computes nothing itself). The predictor re-run with
each run's observed arrival times is ``rearrival.judge.vllm_agreement``'s, one comparison
per run beside these.

- ``requests``: one row per request of every complete run: the cached tokens vLLM
  reported, the registered prediction's (planned arrivals) and what a pool that never
  evicts would have held (``cacheable``);
- ``runs``: one row per run: the requests that agree with the registered prediction, the
  cached tokens against vLLM's own ``vllm:prompt_tokens_cached_total`` delta, device time
  registered vs channel A (the profile's step costs on the logged steps) vs the logged
  iteration times, and the prefill recomputed because tool waits let blocks be evicted,
  observed and registered;
- ``rounds``: reuse by round and configuration, observed and registered, summed over runs.

Recomputed prefill is counted against the same request on a pool that never evicts:
``cacheable - cached`` summed over re-arrivals (``VllmInputs.cacheable_tokens``, the rule
the simulator's summary uses), so observed and registered figures read alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from rearrival.measure.records import RunRecord
from rearrival.measure.records.contract import ROUND_COLUMN
from rearrival.model.configuration import VllmConfiguration
from rearrival.model.plans.plan import Plan
from rearrival.model.simulator.vllm.inputs import vllm_inputs

CACHED_COUNTER = "vllm:prompt_tokens_cached_total"
RUN_KEYS = ("study", "n", "replicate", "configuration", "variant")


def counter_delta(record: RunRecord, name: str) -> float:
    """How far one of vLLM's own counters moved over the run (metrics.json)."""
    metrics = record.metrics
    return float(metrics["after"].get(name, 0.0)) - float(metrics["before"].get(name, 0.0))


def request_rows(
    record: RunRecord, plan: Plan, block_size: int, registered: pd.DataFrame
) -> list[dict[str, Any]]:
    """Per-request rows of one run; ``registered`` is the registered prediction's request
    rows of the run's condition."""
    manifest = record.manifest
    inputs = vllm_inputs(plan.variant(manifest["variant"]), block_size)
    observed = record.requests.sort_values(["session", ROUND_COLUMN])
    predicted = registered.sort_values(["session", "round"])
    rows = []
    for rid, (seen, mine) in enumerate(
        zip(observed.itertuples(), predicted.itertuples(), strict=True)
    ):
        rows.append(
            {
                "run_id": manifest["run_id"],
                **{k: manifest[k] for k in ("study", "n", "replicate", "variant")},
                "configuration": manifest["configuration"]["name"],
                "session": int(seen.session),
                "round": int(getattr(seen, ROUND_COLUMN)),
                "prompt_tokens": int(seen.prompt_tokens),
                "cached_observed": int(seen.cached_tokens),
                "cached_registered": int(mine.cached_tokens),
                "cacheable": inputs.cacheable_tokens(rid),
            }
        )
    return rows


def run_row(
    requests: pd.DataFrame, record: RunRecord, channel: pd.Series, registered: pd.Series
) -> dict[str, Any]:
    """One run's agreement, cached-token check and device times (module docstring)."""
    later = requests[requests["round"] >= 1]
    lost = (later["cacheable"] - later["cached_observed"]).clip(lower=0)
    agree = requests["cached_observed"] == requests["cached_registered"]
    return {
        "run_id": record.manifest["run_id"],
        **{k: requests.iloc[0][k] for k in RUN_KEYS},
        "requests": len(requests),
        "re_arrivals": len(later),
        "agree_registered": int(agree.sum()),
        "cached_observed": int(requests["cached_observed"].sum()),
        "cached_metrics_delta": counter_delta(record, CACHED_COUNTER),
        "cached_registered": int(requests["cached_registered"].sum()),
        "re_arrivals_lost_observed": int((lost > 0).sum()),
        "re_arrivals_lost_registered": int(registered["re_arrivals_lost"]),
        "recomputed_prefill_observed": int(lost.sum()),
        "recomputed_prefill_registered": int(registered["recomputed_prefill_tokens"]),
        "device_s_registered": float(registered["device_s"]),
        "channel_a_s": float(channel["a_s"]),
        "logged_elapsed_s": float(channel["a_elapsed_s"]),
        "channel_b_s": float(channel["b_s"]),
    }


def rounds_table(requests: pd.DataFrame) -> pd.DataFrame:
    """Reuse by round: requests, prompt tokens and cached tokens (observed, registered,
    never-evicting) per configuration and round, summed over every run."""
    return (
        requests.groupby(["configuration", "round"], sort=True)
        .agg(
            requests=("prompt_tokens", "size"),
            prompt_tokens=("prompt_tokens", "sum"),
            cached_observed=("cached_observed", "sum"),
            cached_registered=("cached_registered", "sum"),
            cacheable=("cacheable", "sum"),
        )
        .reset_index()
    )


def _matching(frame: pd.DataFrame, manifest: dict[str, Any]) -> pd.DataFrame:
    """The rows of ``frame`` that belong to the run's plan and condition."""
    return frame[
        (frame["n"] == manifest["n"])
        & (frame["replicate"] == manifest["replicate"])
        & (frame["configuration"] == manifest["configuration"]["name"])
        & (frame["variant"] == manifest["variant"])
    ]


def vllm_tables(
    records: Sequence[RunRecord],
    plan_for: Callable[[int, int], Plan],
    configurations: dict[str, VllmConfiguration],
    predictions: pd.DataFrame,
    predicted_requests: pd.DataFrame,
    channels: pd.DataFrame,
) -> dict[str, pd.DataFrame]:
    """The three tables of a vLLM study's complete runs (module docstring)."""
    request_frames, runs = [], []
    for record in records:
        m = record.manifest
        frame = pd.DataFrame(
            request_rows(
                record,
                plan_for(m["n"], m["replicate"]),
                configurations[m["configuration"]["name"]].block_size,
                _matching(predicted_requests, m),
            )
        )
        request_frames.append(frame)
        channel = channels[channels["run_id"] == m["run_id"]].iloc[0]
        runs.append(run_row(frame, record, channel, _matching(predictions, m).iloc[0]))
    requests = pd.concat(request_frames, ignore_index=True)
    return {"requests": requests, "runs": pd.DataFrame(runs), "rounds": rounds_table(requests)}
