"""The fixed-arrival simulator of Table XI (paper Section IV): computed after measurement,
never preregistered.

The full simulator recomputes every re-arrival time from the completion times of the
configuration it simulates (the feedback path of Section III-D). The fixed-arrival
variant instead pins each session's re-arrival at the send time observed in the
BASELINE run of the same replicate (``SimConfig.fixed_arrivals``; as in the authors'
simulator, the pinned time is the arrival and the waiting queue is kept in (arrival,
session, round) order, see ``rearrival.model.simulator.rbln.sim``). Every configuration of
the study is simulated with those pinned times, so a ratio of two rows compares like
with like; the report sums them over replicates, like every ratio in the paper.

The fixed-arrivals stage (rules/fixed_arrivals.smk) writes one row per baseline run and
configuration; the report only reads them (``rearrival.report.analysis``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from rearrival.config.study import Study
from rearrival.errors import RearrivalError
from rearrival.measure.records import read_run
from rearrival.measure.records.contract import ROUND_COLUMN
from rearrival.model.configuration import Configuration, configuration_from_mapping
from rearrival.model.cost.profile import Profile
from rearrival.model.plans.plan import Plan
from rearrival.model.simulator.rbln.sim import SimConfig, simulate

COLUMNS = ("study", "n", "replicate", "variant", "configuration", "arrivals_from", "device_s")


class FixedArrivalError(RearrivalError):
    """A run record or plan the fixed-arrival simulator cannot use; names file and fix."""


def observed_rearrivals(requests: pd.DataFrame, sessions: int, where: str) -> list[float]:
    """Per session (index order), the observed send time of its re-arrival (turn 1)."""
    followups = requests[requests[ROUND_COLUMN] == 1].set_index("session")["send_s"]
    missing = [s for s in range(sessions) if s not in followups.index]
    if missing:
        raise FixedArrivalError(
            f"{where}: requests.parquet has no re-arrival (turn 1) for "
            f"session {missing[0]}; the baseline run is incomplete, re-run it"
        )
    return [float(followups.loc[s]) for s in range(sessions)]


def fixed_arrival_device_s(
    plan: Plan,
    configuration: Configuration,
    variant: str,
    arrivals: Sequence[float],
    profile: Profile | None = None,
) -> float:
    """Predicted device time D of one plan with re-arrivals pinned to ``arrivals``
    (base rules: deferred release, no dummy block), priced with ``profile`` (the one
    the full predictions used; None: the published constants)."""
    config = SimConfig(
        buckets=configuration.buckets,
        batch_size=configuration.batch_size,
        slots=configuration.slots,
        release="deferred",
        dummy_block="off",
        fixed_arrivals=list(arrivals),
    )
    return simulate(plan.variant(variant), config, profile).device_s


def measured_configuration(complete: pd.DataFrame, name: str) -> Configuration | None:
    """A configuration as its runs recorded it (each manifest names and describes it)."""
    for run_dir in complete.loc[complete["configuration"] == name, "run_dir"]:
        raw = json.loads((Path(run_dir) / "manifest.json").read_text())["configuration"]
        return configuration_from_mapping(raw, name=name)
    return None


def fixed_arrival_frame(
    study: Study,
    channels: pd.DataFrame,
    plan_for: Callable[[int, int], Plan],
    profile: Profile | None = None,
) -> pd.DataFrame:
    """D_fixed of every configuration the runs measured, on the plan of every complete
    baseline run, with re-arrivals pinned at that run's observed send times."""
    complete = channels[channels["status"] == "complete"] if "status" in channels else channels
    configurations = {
        name: conf
        for name in study.configurations
        if (conf := measured_configuration(complete, name)) is not None
    }
    baseline_runs = complete[complete["configuration"] == study.baseline].sort_values(
        ["n", "variant", "replicate", "run_id"]
    )
    rows = []
    for run in baseline_runs.to_dict("records"):
        n, replicate = int(run["n"]), int(run["replicate"])
        plan = plan_for(n, replicate)
        requests = read_run(Path(run["run_dir"])).requests
        arrivals = observed_rearrivals(requests, plan.n, f"baseline run {run['run_id']}")
        for name, conf in configurations.items():
            rows.append(
                {
                    "study": study.name,
                    "n": n,
                    "replicate": replicate,
                    "variant": run["variant"],
                    "configuration": name,
                    "arrivals_from": run["run_id"],
                    "device_s": fixed_arrival_device_s(
                        plan, conf, run["variant"], arrivals, profile
                    ),
                }
            )
    return pd.DataFrame(rows, columns=list(COLUMNS))
