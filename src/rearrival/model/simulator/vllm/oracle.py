"""vLLM's own scheduler as the oracle of the ``vllm`` rule set (docs/DESIGN.md §15).

vLLM cannot share the project's environment (its dependencies pin another numpy), so
``oracle_driver`` runs as a script under the vLLM environment's python
(``rearrival.vllm_env.vllm_python``). This module
writes the cases, runs the driver once for a whole batch (vLLM's import takes longer than
hundreds of cases) and compares its answers with the predictor's: integers exactly,
times within 1e-9 relative. ``case`` is one engine; ``fleet_case`` is R copies of it
behind a router, with the plan's shared prefixes and renewal links (docs/DESIGN.md §16), and
``fleet_differences`` holds a predictor fleet to it request by request.
"""

from __future__ import annotations

import json
import math
import subprocess
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from rearrival.errors import RearrivalError
from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.vllm_profile import VllmStepCost
from rearrival.model.simulator.vllm.result import VllmResult
from rearrival.vllm_env import VllmEnvironmentError, require_vllm_python, vllm_python

DRIVER = Path(__file__).with_name("oracle_driver.py")
MODEL = "models/tiny-qwen3"  # the shipped config the driver builds vLLM's ModelConfig from
TIME_TOLERANCE = 1e-9
INTEGER_FIELDS = ("cached_tokens", "preemptions", "steps")
TIME_FIELDS = ("arrival_s", "first_scheduled_s", "finish_s")
FLEET_INTEGER_FIELDS = ("replica", "cached_tokens", "preemptions")
FLEET_TIME_FIELDS = ("arrival_s", "first_scheduled_s", "first_token_s", "finish_s")
TOTAL_INTEGERS = ("steps", "decode_tokens", "prefill_tokens", "cached_tokens", "preemptions")
TOTAL_TIMES = ("device_s", "makespan_s")


class OracleError(RearrivalError):
    """The vLLM environment is missing or its driver failed; the message says which."""


def available() -> bool:
    return vllm_python().is_file()


def case(
    case_id: str,
    plan: Any,
    configuration: VllmConfiguration,
    step_cost: VllmStepCost,
    fixed_arrivals: Sequence[float] | None = None,
) -> dict[str, Any]:
    """One case for the driver: the plan's rounds, the knobs and the step cost."""
    return {
        "id": case_id,
        "block_size": configuration.block_size,
        "num_blocks": configuration.num_blocks,
        "max_num_seqs": configuration.batch_size,
        "max_num_batched_tokens": configuration.max_num_batched_tokens,
        "capture_sizes": list(configuration.buckets),
        "step_cost": list(step_cost.as_tuple()),
        "sessions": [_session(s) for s in plan.sessions],
        "fixed_arrivals": None if fixed_arrivals is None else [float(t) for t in fixed_arrivals],
    }


def fleet_case(
    case_id: str,
    plan: Any,
    configuration: VllmConfiguration,
    step_cost: VllmStepCost,
    replicas: int,
    router: str,
) -> dict[str, Any]:
    """One fleet case (docs/DESIGN.md §16): the plan's sessions with their shared
    prefixes and renewal links, on ``replicas`` copies of the engine behind ``router``."""
    return case(case_id, plan, configuration, step_cost) | {
        "replicas": int(replicas),
        "router": str(router),
    }


def _session(s: Any) -> dict[str, Any]:
    """A plan session as the driver reads it: rounds, and ``start_s`` or ``after`` (a
    renewed session's leader and gap); ``prefix`` and ``prefix_tokens`` when it names a
    shared prefix. A session without either keeps the single engine's case bytes."""
    row: dict[str, Any] = {}
    after = getattr(s, "after", None)
    if after is None:
        row["start_s"] = float(s.start_s)
    else:
        row["after"] = [int(after.session), float(after.gap_s)]
    if getattr(s, "prefix", None) is not None:
        row["prefix"] = s.prefix
        row["prefix_tokens"] = int(s.prefix_tokens)
    row["rounds"] = [[r.new_tokens, r.gen_tokens, float(r.gap_after_s)] for r in s.rounds]
    return row


def run_oracle(cases: list[dict[str, Any]], timeout_s: float = 3600.0) -> dict[str, Any]:
    """Drive vLLM's scheduler on every case in one driver process; returns the driver's
    document (``results`` in case order, each with ``requests``, ``totals``, ``setup_s``
    and ``run_s``)."""
    try:
        python = require_vllm_python()
    except VllmEnvironmentError as exc:
        raise OracleError(str(exc)) from None
    model_dir = resources.files("rearrival.data").joinpath(MODEL)
    batch = {"model_dir": str(model_dir), "cases": cases}
    done = subprocess.run(
        [str(python), str(DRIVER)],
        input=json.dumps(batch),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-5:]
        raise OracleError(f"the vLLM oracle driver failed ({python}): " + " | ".join(tail))
    return json.loads(done.stdout)


def _close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or abs(a - b) <= TIME_TOLERANCE * max(abs(a), abs(b))


def differences(result: VllmResult, answer: dict[str, Any]) -> list[str]:
    """Where the predictor and vLLM's scheduler disagree on one case (empty: they agree
    on every per-request integer exactly and every time within 1e-9 relative)."""
    found = []
    rows = answer["requests"]
    records = result.requests
    if len(rows) != len(records):
        return [f"{len(records)} requests predicted, {len(rows)} from vLLM"]
    for record, row in zip(records, rows, strict=True):
        where = f"session {record.session} round {record.round}"
        for name in INTEGER_FIELDS:
            if getattr(record, name) != row[name]:
                found.append(f"{where}: {name} {getattr(record, name)} != vLLM {row[name]}")
        for name in TIME_FIELDS:
            if not _close(getattr(record, name), row[name]):
                found.append(f"{where}: {name} {getattr(record, name)!r} != vLLM {row[name]!r}")
    summary = result.summary()
    totals = answer["totals"]
    for name in TOTAL_INTEGERS:
        if summary[name] != totals[name]:
            found.append(f"total {name} {summary[name]} != vLLM {totals[name]}")
    for name in TOTAL_TIMES:
        if not _close(summary[name], totals[name]):
            found.append(f"total {name} {summary[name]!r} != vLLM {totals[name]!r}")
    return found


def fleet_differences(result: Any, answer: dict[str, Any]) -> list[str]:
    """Where a predictor fleet run and R copies of vLLM's scheduler disagree on one case
    (docs/DESIGN.md §16): per (session, round) the replica, the prefix hit
    and the preemptions exactly, the arrival, first-scheduled, first-token and finish times
    within 1e-9 relative. ``result.requests`` rows carry those fields by name, in any
    order."""
    rows = {(row["session"], row["round"]): row for row in answer["requests"]}
    records = {(r.session, r.round): r for r in result.requests}
    if rows.keys() != records.keys():
        missing = sorted(rows.keys() - records.keys())[:3]
        extra = sorted(records.keys() - rows.keys())[:3]
        return [
            f"{len(records)} requests predicted, {len(rows)} from vLLM "
            f"(missing {missing}, not in the plan {extra})"
        ]
    found = []
    for key in sorted(rows):
        record, row = records[key], rows[key]
        where = f"session {key[0]} round {key[1]}"
        for name in FLEET_INTEGER_FIELDS:
            if getattr(record, name) != row[name]:
                found.append(f"{where}: {name} {getattr(record, name)} != vLLM {row[name]}")
        for name in FLEET_TIME_FIELDS:
            if not _close(getattr(record, name), row[name]):
                found.append(f"{where}: {name} {getattr(record, name)!r} != vLLM {row[name]!r}")
    return found
