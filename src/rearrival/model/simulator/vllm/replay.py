"""The predictor's engine replaying an observed vLLM run step by step (docs/DESIGN.md §15,
"Calibration"): where the context C of every logged step comes from.

vLLM's iteration log gives each step's context and generation requests and tokens but not
C, the tokens its requests had computed before it (rule 7), and its timestamps (1 s) are
far too coarse to place a run's arrivals on step boundaries. What the log does say is how
many requests each step admitted: a step's context requests are the running requests
still in their prefill plus the new admissions. So the replay runs our engine (the rules
the oracle holds to vLLM's own scheduler) *driven*: every request joins the waiting queue
at exactly the step where the log shows it admitted, in the order the client sent them,
and every step's four counts must equal the logged ones. Requests sent close together may
reach the engine in either order, so an admission may take any of the sent requests
whose previous round has finished (``SPARE_CANDIDATES`` more than it admits), whichever
makes the step match (send order first). A run the rules do not reproduce step for step
is refused with the first step that differs; one they do gives vLLM's own D, P and C per
step and every request's prefix hit (which the caller checks against the reported
cached tokens).
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rearrival.errors import RearrivalError
from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.vllm_profile import VllmStepCost
from rearrival.model.simulator.vllm.engine import Engine, StepCounts
from rearrival.model.simulator.vllm.inputs import check_pool, vllm_inputs

# The replay's clock counts steps; the logged elapsed times are the caller's samples.
UNIT_STEP = VllmStepCost(1.0, 0.0, 0.0, 0.0)
# How many more sent-but-unadmitted requests than it admits an admission may choose from:
# sends within a few milliseconds of each other (one tool gap ending as another round
# finishes) reach the engine in either order, sends further apart in the order made.
SPARE_CANDIDATES = 3


class ReplayMismatch(RearrivalError, ValueError):
    """An observed run the vLLM rules do not reproduce step for step; names the step."""


@dataclass(frozen=True)
class Replay:
    """A run reproduced: one ``StepCounts`` per logged step, and per request (in
    (session, round) order) its prefix hit at first admission, its preemptions, and the
    steps it spans: from the first that computed any of its tokens to the one that
    sampled its last (indices into ``steps``)."""

    steps: tuple[StepCounts, ...]
    cached_tokens: tuple[int, ...]
    preemptions: tuple[int, ...]
    first_step: tuple[int, ...]
    last_step: tuple[int, ...]


def _copy(engine: Engine) -> Engine:
    """An independent engine state; the immutable inputs are shared."""
    shared = (engine.inputs, engine.configuration, engine.cost)
    return copy.deepcopy(engine, {id(x): x for x in shared})


def _stepped(engine: Engine) -> StepCounts | None:
    """One step of ``engine`` in place, or None when it schedules nothing (our rules
    would stall where vLLM ran a step)."""
    if not (engine.running or engine.waiting):
        return None
    try:
        return engine.step()
    except AssertionError:  # nothing schedulable
        return None


def _try(engine: Engine, admit: Sequence[int]) -> tuple[Engine, StepCounts | None]:
    """A copy of the engine after one step with ``admit`` queued first."""
    trial = _copy(engine)
    for rid in admit:
        trial.queue(rid)
    return trial, _stepped(trial)


def _available(engine: Engine, waiting: list[int], admitted: int) -> list[int]:
    """The sent, unadmitted requests an admission of ``admitted`` requests chooses from:
    the first ``admitted + SPARE_CANDIDATES`` that could be admitted now (a session's later
    round only once the round before it has finished)."""
    rounds = engine.inputs.arrays.round_of
    ready = [
        rid
        for rid in waiting
        if rounds[rid] == 0 or not math.isnan(engine.requests[rid - 1].finish_s)
    ]
    return ready[: admitted + SPARE_CANDIDATES]


def _describe(counts: Sequence[int]) -> str:
    names = ("context requests", "context tokens", "generation requests", "generation tokens")
    return ", ".join(f"{c} {name}" for c, name in zip(counts, names, strict=True))


def _step(
    engine: Engine, waiting: list[int], logged: tuple[int, int, int, int], index: int, source: str
) -> tuple[Engine, StepCounts]:
    """Step ``index``: admit as many requests as the log shows, chosen as the module
    docstring says, and check the step's counts against the logged ones."""
    if not logged[0]:  # no admission: nothing to choose, step in place
        counts = _stepped(engine)
        if counts is not None and counts.logged() == logged:
            return engine, counts
        raise _mismatch(source, index, logged, counts)
    running = _try(engine, ())[1]
    admitted = logged[0] - (running.context_requests if running is not None else 0)
    candidates = _available(engine, waiting, admitted)
    if not 0 <= admitted <= len(candidates):
        raise _mismatch(
            source, index, logged, f"{admitted} admissions, {len(candidates)} requests sent"
        )
    first: StepCounts | str | None = "no admission tried"
    for admit in itertools.combinations(candidates, admitted):
        trial, counts = _try(engine, admit)
        queued = {r.rid for r in trial.waiting}  # a preempted request may wait, not these
        if counts is not None and counts.logged() == logged and queued.isdisjoint(admit):
            for rid in admit:
                waiting.remove(rid)
            return trial, counts
        first = counts if first == "no admission tried" else first
    raise _mismatch(source, index, logged, first)


def _mismatch(
    source: str, index: int, logged: Sequence[int], got: StepCounts | str | None
) -> ReplayMismatch:
    if isinstance(got, StepCounts):
        got = _describe(got.logged())
    elif got is None:
        got = "nothing scheduled"
    return ReplayMismatch(
        f"{source}: logged iteration {index} ({_describe(logged)}) is not what the vLLM "
        f"rules of docs/DESIGN.md §15 give with the run's admissions ({got}); the context "
        "each step read cannot be reconstructed, so the run cannot be used for "
        "calibration: check that the server ran the configuration's knobs, prefix caching "
        "on and the V1 model runner, and re-run it"
    )


def replay_iterations(
    plan: Any,
    configuration: VllmConfiguration,
    send_order: Sequence[tuple[int, int]],
    logged: Sequence[tuple[int, int, int, int]],
    source: str = "run",
) -> Replay:
    """Reproduce an observed run on our rules (module docstring).

    ``plan`` is the plan as run (its variant), ``send_order`` every (session, round) in
    the order the client sent them, ``logged`` every iteration's (context requests,
    context tokens, generation requests, generation tokens). Raises
    :class:`ReplayMismatch` naming the first step our rules do not reproduce, or a log
    that ends before every request finished.
    """
    inputs = vllm_inputs(plan, configuration.block_size)
    check_pool(inputs, configuration, source)
    a = inputs.arrays
    rid_of = {(a.session_of[rid], a.round_of[rid]): rid for rid in range(a.requests)}
    waiting = [rid_of[(int(s), int(k))] for s, k in send_order]
    if sorted(waiting) != list(range(a.requests)):
        raise ReplayMismatch(
            f"{source}: the send order names {len(waiting)} requests, the plan has "
            f"{a.requests}; give every (session, round) once"
        )
    engine = Engine(inputs, configuration, UNIT_STEP, None, driven=True)
    steps = []
    for index, row in enumerate(logged):
        engine, step = _step(engine, waiting, tuple(int(c) for c in row), index, source)
        steps.append(step)
    if waiting or engine.running or engine.waiting:
        raise ReplayMismatch(
            f"{source}: the log ends after {len(steps)} iterations with "
            f"{len(waiting) + len(engine.running) + len(engine.waiting)} requests unfinished "
            "by the vLLM rules; the log does not cover the run"
        )
    done = engine.requests  # the unit clock: a time is the number of steps before it
    return Replay(
        tuple(steps),
        tuple(r.cached_tokens for r in done),
        tuple(r.preemptions for r in done),
        tuple(int(r.first_scheduled_s) for r in done),
        tuple(int(r.finish_s) - 1 for r in done),
    )
