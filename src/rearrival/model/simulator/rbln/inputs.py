"""What the predictor's cores read, computed once and cached (``sim``).

The search runs each plan on thousands of configurations and ``simulate`` callers often
build a fresh ``SimConfig`` per call, so per-plan work (``plan_arrays``,
``request_tables``, ``core_inputs``) is cached per plan object and profile, and
per-configuration work (``step_table``, ``fixed_array``) per bucket set or config object.
Every cache checks that its entry was built from the same plan, profile or config object
and is cleared when it grows past its bound. Callers must treat the returned lists and
arrays as read-only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from rearrival.model.buckets import select_bucket
from rearrival.model.cost.profile import Profile
from rearrival.model.simulator.plan_arrays import PlanArrays, plan_arrays
from rearrival.model.simulator.rbln.config import SimConfig, SimConfigError
from rearrival.model.simulator.rbln.result import histogram_label

_STEP_TABLES: dict[
    tuple[tuple[int, ...], int], tuple[Profile, list[float], list[int], Any, Any, list[str]]
] = {}


def step_entry(
    config: SimConfig, profile: Profile
) -> tuple[Profile, list[float], list[int], Any, Any, list[str]]:
    """Decode step times and buckets b(n) for n in 0..batch_size, as lists and arrays,
    and the summary's "n->b" labels.

    Keyed by the bucket set and batch size, so a caller that builds a new ``SimConfig``
    for every call (``simulate(plan, SimConfig(...))``) still hits the cache.
    """
    key = (config.buckets, config.batch_size)
    entry = _STEP_TABLES.get(key)
    if entry is None or entry[0] is not profile:
        buckets = [0] + [select_bucket(n, config.buckets) for n in range(1, config.batch_size + 1)]
        times = [0.0] + [
            profile.decode_step_s(n, buckets[n]) for n in range(1, config.batch_size + 1)
        ]
        if len(_STEP_TABLES) > 50_000:
            _STEP_TABLES.clear()
        entry = _STEP_TABLES[key] = (
            profile,
            times,
            buckets,
            np.array(times, dtype=np.float64),
            np.array(buckets, dtype=np.int64),
            [histogram_label(n, b) for n, b in enumerate(buckets)],
        )
    return entry


def step_table(config: SimConfig, profile: Profile) -> tuple[list[float], list[int]]:
    """Decode step time and bucket for each n in 0..batch_size, cached per bucket set."""
    entry = step_entry(config, profile)
    return entry[1], entry[2]


_PROFILE_MEMOS: dict[int, tuple[Profile, Callable[[int], float], Callable[[int, int], int]]] = {}


def profile_memos(profile: Profile) -> tuple[Callable[[int], float], Callable[[int, int], int]]:
    """Memoised T(q) and reuse rule of a profile: the search evaluates the same plans'
    token counts on every candidate, and a C-level cache hit is cheaper than the call."""
    entry = _PROFILE_MEMOS.get(id(profile))
    if entry is None or entry[0] is not profile:
        entry = _PROFILE_MEMOS[id(profile)] = (
            profile,
            lru_cache(maxsize=65536)(profile.prefill_s),
            lru_cache(maxsize=65536)(profile.reusable_tokens),
        )
    return entry[1], entry[2]


def checked_arrays(plan: Any, config: SimConfig) -> PlanArrays:
    """The plan's per-request lists (``plan_arrays``, cached per plan) after checking that
    ``config.fixed_arrivals`` gives one time per re-arrival."""
    arrays = plan_arrays(plan)
    re_arrivals = arrays.requests - arrays.sessions
    if config.fixed_arrivals is not None and len(config.fixed_arrivals) != re_arrivals:
        raise SimConfigError(
            f"SimConfig field 'fixed_arrivals' has {len(config.fixed_arrivals)} times for a "
            f"plan of {re_arrivals} re-arrivals; give one time per re-arrival in (session, "
            "round) order (one per session for a two-round plan)"
        )
    return arrays


_REQUEST_TABLES: dict[int, tuple[Any, Profile, PlanArrays, tuple[list[Any], ...]]] = {}


def request_tables(plan: Any, arrays: PlanArrays, profile: Profile) -> tuple[list[Any], ...]:
    """Every prefill cost a plan can incur, computed once per plan and profile instead of
    on each of the search's 2,077 candidates.

    Returns (miss_cost, pair_off, pair_reuse, pair_cost, owners): T(L) with nothing
    cached per request; for round k >= 1 of a session, the tokens C = reusable(P_j, L)
    the KV of the session's round j = k - d gives and T(L - C), at ``pair_off[rid] + d
    - 1`` for d = 1..k; and the ``SlotPool.owner`` entry each admission writes. Callers
    must treat the lists as read-only.
    """
    entry = _REQUEST_TABLES.get(id(plan))
    if entry is not None and entry[0] is plan and entry[1] is profile and entry[2] is arrays:
        return entry[3]
    prefill_time, reusable = profile_memos(profile)
    prompt = arrays.prompt
    miss_cost = [prefill_time(tokens) for tokens in prompt]
    pair_off = [0] * len(prompt)
    pair_reuse: list[int] = []
    pair_cost: list[float] = []
    for rid, k in enumerate(arrays.round_of):
        pair_off[rid] = len(pair_reuse)
        for d in range(1, k + 1):
            reuse = reusable(prompt[rid - d], prompt[rid])
            pair_reuse.append(reuse)
            pair_cost.append(prefill_time(prompt[rid] - reuse))
    owners = [
        (rid, session, tokens)
        for rid, (session, tokens) in enumerate(zip(arrays.session_of, prompt, strict=True))
    ]
    if len(_REQUEST_TABLES) > 256:
        _REQUEST_TABLES.clear()
    tables = (miss_cost, pair_off, pair_reuse, pair_cost, owners)
    _REQUEST_TABLES[id(plan)] = (plan, profile, arrays, tables)
    return tables


@dataclass(frozen=True)
class CoreInputs:
    """A plan as the compiled core's arrays, for one profile (``core_inputs``)."""

    # int64 (7, requests): prompt, gen, round, pair_off, next_fixed, follower (the round 0
    # rid a session's last round sends, -1: none), starts (1: round 0 of a session sent at
    # its start, 0: every later round and a renewed session's round 0)
    ints: Any
    # float64 (4, requests): gap after the round, T(L), start (round 0 only), follow_gap
    floats: Any
    pair_reuse: Any  # int64: C per (request, earlier round of its session), request_tables
    pair_cost: Any  # float64: T(L - C) likewise
    arrays: PlanArrays
    compiled_ok: bool  # False: integer keys could overflow int64; use the Python core


_CORE_INPUTS: dict[int, tuple[Any, Profile, CoreInputs]] = {}
_FIXED: dict[int, tuple[SimConfig, Any]] = {}
_NO_FIXED: list[Any] = []


def core_inputs(plan: Any, profile: Profile) -> CoreInputs:
    """The plan's per-request arrays and prefill costs, converted once per plan and profile
    (the search and the benchmark call the core on the same plan thousands of times)."""
    entry = _CORE_INPUTS.get(id(plan))
    if entry is not None and entry[0] is plan and entry[1] is profile:
        return entry[2]
    # Lazy: the compiled core imports numba, 0.22 s measured; the Python core never needs it.
    from rearrival.model.simulator.rbln.core import fits_int64

    arrays = plan_arrays(plan)
    miss_cost, pair_off, pair_reuse, pair_cost, _ = request_tables(plan, arrays, profile)
    start = [
        arrays.start[s] if k == 0 else 0.0
        for s, k in zip(arrays.session_of, arrays.round_of, strict=True)
    ]
    starts = [
        int(k == 0 and arrays.leader[s] < 0)
        for s, k in zip(arrays.session_of, arrays.round_of, strict=True)
    ]
    ints = [
        arrays.prompt,
        arrays.gen,
        arrays.round_of,
        pair_off,
        arrays.next_fixed,
        arrays.follower,
        starts,
    ]
    floats = [arrays.gap, miss_cost, start, arrays.follow_gap]
    inputs = CoreInputs(
        np.array(ints, dtype=np.int64).reshape(len(ints), -1),
        np.array(floats, dtype=np.float64).reshape(len(floats), -1),
        np.array(pair_reuse, dtype=np.int64),
        np.array(pair_cost, dtype=np.float64),
        arrays,
        fits_int64(sum(arrays.gen), arrays.requests, 1),
    )
    if len(_CORE_INPUTS) > 256:
        _CORE_INPUTS.clear()
    _CORE_INPUTS[id(plan)] = (plan, profile, inputs)
    return inputs


def fixed_array(config: SimConfig) -> Any:
    """Fixed re-arrival times as float64 (empty: the base rule), cached per config."""
    if config.fixed_arrivals is None:
        if not _NO_FIXED:
            _NO_FIXED.append(np.empty(0))
        return _NO_FIXED[0]
    entry = _FIXED.get(id(config))
    if entry is None or entry[0] is not config:
        if len(_FIXED) > 1024:
            _FIXED.clear()
        entry = _FIXED[id(config)] = (config, np.array(config.fixed_arrivals, dtype=np.float64))
    return entry[1]
