"""Every candidate on every input plan with the base simulator (paper V-A): the compiled
batch core over distinct runs, in this process or a pool, as one long results frame.
"""

from __future__ import annotations

import math
import multiprocessing
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from rearrival.config.search import SearchError
from rearrival.model.configuration import RblnConfiguration
from rearrival.model.cost.profile import Profile, measured_profile
from rearrival.model.plans.plan import Plan
from rearrival.model.simulator.rbln.sim import SimConfig, compiled_core, core_inputs, simulate
from rearrival.progress import progress
from rearrival.search.inputs import INPUT_SETS, PlanKey
from rearrival.search.space import plan_footprint

if TYPE_CHECKING:
    import pandas as pd

RESULT_COLUMNS = (
    "candidate",
    "inputs",
    "plan",
    "n",
    "plan_sha256",
    "device_s",
    "decode_s",
    "prefill_s",
    "reuse_hits",
    "re_arrivals",
    "computed_prefill_tokens",
)


class Outcome(NamedTuple):
    """The simulator scalars the search keeps per (candidate, plan)."""

    device_s: float
    decode_s: float
    prefill_s: float
    reuse_hits: int
    re_arrivals: int
    computed_prefill_tokens: int


class CandidateArrays:
    """The candidates as the compiled core's arrays: batch size, slots and decode step
    time t(n) = f(b(n)) + alpha + beta*n per n (``Profile.decode_step_s``, so the same bits
    ``simulate`` uses), built once per process and shared by every plan.

    Exact re-use: a plan of N sessions never runs more than N requests at once (each
    session has at most one request in the system), so the schedule reads t(n) only for
    n <= min(N, batch_size). Candidates with the same batch_size, slots and bucket map
    b(n) on 1..min(N, batch_size) replay the same simulation step for step; ``groups``
    simulates one representative of each (tests check this against direct simulation).
    With N <= 10 the 1,471 batch-16 sets collapse to far fewer runs; at N = 32-48 few do.
    """

    def __init__(self, cands: Sequence[RblnConfiguration], profile: Profile) -> None:
        self.candidates = list(cands)
        self.profile = profile
        self.count = len(cands)
        self.batches = np.array([c.batch_size for c in cands], dtype=np.int64)
        self.slots = np.array([c.slots for c in cands], dtype=np.int64)
        width = int(self.batches.max(initial=1)) + 1
        maps = np.zeros((self.count, width), dtype=np.int64)
        for i, cand in enumerate(cands):
            maps[i, : cand.batch_size + 1] = cand.bucket_map
        self.maps = maps
        step = np.zeros((width, width))  # t(n) at bucket b, n and b in 1..max batch
        for b in np.unique(maps[maps > 0]).tolist():
            for n in range(1, b + 1):
                step[n, b] = profile.decode_step_s(n, b)
        self.steps = step[np.arange(width), maps]
        self._groups: dict[int, tuple[Any, Any]] = {}

    def groups(self, n: int) -> tuple[Any, Any]:
        """(representatives, index of each candidate's representative) for plans of N=n."""
        if n not in self._groups:
            seen: dict[tuple[int, int, bytes], int] = {}
            reps: list[int] = []
            inverse = np.empty(self.count, dtype=np.int64)
            for i in range(self.count):
                batch = int(self.batches[i])
                key = (batch, int(self.slots[i]), self.maps[i, 1 : min(n, batch) + 1].tobytes())
                j = seen.get(key)
                if j is None:
                    j = seen[key] = len(reps)
                    reps.append(i)
                inverse[i] = j
            self._groups[n] = (np.array(reps, dtype=np.int64), inverse)
        return self._groups[n]


class PlanScores(NamedTuple):
    """Outcomes of every candidate on one plan, as arrays in candidate order."""

    times: Any  # float64 (candidates, 3): device_s, decode_s, prefill_s
    counts: Any  # int64 (candidates, 2): reuse_hits, computed_prefill_tokens
    re_arrivals: int
    simulations: int

    def outcome(self, index: int) -> Outcome:
        device, decode, prefill = self.times[index].tolist()
        hits, computed = self.counts[index].tolist()
        return Outcome(device, decode, prefill, hits, self.re_arrivals, computed)


def score_plan(plan: Plan, arrays: CandidateArrays) -> PlanScores:
    """Every candidate on one plan: one compiled batch call over the distinct runs, priced
    with the profile the candidates' step times came from (one profile per search)."""
    profile = arrays.profile
    core = compiled_core()
    inputs = core_inputs(plan, profile)
    reps, inverse = arrays.groups(plan.n)
    out_f = np.empty((len(reps), 5))
    out_i = np.empty((len(reps), 3), dtype=np.int64)
    if core is not None and inputs.compiled_ok:
        core.run_batch(
            inputs.ints,
            inputs.floats,
            inputs.pair_reuse,
            inputs.pair_cost,
            np.ascontiguousarray(arrays.steps[reps]),
            arrays.batches[reps],
            arrays.slots[reps],
            True,  # the base simulator: deferred release, no dummy block
            0,
            out_f,
            out_i,
        )
    else:  # the Python core, same bits (compiled_core or simulate warned)
        _python_batch(plan, arrays, reps.tolist(), profile, out_f, out_i)
    return PlanScores(
        out_f[inverse, :3], out_i[inverse, :2], plan.requests - len(plan.sessions), len(reps)
    )


def _python_batch(
    plan: Plan, arrays: CandidateArrays, reps: list[int], profile: Profile, out_f: Any, out_i: Any
) -> None:
    """``run_batch``'s outputs from ``simulate`` calls (numba missing, or token counts
    too large for the compiled core's int64 keys)."""
    for row, index in enumerate(reps):
        cand = arrays.candidates[index]
        result = simulate(plan, SimConfig.of(cand), profile, core="compiled")
        out_f[row, :3] = (result.device_s, result.decode_s, result.prefill_s)
        out_i[row, :2] = (result.reuse_hits, result.computed_prefill_tokens)


_WORKER: list[CandidateArrays] = []


def _init_worker(cands: list[RblnConfiguration], profile: Profile | None = None) -> None:
    _WORKER[:] = [CandidateArrays(cands, profile or measured_profile())]


def _score_plan(task: tuple[int, Plan]) -> tuple[int, PlanScores]:
    index, plan = task
    return index, score_plan(plan, _WORKER[0])


# Below this many simulations (distinct runs, after exact re-use) one process is faster
# than starting workers: each spawned worker imports numpy, pandas and numba and loads the
# compiled core (1-2 s on a loaded 2-core machine), while the paper's search runs its
# 45,000 simulations in about 0.2 s. The fleet-scale search (1.3 million) uses the pool.
POOL_MIN_SIMULATIONS = 250_000


def pool_workers(workers: int, plans: int, simulations: int) -> int:
    """The worker processes ``evaluate`` starts (0: it scores in this process)."""
    return workers if workers > 1 and plans > 1 and simulations >= POOL_MIN_SIMULATIONS else 0


def evaluate(
    cands: Sequence[RblnConfiguration],
    plans: Sequence[tuple[PlanKey, Plan]],
    workers: int = 1,
    profile: Profile | None = None,
) -> tuple[pd.DataFrame, int]:
    """Outcome of every candidate on every plan as a long frame, and the number of
    simulations actually run (the rest were exact re-uses, see ``CandidateArrays``)."""
    outcomes, simulations = score_plans(cands, plans, workers, profile)
    return results_frame(cands, plans, outcomes), simulations


def score_plans(
    cands: Sequence[RblnConfiguration],
    plans: Sequence[tuple[PlanKey, Plan]],
    workers: int = 1,
    profile: Profile | None = None,
) -> tuple[dict[int, PlanScores], int]:
    """Every candidate on every plan, by the plan's index in ``plans``, and the number of
    simulations run; no frame, so an advice that only ranks needs no pandas.

    One task per plan; larger N first so the slowest tasks do not finish last. ``workers``
    is a maximum: a search of fewer than ``POOL_MIN_SIMULATIONS`` runs in this process.
    Its memory is estimated first (``rearrival.search.space.Footprint``) and a search
    over the bound is refused before any table is built.
    On a terminal a bar counts the plans.
    """
    tasks = sorted(enumerate(p for _, p in plans), key=lambda t: (-t[1].n, t[0]))
    outcomes: dict[int, PlanScores] = {}
    what = f"simulating {len(cands):,} configurations"  # the candidates and the baseline
    widest = max((c.batch_size for c in cands), default=1)
    at_most = pool_workers(workers, len(tasks), len(cands) * len(tasks))  # simulations <= pairs
    plan_footprint(len(cands), widest, [p for _, p in plans], at_most).check()
    arrays = CandidateArrays(cands, profile or measured_profile())
    simulations = sum(len(arrays.groups(plan.n)[0]) for _, plan in tasks)
    if not pool_workers(workers, len(tasks), simulations):
        for index, plan in progress(tasks, len(tasks), what, "plan"):
            outcomes[index] = score_plan(plan, arrays)
    else:
        context = multiprocessing.get_context("spawn")  # no fork of pyarrow's threads
        with context.Pool(
            workers, initializer=_init_worker, initargs=(list(cands), profile)
        ) as pool:
            done = pool.imap_unordered(_score_plan, tasks)
            for index, scores in progress(done, len(tasks), what, "plan"):
                outcomes[index] = scores
    return outcomes, simulations


# The columns a ranking sums, as each plan's arrays hold them (candidate order)
SUMMED_COLUMNS: dict[str, Any] = {
    "device_s": lambda scores: scores.times[:, 0],
    "decode_s": lambda scores: scores.times[:, 1],
    "prefill_s": lambda scores: scores.times[:, 2],
    "reuse_hits": lambda scores: scores.counts[:, 0],
    "re_arrivals": lambda scores: np.full(len(scores.times), scores.re_arrivals, np.int64),
}


def _fsum_by_n(
    cands: Sequence[RblnConfiguration],
    outcomes: Mapping[int, PlanScores],
    by_n: Mapping[int, list[int]],
    column: Any,
) -> dict[str, dict[int, float]]:
    """Per candidate, per N: ``math.fsum`` of ``column`` over the plans of that N."""
    totals: dict[str, dict[int, float]] = {}
    for n, indices in sorted(by_n.items()):
        values = np.stack([column(outcomes[i]) for i in indices], axis=1).tolist()
        for cand, row in zip(cands, values, strict=True):
            totals.setdefault(cand.id, {})[n] = math.fsum(row)
    return totals


def per_n_device_s(
    cands: Sequence[RblnConfiguration],
    plans: Sequence[tuple[PlanKey, Plan]],
    outcomes: Mapping[int, PlanScores],
) -> dict[str, dict[int, float]]:
    """Per candidate, per N: the exactly rounded sum of device seconds over that N's
    plans, the numbers ``rank.per_n_totals`` gives on the results frame (``math.fsum``
    does not depend on the order it adds in), from ``score_plans``' arrays."""
    by_n: dict[int, list[int]] = {}
    for index, (key, _) in enumerate(plans):
        by_n.setdefault(key.n, []).append(index)
    return _fsum_by_n(cands, outcomes, by_n, SUMMED_COLUMNS["device_s"])


def array_totals(
    cands: Sequence[RblnConfiguration],
    plans: Sequence[tuple[PlanKey, Plan]],
    outcomes: Mapping[int, PlanScores],
) -> dict[str, dict[str, dict[str, dict[int, float]]]]:
    """``rank.Totals`` from ``score_plans``' arrays: what ``rank.frame_totals`` gives on
    the results frame of the same outcomes, with no frame built (a search in one process
    ranks from the arrays)."""
    by_inputs: dict[str, dict[int, list[int]]] = {inputs: {} for inputs in INPUT_SETS}
    for index, (key, _) in enumerate(plans):
        by_inputs[key.inputs].setdefault(key.n, []).append(index)
    return {
        inputs: {
            name: _fsum_by_n(cands, outcomes, by_n, column)
            for name, column in SUMMED_COLUMNS.items()
        }
        for inputs, by_n in by_inputs.items()
    }


def results_frame(
    cands: Sequence[RblnConfiguration],
    plans: Sequence[tuple[PlanKey, Plan]],
    outcomes: Mapping[int, PlanScores],
) -> pd.DataFrame:
    """Long frame, one row per (candidate, plan), in ``sort_results`` order.

    Built column-wise and directly in sorted order (1.7 million rows at fleet scale, where
    sorting string columns costs more than the simulations); with repeated candidate ids
    it falls back to building and sorting.
    """
    import pandas as pd

    ids = [c.id for c in cands]
    if len(set(ids)) != len(ids):
        parts = [
            pd.DataFrame(
                _columns(
                    np.array(ids, dtype=object),
                    [key],
                    [plan],
                    outcomes[index].times,
                    outcomes[index].counts,
                    [outcomes[index].re_arrivals],
                )
            )
            for index, (key, plan) in enumerate(plans)
        ]
        return sort_results(pd.concat(parts, ignore_index=True)[list(RESULT_COLUMNS)])
    by_id = sorted(range(len(ids)), key=ids.__getitem__)
    by_key = sorted(
        range(len(plans)), key=lambda i: (plans[i][0].inputs, plans[i][0].n, plans[i][0].name)
    )
    times = np.stack([outcomes[i].times[by_id] for i in by_key], axis=1)
    counts = np.stack([outcomes[i].counts[by_id] for i in by_key], axis=1)
    keys = [plans[i][0] for i in by_key]
    columns = _columns(
        np.repeat(np.array([ids[i] for i in by_id], dtype=object), len(keys)),
        keys,
        [plans[i][1] for i in by_key],
        times.reshape(-1, 3),
        counts.reshape(-1, 2),
        [outcomes[i].re_arrivals for i in by_key],
        repeat=len(by_id),
    )
    return pd.DataFrame(columns)[list(RESULT_COLUMNS)]


def _columns(
    candidate: Any,
    keys: Sequence[PlanKey],
    plans: Sequence[Plan],
    times: Any,
    counts: Any,
    re_arrivals: Sequence[int],
    repeat: int = 0,
) -> dict[str, Any]:
    """RESULT_COLUMNS for rows candidate-major over ``keys`` (``repeat`` candidates), or
    for one plan's rows (``repeat`` 0: scalars broadcast)."""

    def per_plan(values: list[Any], dtype: Any = object) -> Any:
        return np.tile(np.array(values, dtype=dtype), repeat) if repeat else values[0]

    return {
        "candidate": candidate,
        "inputs": per_plan([k.inputs for k in keys]),
        "plan": per_plan([k.name for k in keys]),
        "n": per_plan([k.n for k in keys], np.int64),
        "plan_sha256": per_plan([p.sha256() for p in plans]),
        "device_s": times[:, 0],
        "decode_s": times[:, 1],
        "prefill_s": times[:, 2],
        "reuse_hits": counts[:, 0],
        "re_arrivals": per_plan(list(re_arrivals), np.int64),
        "computed_prefill_tokens": counts[:, 1],
    }


def sort_results(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.sort_values(["candidate", "inputs", "n", "plan"], kind="stable")
    return frame.reset_index(drop=True)


def shard_candidates(
    cands: Sequence[RblnConfiguration], shard: int, shards: int
) -> list[RblnConfiguration]:
    """Round robin ``cands[shard::shards]``: every shard gets a share of every batch size."""
    if not 0 <= shard < shards:
        raise SearchError(f"shard {shard} must be in 0..{shards - 1} (shards {shards})")
    return list(cands[shard::shards])


def run_shard(
    cands: Sequence[RblnConfiguration],
    plans: Sequence[tuple[PlanKey, Plan]],
    shard: int,
    shards: int,
    baseline: RblnConfiguration,
    workers: int = 1,
    profile: Profile | None = None,
) -> pd.DataFrame:
    """One shard's rows; every shard also carries the baseline so merge needs no plans."""
    part = shard_candidates(cands, shard, shards)
    if baseline not in part:
        part.append(baseline)
    frame, _ = evaluate(part, plans, workers, profile)
    return frame
