"""A vLLM calibration run back into per-step samples (docs/DESIGN.md §15, "Calibration").

Each logged iteration is one sample: its elapsed time (vLLM's own, from scheduling to the
sampled tokens) and the regressors of rule 7, all from the run itself. D and P are the
logged generation and context tokens (D padded to the capture sizes where they exist);
C, which the log does not hold, comes from replaying the run on our rules
(``rearrival.model.simulator.vllm.replay``), accepted only when the replay reproduces
every logged step's four counts, every request's reported prefix hit, and the server's
preemption count. A run that fails any of these is refused, never fitted.
"""

from __future__ import annotations

import pandas as pd

from rearrival.measure.calibration.design import CalibrationError
from rearrival.measure.records import RunRecord
from rearrival.measure.records.contract import ROUND_COLUMN
from rearrival.measure.vllm.iterations import PREEMPTIONS_COUNTER
from rearrival.model.configuration import VllmConfiguration
from rearrival.model.plans.plan import Plan
from rearrival.model.simulator.vllm.replay import Replay, ReplayMismatch, replay_iterations

LOGGED = ("context_requests", "context_tokens", "generation_requests", "generation_tokens")
SAMPLE_COLUMNS = (
    "run_id",
    "step",
    *LOGGED,
    "decode_padded",
    "context_read",
    "elapsed_s",
    "warmup",
    "segments",
)


def replay_run(record: RunRecord, plan: Plan, configuration: VllmConfiguration) -> Replay:
    """The run reproduced on our rules, checked against everything the run reported."""
    if LOGGED[0] not in record.steps.columns:
        raise CalibrationError(
            f"{record.path}: its steps are not vLLM iteration lines (backend "
            f"{record.manifest.get('backend')}); a vLLM calibration reads runs of backend vllm"
        )
    requests = record.requests
    sent = requests.sort_values(["send_s", "session", ROUND_COLUMN])
    order = list(zip(sent["session"].astype(int), sent[ROUND_COLUMN].astype(int), strict=True))
    logged = record.steps[list(LOGGED)].astype("int64").to_numpy().tolist()
    try:
        replay = replay_iterations(plan, configuration, order, logged, str(record.path))
    except ReplayMismatch as exc:
        raise CalibrationError(str(exc)) from None
    reported = requests.sort_values(["session", ROUND_COLUMN])
    for (session, k, cached), hit in zip(
        reported[["session", ROUND_COLUMN, "cached_tokens"]].itertuples(index=False),
        replay.cached_tokens,
        strict=True,
    ):
        if int(cached) != hit:
            raise CalibrationError(
                f"{record.path}: session {session} round {k} reported {int(cached)} cached "
                f"tokens, the vLLM rules give {hit} on the replayed steps; the run's context "
                "reads are not known exactly, re-run the calibration"
            )
    metrics = record.metrics
    preempted = metrics["after"].get(PREEMPTIONS_COUNTER, 0.0) - metrics["before"].get(
        PREEMPTIONS_COUNTER, 0.0
    )
    if int(preempted) != sum(replay.preemptions):
        raise CalibrationError(
            f"{record.path}: the server counted {int(preempted)} preemptions, the replay "
            f"{sum(replay.preemptions)}; re-run the calibration"
        )
    return replay


def step_segments(plan: Plan, replay: Replay) -> list[str]:
    """Per step, the calibration segments whose sessions ran in it ('' without notes)."""
    labels = (plan.meta.notes or {}).get("segments")
    active: list[set[str]] = [set() for _ in replay.steps]
    if not labels:
        return ["" for _ in replay.steps]
    rid = 0
    for session in plan.sessions:
        for _ in session.rounds:
            for index in range(replay.first_step[rid], replay.last_step[rid] + 1):
                active[index].add(str(labels[session.session]))
            rid += 1
    return ["+".join(sorted(names)) for names in active]


def step_samples(
    record: RunRecord, plan: Plan, configuration: VllmConfiguration, warmup_steps: int
) -> pd.DataFrame:
    """One row per logged step (``SAMPLE_COLUMNS``); the first ``warmup_steps`` are
    marked ``warmup`` (kept for reading, left out of the fit)."""
    replay = replay_run(record, plan, configuration)
    steps = record.steps
    decode = [s.generation_tokens for s in replay.steps]
    frame = pd.DataFrame(
        {
            "run_id": record.run_id,
            "step": steps["iteration"].astype("int64").to_numpy(),
            **{name: steps[name].astype("int64").to_numpy() for name in LOGGED},
            "decode_padded": [configuration.padded(d) if d else 0 for d in decode],
            "context_read": [s.context_read for s in replay.steps],
            "elapsed_s": steps["elapsed_s"].astype("float64").to_numpy(),
            "warmup": [index < warmup_steps for index in range(len(replay.steps))],
            "segments": step_segments(plan, replay),
        }
    )
    return frame[list(SAMPLE_COLUMNS)]
