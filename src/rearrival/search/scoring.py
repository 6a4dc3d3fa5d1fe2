"""Configuration search over the compile-time candidates (docs/DESIGN.md §12, paper Section V-A).

The search predicts, with the base simulator (deferred release, no dummy-block rule), the
device time D of every candidate configuration on fixed input plans and ranks candidates by
``sum of candidate D / sum of baseline D`` over the search inputs (seconds summed first,
so N with larger cost weigh more). The pick is then scored on seed-separated evaluation
inputs that never influence selection, and the same ranking is repeated on restricted N
sets and with the mean of per-N ratios (Supplementary S8) to show how much the pick
depends on those choices.

Candidate space. For each batch_size B the bucket set holds 1 and B plus intermediate
buckets from the integers strictly between, at most ``max_buckets`` buckets IN TOTAL:
57 + 163 + 386 + 1,471 = 2,077 for B in {8, 10, 12, 16} and max_buckets 6 (4,393 for 7).
The authors' script counted intermediates + 1, so their ``--max-buckets 5`` is our 6 and
their default 6 enumerated our 4,393 (paper V-A, last paragraph of the search text).
Order is stable: batch size ascending, then bucket tuples in lexicographic order.

Work is split by candidates (``shard``: ``candidates[K::S]``, round robin so every shard
gets a share of every batch size) and merged into one ranking whose bytes do not depend
on the shard count: rows are sorted and every sum is ``math.fsum`` (exactly rounded, so
independent of order).
"""

from __future__ import annotations

import math
import multiprocessing
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from itertools import combinations
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from rearrival.atomic import atomic_directory, atomic_write_json
from rearrival.config.study import StudyConfig, Workload, tool_table_for
from rearrival.errors import RearrivalError
from rearrival.model.memory import DeviceMemory, device_memory
from rearrival.model.plangen import generate_plan
from rearrival.model.plans import Plan, load_plan, write_plan
from rearrival.model.profile import Profile, measured_profile, select_bucket
from rearrival.model.sim import SimConfig, compiled_core, core_inputs, simulate
from rearrival.parquet import write_frame
from rearrival.progress import progress

INPUT_SETS = ("search", "evaluation")
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


class SearchError(RearrivalError, ValueError):
    """Search settings, plans or shard files that cannot be used; names the file and fix."""


# --- candidates -------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """One compile-time configuration: decode buckets, batch_size, KV slots (= batch_size)."""

    buckets: tuple[int, ...]
    batch_size: int
    slots: int | None = None

    def __post_init__(self) -> None:
        buckets = tuple(self.buckets)
        if (
            not buckets
            or list(buckets) != sorted(set(buckets))
            or buckets[0] < 1
            or buckets[-1] != self.batch_size
        ):
            raise SearchError(
                f"candidate buckets {buckets} must be ascending positive "
                f"integers ending at batch_size {self.batch_size}"
            )
        object.__setattr__(self, "buckets", buckets)
        slots = self.batch_size if self.slots is None else self.slots
        if slots < 1:
            raise SearchError(f"candidate {self.batch_size}:{buckets} needs slots >= 1")
        object.__setattr__(self, "slots", slots)

    @cached_property
    def id(self) -> str:
        """Stable name, e.g. ``16:1,4,6,8,10,16`` (``/S`` appended only if slots differ)."""
        text = f"{self.batch_size}:{','.join(map(str, self.buckets))}"
        return text if self.slots == self.batch_size else f"{text}/{self.slots}"

    @property
    def n_buckets(self) -> int:
        return len(self.buckets)

    @cached_property
    def bucket_map(self) -> tuple[int, ...]:
        """b(n) for n = 0..batch_size (0 at n = 0), the only way buckets reach the schedule."""
        return (0, *(select_bucket(n, self.buckets) for n in range(1, self.batch_size + 1)))

    def tiebreak(self) -> tuple[Any, ...]:
        """Among equal predicted cost prefer fewer buckets (compile time, artifact size),
        then fewer slots (KV memory), then the enumeration order."""
        return (self.n_buckets, self.slots, self.batch_size, self.buckets)

    def sim_config(self) -> Any:
        """The base simulator of the paper (deferred release, no dummy-block rule)."""
        return SimConfig(
            buckets=self.buckets,
            batch_size=self.batch_size,
            slots=self.slots,
            release="deferred",
            dummy_block="off",
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "buckets": list(self.buckets),
            "batch_size": self.batch_size,
            "slots": self.slots,
        }


BASELINE = Candidate((1, 2, 4, 8), 8)


def parse_candidate_id(text: str) -> Candidate:
    """Inverse of ``Candidate.id``."""
    match = re.fullmatch(r"(\d+):([\d,]+)(?:/(\d+))?", text)
    if match is None:
        raise SearchError(f"candidate id {text!r} is not of the form 16:1,4,6,8,10,16")
    slots = int(match[3]) if match[3] else None
    return Candidate(tuple(int(b) for b in match[2].split(",")), int(match[1]), slots)


def enumerate_candidates(
    batch_sizes: Iterable[int] = (8, 10, 12, 16), max_buckets: int = 6
) -> list[Candidate]:
    """Every bucket set with 1 and B plus intermediates, at most ``max_buckets`` in total.

    Not filtered by compile budget; see ``candidates``.
    """
    sizes = sorted(set(batch_sizes))
    if not sizes or any(not isinstance(b, int) or b < 1 for b in sizes):
        raise SearchError(f"search.batch_sizes {list(batch_sizes)} must be integers >= 1")
    if not isinstance(max_buckets, int) or max_buckets < 2:
        raise SearchError(
            f"search.max_buckets {max_buckets!r} must be an "
            "integer >= 2: it counts 1 and batch_size too"
        )
    out: list[Candidate] = []
    for batch in sizes:
        if batch == 1:
            out.append(Candidate((1,), 1))
            continue
        between = range(2, batch)
        sets = [
            (1, *middle, batch)
            for k in range(0, min(max_buckets - 2, len(between)) + 1)
            for middle in combinations(between, k)
        ]
        out.extend(Candidate(buckets, batch) for buckets in sorted(sets))
    return out


def over_budget(candidate: Candidate, profile: Profile) -> bool:
    """True if compiling the candidate would exceed the compile budget (paper V-A)."""
    return profile.compile_seconds(candidate.n_buckets) > profile.compile_budget_s


def over_memory(candidate: Candidate, memory: DeviceMemory) -> bool:
    """True if the candidate's KV slots plus the weights do not fit the devices (V-D)."""
    return not memory.fits(candidate.slots)


def candidates(
    batch_sizes: Iterable[int] = (8, 10, 12, 16),
    max_buckets: int = 6,
    profile: Profile | None = None,
    memory: DeviceMemory | None = None,
    memory_filter: bool = True,
) -> list[Candidate]:
    """The searched candidates in stable order: enumeration minus those over the compile
    budget and, with ``memory_filter``, those whose KV and weights do not fit the devices
    (none of the paper's 2,077 is excluded by either; ``filter_counts`` counts them)."""
    profile = profile or measured_profile()
    memory = memory or device_memory(profile)
    return [
        c
        for c in enumerate_candidates(batch_sizes, max_buckets)
        if not over_budget(c, profile) and not (memory_filter and over_memory(c, memory))
    ]


def filter_counts(
    every: Sequence[Candidate], profile: Profile, memory: DeviceMemory, memory_filter: bool
) -> dict[str, int]:
    """How many candidates each filter removed, applied in order (compile budget first)."""
    budget = [c for c in every if over_budget(c, profile)]
    rest = [c for c in every if not over_budget(c, profile)]
    memory_out = [c for c in rest if over_memory(c, memory)] if memory_filter else []
    return {"excluded_by_compile_budget": len(budget), "excluded_by_memory": len(memory_out)}


# --- settings and input plans -----------------------------------------------------------


@dataclass(frozen=True)
class SearchSettings:
    """The ``search`` block of the study definition (defaults = config/schema.yaml)."""

    batch_sizes: tuple[int, ...] = (8, 10, 12, 16)
    max_buckets: int = 6
    n: tuple[int, ...] = (6, 8, 10)
    seeds: int = 3
    blocks: int = 3
    search_seed_block: int = 100
    evaluation_seed_block: int = 200
    restricted_n: tuple[tuple[int, ...], ...] = ((6, 8), (8, 10))
    top: int = 20
    shards: int = 4
    memory_filter: bool = True
    # agent sessions (a study's own search over its workload: generated or sampled from
    # a trace); None: the paper's two-round sessions
    workload: Workload | None = None

    def __post_init__(self) -> None:
        if self.search_seed_block == self.evaluation_seed_block:
            raise SearchError(
                "search.evaluation_seed_block must differ from "
                "search.search_seed_block so evaluation seeds are new"
            )
        if self.seeds < 1 or self.blocks < 1 or self.top < 1 or self.shards < 1:
            raise SearchError(
                "search.seeds, search.blocks, search.top and search.shards must be >= 1"
            )
        if not self.n or any(n < 1 for n in self.n):
            raise SearchError(f"search.n {list(self.n)} must list concurrency levels >= 1")
        for subset in self.restricted_n:
            if not subset or not set(subset) <= set(self.n):
                raise SearchError(
                    f"search.restricted_n entry {list(subset)} must be a "
                    f"non-empty subset of search.n {list(self.n)}"
                )

    @classmethod
    def from_config(cls, cfg: StudyConfig) -> SearchSettings:
        """The top-level ``search`` block (the paper's search, two-round inputs)."""
        settings = cls._from_mapping(cfg.search)
        _check_seed_blocks(cfg)
        return settings

    @classmethod
    def for_study(cls, cfg: StudyConfig, name: str) -> SearchSettings:
        """A study's own search (``studies.<name>.search``) over the study's workload,
        whose pick is that study's ``selected`` configuration."""
        study = cfg.study(name)
        if study.search is None:
            raise SearchError(
                f"{cfg.source}: studies.{name} has no search block; give it one (its pick "
                "is the study's 'selected') or leave out --study for the top-level search"
            )
        _check_seed_blocks(cfg)
        return replace(cls._from_mapping(study.search), workload=study.workload)

    @classmethod
    def _from_mapping(cls, mapping: Mapping[str, Any]) -> SearchSettings:
        raw = dict(mapping)
        for key in ("batch_sizes", "n"):
            if key in raw:
                raw[key] = tuple(int(v) for v in raw[key])
        if "restricted_n" in raw:
            raw["restricted_n"] = tuple(
                tuple(sorted(int(v) for v in s)) for s in raw["restricted_n"]
            )
        return cls(**raw)

    def seed_block(self, inputs: str) -> int:
        return self.search_seed_block if inputs == "search" else self.evaluation_seed_block


def _check_seed_blocks(cfg: StudyConfig) -> None:
    """Every search (the top-level one and each study's own) draws from seed blocks no
    study and no other search uses, so no input is ever shared."""
    owners: dict[int, str] = {
        s.seed_block: f"studies.{s.name}.seed_block" for s in cfg.studies.values()
    }
    searches = [("search", cfg.search)] + [
        (f"studies.{s.name}.search", s.search) for s in cfg.studies.values() if s.search is not None
    ]
    for where, block in searches:
        for key in ("search_seed_block", "evaluation_seed_block"):
            value = int(block[key])
            if value in owners:
                raise SearchError(
                    f"{cfg.source}: {where}.{key} {value} is also {owners[value]}; give "
                    "every study and every search its own seed blocks"
                )
            owners[value] = f"{where}.{key}"


@dataclass(frozen=True, order=True)
class PlanKey:
    """One input plan of the search: input set, N, seed index and block index."""

    inputs: str
    n: int
    seed: int
    block: int

    @property
    def name(self) -> str:
        return f"n{self.n}_s{self.seed}_b{self.block}"

    @property
    def relpath(self) -> str:
        return f"{self.inputs}/{self.name}.parquet"


def plan_keys(settings: SearchSettings) -> list[PlanKey]:
    """Search then evaluation inputs: N x seeds x blocks each (27 + 27 by default)."""
    return [
        PlanKey(inputs, n, seed, block)
        for inputs in INPUT_SETS
        for n in settings.n
        for seed in range(settings.seeds)
        for block in range(settings.blocks)
    ]


def make_plan(key: PlanKey, settings: SearchSettings, study_seed: int, table: Any) -> Plan:
    """The plan of one key, from the one plan generator every study uses.

    Each input set keeps its own seed block (``block`` argument of ``generate_plan``) and
    numbers its (seed, block) pairs as replicates ``seed * blocks + block``, so the search
    and evaluation sets, and every study's plans, never share a plan seed (the generator
    also puts N in the seed, so the N levels are independent draws). A search over agent
    sessions (``settings.workload``) draws them with the same seeds from their own stream.
    """
    seeds = {
        "study_seed": study_seed,
        "replicate": key.seed * settings.blocks + key.block,
        "block": settings.seed_block(key.inputs),
        "tool_table": table,
    }
    if settings.workload is not None:
        return settings.workload.plan(key.n, **seeds)
    return generate_plan(key.n, **seeds)


def make_plans(cfg: StudyConfig, settings: SearchSettings) -> list[tuple[PlanKey, Plan]]:
    table = tool_table_for(cfg)
    return [(key, make_plan(key, settings, cfg.study_seed, table)) for key in plan_keys(settings)]


def write_plans(plans: Sequence[tuple[PlanKey, Plan]], out_dir: Path) -> None:
    """DIR/search/*.parquet and DIR/evaluation/*.parquet, published as one directory."""
    with atomic_directory(out_dir) as staging:
        for key, plan in plans:
            write_plan(plan, staging / key.relpath)


def read_plans(plans_dir: Path, settings: SearchSettings) -> list[tuple[PlanKey, Plan]]:
    """Every plan the settings call for, from ``rearrival search plans`` output."""
    out = []
    for key in plan_keys(settings):
        path = plans_dir / key.relpath
        if not path.exists():
            raise SearchError(
                f"{path}: search plan missing; write the plans with "
                f"`rearrival search plans` into {plans_dir}"
            )
        out.append((key, load_plan(path)))
    return out


# --- simulation -------------------------------------------------------------------------


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

    def __init__(self, cands: Sequence[Candidate], profile: Profile) -> None:
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
        result = simulate(plan, cand.sim_config(), profile, core="compiled")
        out_f[row, :3] = (result.device_s, result.decode_s, result.prefill_s)
        out_i[row, :2] = (result.reuse_hits, result.computed_prefill_tokens)


_WORKER: list[CandidateArrays] = []


def _init_worker(cands: list[Candidate], profile: Profile | None = None) -> None:
    _WORKER[:] = [CandidateArrays(cands, profile or measured_profile())]


def _score_plan(task: tuple[int, Plan]) -> tuple[int, PlanScores]:
    index, plan = task
    return index, score_plan(plan, _WORKER[0])


# Below this many candidate-plan pairs one process is faster than starting workers (each
# spawned worker imports numpy, pandas and numba, about 1 s on the development machine).
POOL_MIN_PAIRS = 400_000


def evaluate(
    cands: Sequence[Candidate],
    plans: Sequence[tuple[PlanKey, Plan]],
    workers: int = 1,
    profile: Profile | None = None,
) -> tuple[pd.DataFrame, int]:
    """Outcome of every candidate on every plan as a long frame, and the number of
    simulations actually run (the rest were exact re-uses, see ``CandidateArrays``).

    One task per plan; larger N first so the slowest tasks do not finish last. ``workers``
    is a maximum: small searches run in this process. On a terminal a bar counts the plans.
    """
    tasks = sorted(enumerate(p for _, p in plans), key=lambda t: (-t[1].n, t[0]))
    outcomes: dict[int, PlanScores] = {}
    what = f"simulating {len(cands):,} configurations"  # the candidates and the baseline
    if workers <= 1 or len(tasks) <= 1 or len(cands) * len(plans) < POOL_MIN_PAIRS:
        _init_worker(list(cands), profile)
        for task in progress(tasks, len(tasks), what, "plan"):
            index, scores = _score_plan(task)
            outcomes[index] = scores
    else:
        context = multiprocessing.get_context("spawn")  # no fork of pyarrow's threads
        with context.Pool(
            workers, initializer=_init_worker, initargs=(list(cands), profile)
        ) as pool:
            done = pool.imap_unordered(_score_plan, tasks)
            for index, scores in progress(done, len(tasks), what, "plan"):
                outcomes[index] = scores
    simulations = sum(scores.simulations for scores in outcomes.values())
    return results_frame(cands, plans, outcomes), simulations


def results_frame(
    cands: Sequence[Candidate],
    plans: Sequence[tuple[PlanKey, Plan]],
    outcomes: Mapping[int, PlanScores],
) -> pd.DataFrame:
    """Long frame, one row per (candidate, plan), in ``sort_results`` order.

    Built column-wise and directly in sorted order (1.7 million rows at fleet scale, where
    sorting string columns costs more than the simulations); with repeated candidate ids
    it falls back to building and sorting.
    """
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


def shard_candidates(cands: Sequence[Candidate], shard: int, shards: int) -> list[Candidate]:
    """Round robin ``cands[shard::shards]``: every shard gets a share of every batch size."""
    if not 0 <= shard < shards:
        raise SearchError(f"shard {shard} must be in 0..{shards - 1} (shards {shards})")
    return list(cands[shard::shards])


def run_shard(
    cands: Sequence[Candidate],
    plans: Sequence[tuple[PlanKey, Plan]],
    shard: int,
    shards: int,
    baseline: Candidate,
    workers: int = 1,
    profile: Profile | None = None,
) -> pd.DataFrame:
    """One shard's rows; every shard also carries the baseline so merge needs no plans."""
    part = shard_candidates(cands, shard, shards)
    if baseline not in part:
        part.append(baseline)
    frame, _ = evaluate(part, plans, workers, profile)
    return frame


# --- scoring and selection --------------------------------------------------------------


def n_label(n_set: Iterable[int]) -> str:
    return ",".join(map(str, sorted(n_set)))


def set_scores(
    totals: Mapping[str, Mapping[int, float]], baseline: Mapping[int, float], n_set: Iterable[int]
) -> dict[str, float]:
    """Sum of candidate D over the N set / same sum for the baseline (paper V-A)."""
    ns = sorted(n_set)
    denominator = math.fsum(baseline[n] for n in ns)
    return {cid: math.fsum(t[n] for n in ns) / denominator for cid, t in totals.items()}


def mean_ratio_scores(
    totals: Mapping[str, Mapping[int, float]], baseline: Mapping[int, float], n_set: Iterable[int]
) -> dict[str, float]:
    """Mean over N of per-N ratios: the alternative score of Supplementary S8."""
    ns = sorted(n_set)
    return {cid: math.fsum(t[n] / baseline[n] for n in ns) / len(ns) for cid, t in totals.items()}


def ranking(scores: Mapping[str, float], tiebreak: Mapping[str, tuple[Any, ...]]) -> list[str]:
    """Candidate ids best first: lower score, then ``Candidate.tiebreak``."""
    return sorted(scores, key=lambda cid: (scores[cid], tiebreak[cid]))


def compare_n_sets(
    totals: Mapping[str, Mapping[int, float]],
    baseline: Mapping[int, float],
    tiebreak: Mapping[str, tuple[Any, ...]],
    full_n: Sequence[int],
    restricted: Sequence[Sequence[int]],
    top: int,
) -> dict[str, Any]:
    """Selection on the full N set and each restricted set, by summed-seconds score and by
    the mean of per-N ratios (paper V-A: the pick depended on N; S8: the score did not)."""
    full_order = ranking(set_scores(totals, baseline, full_n), tiebreak)
    full_top = full_order[:top]
    report: dict[str, Any] = {}
    for n_set in [list(full_n), *map(list, restricted)]:
        scores = set_scores(totals, baseline, n_set)
        order = ranking(scores, tiebreak)
        mean_order = ranking(mean_ratio_scores(totals, baseline, n_set), tiebreak)
        shared = [cid for cid in order[:top] if cid in set(full_top)]
        report[n_label(n_set)] = {
            "n": sorted(n_set),
            "selected": order[0],
            "selected_score": scores[order[0]],
            "top": [{"id": cid, "score": scores[cid]} for cid in order[:top]],
            "top_overlap_with_full": len(shared),
            "shared_with_full_top": shared,
            "full_pick_rank": order.index(full_order[0]) + 1,
            "mean_ratio_selected": mean_order[0],
            "mean_ratio_changes_selection": mean_order[0] != order[0],
        }
    return report


def _group_totals(
    frame: pd.DataFrame, mask: Any, columns: Sequence[str]
) -> dict[str, dict[str, dict[int, float]]]:
    """Per column, per candidate, per N: exactly rounded sum over the rows in ``mask``.

    ``frame`` is in ``sort_results`` order, so the rows of one (candidate, n) are one
    contiguous run and runs come in (candidate, n) order; the run boundaries are found
    once for all columns, on integer codes (string columns are slow to walk row by row).
    """
    codes, names = pd.factorize(frame["candidate"])
    codes, ns = codes[mask], frame["n"].to_numpy()[mask]
    change = np.ones(len(codes), dtype=bool)
    change[1:] = (codes[1:] != codes[:-1]) | (ns[1:] != ns[:-1])
    starts = np.flatnonzero(change).tolist()
    bounds = list(zip(starts, [*starts[1:], len(codes)], strict=True))
    names = [str(name) for name in names]
    labels = [
        (names[code], n)
        for code, n in zip(codes[starts].tolist(), ns[starts].tolist(), strict=True)
    ]
    out: dict[str, dict[str, dict[int, float]]] = {}
    for column in columns:
        values = frame[column].to_numpy()[mask].tolist()
        totals: dict[str, dict[int, float]] = {}
        for (cid, n), (start, stop) in zip(labels, bounds, strict=True):
            totals.setdefault(cid, {})[n] = math.fsum(values[start:stop])
        out[column] = totals
    return out


def _totals(frame: pd.DataFrame, column: str = "device_s") -> dict[str, dict[int, float]]:
    """Per candidate, per N: exactly rounded sum of ``column`` over that N's plans."""
    if len(frame) == 0:
        return {}
    frame = sort_results(frame) if not _is_sorted(frame) else frame
    return _group_totals(frame, np.ones(len(frame), dtype=bool), [column])[column]


def _is_sorted(frame: pd.DataFrame) -> bool:
    """True when the rows are in ``sort_results`` order (as evaluate and merge leave them)."""
    keys = frame[["candidate", "inputs", "n", "plan"]]
    return pd.MultiIndex.from_frame(keys).is_monotonic_increasing


def _sum(totals: Mapping[int, float]) -> float:
    return math.fsum(totals[n] for n in sorted(totals))


def combine_shards(frames: Sequence[tuple[str, pd.DataFrame]]) -> pd.DataFrame:
    """One row per (candidate, plan); rows repeated across shards (the baseline) must agree."""
    for source, frame in frames:
        missing = set(RESULT_COLUMNS) - set(frame.columns)
        if missing:
            raise SearchError(
                f"{source}: not a search shard (missing columns "
                f"{', '.join(sorted(missing))}); re-run `rearrival search shard`"
            )
    merged = pd.concat([f[list(RESULT_COLUMNS)] for _, f in frames], ignore_index=True)
    merged = merged.drop_duplicates()
    clash = merged.duplicated(["candidate", "inputs", "plan"], keep=False)
    if clash.any():
        row = merged[clash].iloc[0]
        raise SearchError(
            f"shards disagree on candidate {row['candidate']} plan "
            f"{row['inputs']}/{row['plan']}; re-run every shard on one plans "
            "directory"
        )
    shas = merged.groupby(["inputs", "plan"])["plan_sha256"].nunique()
    if (shas > 1).any():
        inputs, plan = shas[shas > 1].index[0]
        raise SearchError(
            f"shards used different plans for {inputs}/{plan}; re-run every "
            "shard on one plans directory"
        )
    return sort_results(merged)


def check_complete(
    results: pd.DataFrame, cands: Sequence[Candidate], baseline: Candidate, settings: SearchSettings
) -> None:
    expected_plans = {(k.inputs, k.name) for k in plan_keys(settings)}
    have = results.groupby("candidate")[["inputs", "plan"]]
    counts = have.size()
    for cand in [baseline, *cands]:
        if cand.id not in counts.index:
            raise SearchError(
                f"no shard holds candidate {cand.id}; merge every shard file "
                f"(0..{settings.shards - 1}) written with this config"
            )
        if counts[cand.id] != len(expected_plans):
            raise SearchError(
                f"candidate {cand.id} has {counts[cand.id]} of "
                f"{len(expected_plans)} plans; re-run its shard"
            )
    pairs = results[["inputs", "plan"]].drop_duplicates()
    present = set(zip(pairs["inputs"].tolist(), pairs["plan"].tolist(), strict=True))
    if present != expected_plans:
        odd = sorted(present ^ expected_plans)[0]
        raise SearchError(
            f"shard plans do not match the config (e.g. {odd[0]}/{odd[1]}); "
            "re-run `rearrival search plans` and every shard"
        )


def score_table(
    results: pd.DataFrame,
    cands: Sequence[Candidate],
    baseline: Candidate,
    settings: SearchSettings,
    profile: Profile | None = None,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """One row per candidate (ranked) plus the N-set comparison used by the summary."""
    profile = profile or measured_profile()
    if not _is_sorted(results):
        results = sort_results(results)
    summed = ("device_s", "decode_s", "prefill_s", "reuse_hits", "re_arrivals")
    per_inputs = {
        inputs: _group_totals(results, (results["inputs"] == inputs).to_numpy(dtype=bool), summed)
        for inputs in INPUT_SETS
    }
    device = {inputs: per_inputs[inputs]["device_s"] for inputs in INPUT_SETS}
    parts = {col: {inputs: per_inputs[inputs][col] for inputs in INPUT_SETS} for col in summed[1:]}
    base = {inputs: device[inputs][baseline.id] for inputs in INPUT_SETS}
    ids = [c.id for c in cands]
    tiebreak = {c.id: c.tiebreak() for c in cands}
    search_totals = {cid: device["search"][cid] for cid in ids}
    comparison = compare_n_sets(
        search_totals, base["search"], tiebreak, settings.n, settings.restricted_n, settings.top
    )
    columns: dict[str, dict[str, float]] = {
        "score": set_scores(search_totals, base["search"], settings.n),
        "mean_ratio_score": mean_ratio_scores(search_totals, base["search"], settings.n),
        "evaluation_score": set_scores(
            {cid: device["evaluation"][cid] for cid in ids}, base["evaluation"], settings.n
        ),
    }
    for n in settings.n:
        columns[f"ratio_n{n}"] = set_scores(search_totals, base["search"], [n])
    rank_of = {"rank": "score", "mean_ratio_rank": "mean_ratio_score"}
    for n_set in settings.restricted_n:
        suffix = "_".join(map(str, n_set))
        columns[f"score_n{suffix}"] = set_scores(search_totals, base["search"], n_set)
        rank_of[f"rank_n{suffix}"] = f"score_n{suffix}"
    ranks = {
        name: {cid: i + 1 for i, cid in enumerate(ranking(columns[score], tiebreak))}
        for name, score in rank_of.items()
    }
    rows = []
    for cand in cands:
        cid = cand.id
        row: dict[str, Any] = {
            "id": cid,
            "batch_size": cand.batch_size,
            "slots": cand.slots,
            "buckets": ",".join(map(str, cand.buckets)),
            "n_buckets": cand.n_buckets,
        }
        row.update({name: values[cid] for name, values in columns.items()})
        row.update({name: values[cid] for name, values in ranks.items()})
        for inputs in INPUT_SETS:
            row[f"{inputs}_decode_ratio"] = _sum(parts["decode_s"][inputs][cid]) / _sum(
                parts["decode_s"][inputs][baseline.id]
            )
            row[f"{inputs}_prefill_ratio"] = _sum(parts["prefill_s"][inputs][cid]) / _sum(
                parts["prefill_s"][inputs][baseline.id]
            )
            row[f"{inputs}_reuse_hits"] = int(_sum(parts["reuse_hits"][inputs][cid]))
            row[f"{inputs}_re_arrivals"] = int(_sum(parts["re_arrivals"][inputs][cid]))
        row.update(resource_costs(cand, profile))
        rows.append(row)
    table = pd.DataFrame(rows).sort_values("rank", kind="stable").reset_index(drop=True)
    return table, comparison


def resource_costs(cand: Candidate, profile: Profile) -> dict[str, float]:
    """Compile time and artifact size (authors' fit) and KV reservation (Tables XIV, XV)."""
    kv = profile.kv_gib(cand.slots)
    return {
        "compile_s": profile.compile_seconds(cand.n_buckets),
        "artifact_gib": profile.artifact_gib(cand.n_buckets),
        "kv_gib": kv,
        "kv_gib_per_device": kv / profile.num_devices,
    }


def _row_dict(table: pd.DataFrame, cid: str) -> dict[str, Any]:
    row = table[table["id"] == cid].iloc[0].to_dict()
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}


def summarize(
    table: pd.DataFrame,
    comparison: dict[str, Any],
    settings: SearchSettings,
    profile: Profile | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``selected.json`` (what later studies compile) and ``summary.json`` (paper V-A)."""
    profile = profile or measured_profile()
    best = _row_dict(table, table.iloc[0]["id"])
    pick = parse_candidate_id(best["id"])
    selected = {
        **pick.as_dict(),
        "search_score": best["score"],
        "evaluation_score": best["evaluation_score"],
        "mean_ratio_score": best["mean_ratio_score"],
        **{f"ratio_n{n}": best[f"ratio_n{n}"] for n in settings.n},
        **resource_costs(pick, profile),
        "n_buckets": pick.n_buckets,
        "search_n": list(settings.n),
    }
    every = enumerate_candidates(settings.batch_sizes, settings.max_buckets)
    memory = device_memory(profile)
    counts = filter_counts(every, profile, memory, settings.memory_filter)
    top = table.head(settings.top)
    full = comparison[n_label(settings.n)]
    summary = {
        "candidates": {
            "max_buckets": settings.max_buckets,
            "max_buckets_note": "counts every bucket including 1 and batch_size; the "
            "authors' script counted intermediates + 1, so their "
            "--max-buckets 5 is this 6",
            "enumerated": len(every),
            "excluded_by_compile_budget": counts["excluded_by_compile_budget"],
            "compile_budget_s": profile.compile_budget_s,
            "excluded_by_memory": counts["excluded_by_memory"],
            "memory_filter": settings.memory_filter,
            "memory_gib_per_device": memory.per_device_gib,
            "max_slots_in_memory": memory.max_slots(),
            "searched": len(table),
            "per_batch_size": {
                str(b): sum(1 for c in every if c.batch_size == b) for b in settings.batch_sizes
            },
        },
        "inputs": {
            "n": list(settings.n),
            "seeds": settings.seeds,
            "blocks": settings.blocks,
            "search_plans": len(settings.n) * settings.seeds * settings.blocks,
            "evaluation_plans": len(settings.n) * settings.seeds * settings.blocks,
            **({"workload": settings.workload.as_dict()} if settings.workload else {}),
        },
        "selected": selected,
        "evaluation_score": best["evaluation_score"],
        "top": [
            {"id": r.id, "score": r.score, "evaluation_score": r.evaluation_score}
            for r in top.itertuples()
        ],
        "top_batch_sizes": sorted({int(b) for b in top["batch_size"]}),
        "top_score_spread_pp": 100 * (float(top["score"].max()) - float(top["score"].min())),
        "mean_ratio_selected": full["mean_ratio_selected"],
        "mean_ratio_changes_selection": full["mean_ratio_changes_selection"],
        "restricted": {
            label: part for label, part in comparison.items() if label != n_label(settings.n)
        },
    }
    return selected, summary


def write_outputs(
    results: pd.DataFrame,
    cands: Sequence[Candidate],
    baseline: Candidate,
    settings: SearchSettings,
    out_dir: Path,
    profile: Profile | None = None,
) -> dict[str, Any]:
    """DIR/scores.parquet, DIR/selected.json, DIR/summary.json (each atomically)."""
    check_complete(results, cands, baseline, settings)
    table, comparison = score_table(results, cands, baseline, settings, profile)
    selected, summary = summarize(table, comparison, settings, profile)
    write_frame(table, out_dir / "scores.parquet")
    atomic_write_json(out_dir / "selected.json", selected)
    atomic_write_json(out_dir / "summary.json", summary)
    return summary


def baseline_of(cfg: StudyConfig, study: str | None = None) -> Candidate:
    """The denominator of every score: the config's ``baseline`` configuration, or for a
    study's own search that study's baseline (its first configuration)."""
    name = "baseline" if study is None else cfg.study(study).baseline
    raw = cfg.configurations.get(name)
    if raw is None:
        raise SearchError(
            f"{cfg.source}: configurations.baseline is missing; the search "
            "scores candidates against it (e.g. buckets [1,2,4,8], batch_size 8)"
        )
    return Candidate(raw.buckets, raw.batch_size, raw.slots)


def search_candidates(settings: SearchSettings, profile: Profile | None = None) -> list[Candidate]:
    """The searched candidates; refuses an empty space before anything is simulated or
    written, naming the filter that removed the last candidate and how to relax it."""
    profile = profile or measured_profile()
    kept = candidates(
        settings.batch_sizes, settings.max_buckets, profile, memory_filter=settings.memory_filter
    )
    if not kept:
        raise SearchError(empty_space_message(settings, profile))
    return kept


def empty_space_message(settings: SearchSettings, profile: Profile) -> str:
    """Why no candidate is left: the compile budget (checked first) or device memory."""
    every = enumerate_candidates(settings.batch_sizes, settings.max_buckets)
    memory = device_memory(profile)
    counts = filter_counts(every, profile, memory, settings.memory_filter)
    sizes = ",".join(map(str, settings.batch_sizes))
    if counts["excluded_by_compile_budget"] == len(every):
        return (
            f"no candidate left: the compile budget ({profile.compile_budget_s:g} s) removed "
            f"all {len(every)} of batch sizes {sizes} with max_buckets {settings.max_buckets}; "
            "lower --max-buckets"
        )
    return (
        f"no candidate left: the memory filter removed all "
        f"{counts['excluded_by_memory']} within the compile budget (batch sizes {sizes}; at "
        f"most {memory.max_slots()} KV slots fit {memory.per_device_gib:g} GiB per device); "
        f"use batch sizes <= {memory.max_slots()} or --no-memory-filter"
    )


def override_settings(settings: SearchSettings, **changes: Any) -> SearchSettings:
    """Settings with command-line values (``--n``, ``--batch-sizes``, ``--max-buckets``,
    ``--memory-filter``) in place of the config's; a new N set keeps only the restricted
    N sets that lie inside it."""
    if not changes:
        return settings
    if "n" in changes:
        keep = set(changes["n"])
        changes["restricted_n"] = tuple(s for s in settings.restricted_n if set(s) <= keep)
    return replace(settings, **changes)


def run_search(
    cfg: StudyConfig,
    out_dir: Path,
    workers: int = 2,
    profile: Profile | None = None,
    overrides: Mapping[str, Any] | None = None,
    study: str | None = None,
) -> dict[str, Any]:
    """The whole search in one process (plans, every candidate, merge): DIR/plans/ and the
    same scores/selected/summary files the sharded path writes, byte for byte. With
    ``study``, that study's own search over its workload."""
    base = (
        SearchSettings.from_config(cfg) if study is None else SearchSettings.for_study(cfg, study)
    )
    settings = override_settings(base, **(overrides or {}))
    cands = search_candidates(settings, profile)
    plans = make_plans(cfg, settings)
    write_plans(plans, out_dir / "plans")
    baseline = baseline_of(cfg, study)
    evaluated = cands if baseline in cands else [*cands, baseline]
    results, _ = evaluate(evaluated, plans, workers, profile)
    return write_outputs(results, cands, baseline, settings, out_dir, profile)


def select(
    cfg: StudyConfig,
    workers: int = 2,
    profile: Profile | None = None,
    settings: SearchSettings | None = None,
) -> tuple[Candidate, float]:
    """The search's pick and its score, from the search inputs alone (no files written);
    ``settings`` replaces the config's (e.g. another N set)."""
    settings = settings or SearchSettings.from_config(cfg)
    plans = [(k, p) for k, p in make_plans(cfg, settings) if k.inputs == "search"]
    cands = search_candidates(settings, profile)
    baseline = baseline_of(cfg)
    results, _ = evaluate(
        cands if baseline in cands else [*cands, baseline], plans, workers, profile
    )
    totals = _totals(results)
    scores = set_scores({c.id: totals[c.id] for c in cands}, totals[baseline.id], settings.n)
    best = ranking(scores, {c.id: c.tiebreak() for c in cands})[0]
    return parse_candidate_id(best), scores[best]
