"""The predictor simulator (docs/DESIGN.md §4, paper Section IV): cost of a plan on a configuration.

Given the fixed inputs of a replicate (prompt, generation lengths and tool wait per
session) and a compile-time configuration (bucket set, batch_size, KV slots), it replays
admission, prefill, decode, completion, re-arrival and KV eviction/reuse in time order,
and reports the device time D (decode + prefill), the prefill interference W, the
decode histogram h(n) and reuse. Re-arrival times are recomputed from completion times
because a configuration change moves them (paper Section III-D), unless the
fixed-arrival variant pins them (Table XI).

Semantics (docs/DESIGN.md §4 rules 1-6; the KV rules live in ``rearrival.model.kvslots``):

1. Requests enter a FIFO waiting queue in arrival order; simultaneous arrivals in session
   index order. Arrivals are seen at step boundaries: an arrival at ``a`` counts at the
   first boundary ``t >= a - 1e-12``.
2. A step is one prefill or one decode. If a request waits, fewer than batch_size run and
   a slot can be had, the head of the queue is admitted and its prefill owns the step.
   If a request waits and fewer than batch_size run but no slot is free or evictable,
   the deferred releases are applied and one decode step runs instead (with nothing
   running, admission is retried at once). Otherwise all running requests decode one
   token at bucket b(n); with nothing running, time jumps to the next arrival.
3. Admission secures a slot first (evicting the oldest evictable by allocation order),
   then looks up the session's surviving KV: C = profile.reusable_tokens(P, L1) with P
   the prompt the earlier prefill wrote; q = L1 - C is computed at cost T(q).
4. Prefill emits the first token; a request generating G tokens then needs G-1 decode
   steps. A first request's follow-up arrives at completion + tool wait.
5. D = sum of decode step times + sum of prefill times; W = sum over prefills of
   (requests running at admission) x T(q), in session-seconds, never added to D.

Variants: (a) ``fixed_arrivals`` gives each session's re-arrival time; a follow-up still
cannot be sent before the response it extends exists, so it arrives at
max(fixed time, first request's completion). (b) ``dummy_block="pre-evict"``: before every
decode step with 0 < running < batch_size, if no slot is free, the oldest evictable slot
is evicted and left free (what the measured stack does). (c) ``release``: "deferred"
(paper's base simulator) or "immediate" (measured stack). (d) ``dummy_block="reserved"``
(the rule of the paper's Supplementary S9 simulator): at every admission attempt while
0 < running < batch_size one slot counts as held by the padding block, so the free count
is S - allocated - 1; admission is possible iff free + evictable >= 1 and evicts the
oldest evictable slots until one is free (the first victims' slots stay free for the
padding block; the admission takes the last one's).

Under deferred release "pre-evict" gives exactly the base results ("off"): the slot it
frees is the oldest evictable one, which is the victim the next admission would have
chosen, and no look-up happens in between (the deferred releases that could add an
older candidate are applied only after an admission's choice). Only the eviction
records' cause and time differ; ``tests/test_sim_equivalence.py`` checks the summaries on
random plans. S9's dummy-block predictions therefore use deferred + "reserved".

Choices the design leaves open (identical in ``sim_reference``): a reuse hit is a
re-arrival with C > 0 (a surviving slot with a prompt under 128 tokens reuses nothing,
which a server's cached-token counter cannot tell from a miss); deferred releases are
applied after every admission's slot choice, including one that took a free slot; a hit
copies the prefix into the new slot and leaves the source slot cached with its old
allocation order; decode steps run back to back with no prefill in between and the same
n form one stretch.

The event core advances whole stretches of identical decode steps at once: n only
changes at a completion, an arrival or an admission, so it jumps straight to the next
such boundary. ``rearrival.model.sim_reference`` is the plain per-step version used by the tests
and the benchmark to check this one.

The loop exists twice, with the same operations in the same order: in plain Python
(``simulate_python``, the readable statement and the fallback) and compiled with numba
on flat arrays (``rearrival.model.simcore``, machine code cached on disk), which ``simulate``
runs once a process has made a few calls, and which the search runs over many
configurations of one plan per call (``simcore.run_batch``). Tests hold both to the
reference and to each other bit for bit.
"""

from __future__ import annotations

import math
import warnings
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from heapq import heappop, heappush
from typing import Any

import numpy as np

from rearrival.errors import RearrivalError
from rearrival.model.kvslots import NO_OWNER, Eviction, SlotPool
from rearrival.model.profile import Profile, bucket_set_problem, measured_profile, select_bucket
from rearrival.vocabulary import (
    ARRIVAL_TOLERANCE_S,
    DUMMY_BLOCKS,
    EVICTED_BY_ADMISSION,
    EVICTED_BY_DUMMY_BLOCK,
    EVICTION_CAUSES,
    RELEASES,
)

# Simulator variants predicted for every condition. "base" is the paper's predictor
# (Section IV) and the only one preregistered as the prediction; "dummy" adds the rule
# the paper's Supplementary S9 simulator added, "reserved" (under deferred release
# "pre-evict" gives the base results exactly, so it could not show S9's effect); "stack"
# uses the measured stack's rules (immediate release + pre-evict dummy block).
SIMULATORS: dict[str, tuple[str, str]] = {
    "base": ("deferred", "off"),
    "dummy": ("deferred", "reserved"),
    "stack": ("immediate", "pre-evict"),
}
PREDICTION = "base"


class SimConfigError(RearrivalError, ValueError):
    """A simulator configuration that cannot run; the message names the field and the fix.

    ``fields`` names the SimConfig fields at fault, so a caller that set them from its own
    options (the CLI) can name those options."""

    def __init__(self, message: str, fields: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.fields = fields


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _fixed_times(value: Mapping[int, float] | Sequence[float]) -> tuple[float, ...]:
    if isinstance(value, Mapping):
        keys = sorted(value)
        if keys != list(range(len(keys))):
            raise SimConfigError(
                "SimConfig field 'fixed_arrivals': mapping keys must be the "
                "session indices 0..N-1, one per session"
            )
        value = [value[k] for k in keys]
    try:
        times = tuple(float(v) for v in value)
    except (TypeError, ValueError) as exc:
        raise SimConfigError(
            "SimConfig field 'fixed_arrivals': give one re-arrival time in "
            f"seconds per session ({exc})"
        ) from exc
    if not all(math.isfinite(v) and v >= 0 for v in times):
        raise SimConfigError(
            "SimConfig field 'fixed_arrivals': every time must be a finite number of seconds >= 0"
        )
    return times


_VALID_GRIDS: set[tuple[tuple[int, ...], int]] = set()  # (buckets, batch_size) checked


@dataclass(frozen=True)
class SimConfig:
    """One configuration (bucket set, batch_size, KV slots) plus the simulator variant.

    ``slots`` defaults to batch_size (eager attention allocates one slot per sequence of
    the batch); after construction it is always an int. ``fixed_arrivals`` (variant (a))
    is stored as a tuple of per-session re-arrival times in seconds, session order.
    """

    buckets: tuple[int, ...] = (1, 2, 4, 8)
    batch_size: int = 8
    slots: int | None = None
    release: str = "deferred"
    dummy_block: str = "off"
    fixed_arrivals: Mapping[int, float] | Sequence[float] | None = None

    def __post_init__(self) -> None:
        try:
            buckets = tuple(self.buckets)
        except TypeError as exc:
            raise SimConfigError(
                "SimConfig field 'buckets' must be a list of integers such as 1,2,4,8", ("buckets",)
            ) from exc
        key = (buckets, self.batch_size)
        if (
            key not in _VALID_GRIDS
            or type(self.batch_size) is not int
            or not all(type(b) is int for b in buckets)
        ):  # bool equals int in the key
            problem = bucket_set_problem(buckets, self.batch_size)
            if problem is not None:
                raise SimConfigError(
                    f"SimConfig fields 'buckets'/'batch_size': {problem}", ("buckets", "batch_size")
                )
            if len(_VALID_GRIDS) < 100_000:
                _VALID_GRIDS.add(key)
        slots = self.batch_size if self.slots is None else self.slots
        if not _is_int(slots) or slots < 1:
            raise SimConfigError(
                f"SimConfig field 'slots' {slots!r} must be a "
                "positive integer (default: batch_size)",
                ("slots",),
            )
        if self.release not in RELEASES:
            raise SimConfigError(
                f"SimConfig field 'release' {self.release!r}: use one of {', '.join(RELEASES)}",
                ("release",),
            )
        if self.dummy_block not in DUMMY_BLOCKS:
            raise SimConfigError(
                f"SimConfig field 'dummy_block' {self.dummy_block!r}: "
                f"use one of {', '.join(DUMMY_BLOCKS)}",
                ("dummy_block",),
            )
        fixed = None if self.fixed_arrivals is None else _fixed_times(self.fixed_arrivals)
        object.__setattr__(self, "buckets", buckets)
        object.__setattr__(self, "slots", slots)
        object.__setattr__(self, "fixed_arrivals", fixed)


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request's outcome. ``turn`` is 0 (first request) or 1 (re-arrival).

    ``evicted_slot``/``evicted_session``/``evicted_turn`` name the KV this admission
    destroyed to get its slot (None when it took a free slot); ``running_at_admission`` is
    the K of W (requests decoding while this prefill ran).
    """

    session: int
    turn: int
    arrival_s: float
    admit_s: float
    first_token_s: float
    complete_s: float
    prompt_tokens: int
    cached_tokens: int
    computed_tokens: int
    prefill_s: float
    slot: int
    evicted_slot: int | None
    evicted_session: int | None
    evicted_turn: int | None
    running_at_admission: int

    @property
    def hit(self) -> bool:
        return self.cached_tokens > 0


@dataclass(frozen=True, slots=True)
class Stretch:
    """Consecutive decode steps with the same n and no prefill between them."""

    n: int
    b: int
    steps: int
    start_s: float
    end_s: float


# Per-request arrays both simulators fill, indexed by request id rid = 2 * session + turn.
# first_token_s (= admit_s + prefill_s), computed_tokens and evicted_slot are derived when
# records are built; evicted_tag is the victim's rid or NO_OWNER.
REQUEST_COLUMNS = (
    "arrival_s",
    "admit_s",
    "complete_s",
    "prompt_tokens",
    "cached_tokens",
    "prefill_s",
    "slot",
    "evicted_tag",
    "running_at_admission",
)
_CACHED = REQUEST_COLUMNS.index("cached_tokens")
_PROMPT = REQUEST_COLUMNS.index("prompt_tokens")


class SimResult:
    """Outcome of one simulation; records are built on first access (the search only
    reads the scalars).

    The compiled core hands over its arrays (``raw``); the per-request columns, stretch
    and eviction rows are converted to plain lists only when a caller asks for them.
    """

    __slots__ = (
        "_columns",
        "_counts",
        "_eviction_rows",
        "_hist",
        "_histogram",
        "_raw",
        "_records",
        "_stretch_rows",
        "config",
        "decode_s",
        "device_s",
        "interference_s",
        "makespan_s",
        "prefill_s",
        "sessions",
    )

    def __init__(
        self,
        config: SimConfig,
        sessions: int,
        histogram_nb: dict[tuple[int, int], int] | None,
        decode_s: float,
        prefill_s: float,
        interference_s: float,
        makespan_s: float,
        columns: tuple[list[Any], ...] | None,
        stretch_rows: list[list[Any]] | None,
        eviction_rows: list[tuple[float, int, int, str]] | None,
        counts: tuple[int, int, int, int, int] | None = None,
        raw: Any = None,
        hist: tuple[Any, list[int], list[str]] | None = None,
    ) -> None:
        self.config = config
        self.sessions = sessions
        self._histogram = histogram_nb  # {(n, b): decode steps}, sorted by (n, b)
        # or (steps per n array, b(n) list, "n->b" label list) from the compiled core
        self._hist = hist
        self.decode_s = decode_s
        self.prefill_s = prefill_s
        self.device_s = decode_s + prefill_s
        self.interference_s = interference_s
        self.makespan_s = makespan_s
        self._columns = columns
        self._stretch_rows = stretch_rows
        self._eviction_rows = eviction_rows
        # (reuse hits, re-arrival computed tokens, decode steps, sum b*steps, sum n*steps)
        self._counts = counts
        self._raw = raw  # (core module, its arguments, prompt list) to rebuild records
        self._records: tuple[RequestRecord, ...] | None = None

    def _materialize(self) -> None:
        """Lists from the compiled core, on first detailed access: the core runs the same
        simulation again with records kept (deterministic, so the same run)."""
        core, args, prompt = self._raw
        req_f, req_i, st_i, st_f, ev_f, ev_i = core.run_records(*args)
        arrival, admit, complete, prefill = req_f.tolist()
        cached, slot, tag, running = req_i.tolist()
        self._columns = (arrival, admit, complete, prompt, cached, prefill, slot, tag, running)
        self._stretch_rows = [
            [n, k, a, b] for (n, k), (a, b) in zip(st_i.T.tolist(), st_f.T.tolist(), strict=True)
        ]
        self._eviction_rows = [
            (time, s, victim, EVICTION_CAUSES[cause])
            for time, (s, victim, cause) in zip(ev_f.tolist(), ev_i.T.tolist(), strict=True)
        ]
        self._raw = None

    @property
    def columns(self) -> tuple[list[Any], ...]:
        """Per-request columns (``REQUEST_COLUMNS``), indexed by rid = 2 * session + turn."""
        if self._columns is None:
            self._materialize()
        return self._columns

    @property
    def histogram_nb(self) -> dict[tuple[int, int], int]:
        """{(n, b): decode steps at n running on bucket b}, sorted by (n, b)."""
        if self._histogram is None:
            steps_at, bucket_of, _ = self._hist
            self._histogram = {
                (n, bucket_of[n]): steps for n, steps in enumerate(steps_at.tolist()) if steps and n
            }
        return self._histogram

    @property
    def decode_steps(self) -> int:
        if self._counts is not None:
            return self._counts[2]
        return sum(self.histogram_nb.values())

    @property
    def prefill_steps(self) -> int:
        return 2 * self.sessions

    @property
    def padding_ratio(self) -> float:
        """sum(b - n) / sum(b) over decode steps (0 when nothing decoded)."""
        if self._counts is not None:
            padded, used = self._counts[3], self._counts[4]
            return (padded - used) / padded if padded else 0.0
        padded = sum(b * steps for (_, b), steps in self.histogram_nb.items())
        used = sum(n * steps for (n, _), steps in self.histogram_nb.items())
        return (padded - used) / padded if padded else 0.0

    @property
    def re_arrivals(self) -> int:
        return self.sessions

    @property
    def reuse_hits(self) -> int:
        if self._counts is not None:
            return self._counts[0]
        return sum(1 for c in self.columns[_CACHED][1::2] if c > 0)

    @property
    def computed_prefill_tokens(self) -> int:
        """Re-arrival computed prefill tokens: q = L1 - C summed (docs/DESIGN.md §4 rule 6).

        First requests never reuse anything; their tokens are in ``total_computed_tokens``.
        """
        if self._counts is not None:
            return self._counts[1]
        return sum(self.columns[_PROMPT][1::2]) - sum(self.columns[_CACHED][1::2])

    @property
    def total_computed_tokens(self) -> int:
        """Computed prefill tokens of every request (first requests and re-arrivals)."""
        return sum(self.columns[_PROMPT]) - sum(self.columns[_CACHED])

    @property
    def requests(self) -> tuple[RequestRecord, ...]:
        """Per-request records in (session, turn) order."""
        if self._records is None:
            records = []
            for rid, (
                arrival,
                admit,
                complete,
                prompt,
                cached,
                prefill,
                slot,
                tag,
                running,
            ) in enumerate(zip(*self.columns, strict=True)):
                evicted = tag != NO_OWNER
                records.append(
                    RequestRecord(
                        rid >> 1,
                        rid & 1,
                        arrival,
                        admit,
                        admit + prefill,
                        complete,
                        prompt,
                        cached,
                        prompt - cached,
                        prefill,
                        slot,
                        slot if evicted else None,
                        tag >> 1 if evicted else None,
                        tag & 1 if evicted else None,
                        running,
                    )
                )
            self._records = tuple(records)
        return self._records

    @property
    def stretches(self) -> tuple[Stretch, ...]:
        """Decode stretches in time order, for timelines and step reconstruction."""
        buckets = self.config.buckets
        if self._stretch_rows is None:
            self._materialize()
        return tuple(
            Stretch(n, select_bucket(n, buckets), steps, start, end)
            for n, steps, start, end in self._stretch_rows
        )

    @property
    def evictions(self) -> tuple[Eviction, ...]:
        """Every KV eviction in time order (admissions and dummy-block pre-evictions)."""
        if self._eviction_rows is None:
            self._materialize()
        prompt = self.columns[_PROMPT]  # a slot holds its request's prompt KV
        return tuple(
            Eviction(time, slot, tag >> 1, prompt[tag], cause, tag & 1)
            for time, slot, tag, cause in self._eviction_rows
        )

    def summary(self) -> dict[str, Any]:
        """The docs/DESIGN.md §4 summary; ``computed_prefill_tokens`` counts re-arrivals only."""
        return {
            "decode_steps": self.decode_steps,
            "prefill_steps": self.prefill_steps,
            "padding_ratio": self.padding_ratio,
            "reuse_hits": self.reuse_hits,
            "re_arrivals": self.re_arrivals,
            "computed_prefill_tokens": self.computed_prefill_tokens,
            "decode_s": self.decode_s,
            "prefill_s": self.prefill_s,
            "device_s": self.device_s,
            "interference_s": self.interference_s,
            "makespan_s": self.makespan_s,
            "histogram": self._labelled_histogram(),
        }

    def _labelled_histogram(self) -> dict[str, int]:
        """{"n->b": steps}; from the compiled core's per-n counts without the tuple keys."""
        if self._histogram is None and self._hist is not None:
            steps_at, _, labels = self._hist
            return {labels[n]: steps for n, steps in enumerate(steps_at.tolist()) if steps and n}
        return {_label(n, b): steps for (n, b), steps in self.histogram_nb.items()}


_LABELS: dict[tuple[int, int], str] = {}


def _label(n: int, b: int) -> str:
    """The summary's histogram key ``"n->b"``, formatted once per pair."""
    text = _LABELS.get((n, b))
    if text is None:
        text = _LABELS[(n, b)] = f"{n}->{b}"
    return text


_STEP_TABLES: dict[
    tuple[tuple[int, ...], int], tuple[Profile, list[float], list[int], Any, Any, list[str]]
] = {}


def _step_entry(
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
            [_label(n, b) for n, b in enumerate(buckets)],
        )
    return entry


def step_table(config: SimConfig, profile: Profile) -> tuple[list[float], list[int]]:
    """Decode step time and bucket for each n in 0..batch_size, cached per bucket set."""
    entry = _step_entry(config, profile)
    return entry[1], entry[2]


_PROFILE_MEMOS: dict[int, tuple[Profile, Callable[[int], float], Callable[[int, int], int]]] = {}
_PLAN_ARRAYS: dict[int, tuple[Any, tuple[list[int], list[int], list[float]]]] = {}


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


def plan_arrays(plan: Any, config: SimConfig) -> tuple[list[int], list[int], list[float]]:
    """Per request id (2*session + turn): prompt tokens and generation; per session: wait.

    Cached per plan object (the search runs each plan on 2,077 candidates); callers must
    treat the lists as read-only.
    """
    sessions = plan.sessions
    count = len(sessions)
    if config.fixed_arrivals is not None and len(config.fixed_arrivals) != count:
        raise SimConfigError(
            f"SimConfig field 'fixed_arrivals' has "
            f"{len(config.fixed_arrivals)} times for a plan of {count} "
            "sessions; give one re-arrival time per session"
        )
    entry = _PLAN_ARRAYS.get(id(plan))
    if entry is not None and entry[0] is plan and len(entry[1][2]) == count:
        return entry[1]
    prompt = [0] * (2 * count)
    gen = [0] * (2 * count)
    wait = [0.0] * count
    for i, s in enumerate(sessions):
        prompt[2 * i] = s.prompt_tokens
        prompt[2 * i + 1] = s.prompt_tokens + s.gen_tokens + s.appended_tokens
        gen[2 * i] = s.gen_tokens
        gen[2 * i + 1] = s.followup_gen_tokens
        wait[i] = s.tool_wait_s
    if len(_PLAN_ARRAYS) > 256:
        _PLAN_ARRAYS.clear()
    _PLAN_ARRAYS[id(plan)] = (plan, (prompt, gen, wait))
    return prompt, gen, wait


_REQUEST_TABLES: dict[int, tuple[Any, Profile, list[int], tuple[list[Any], ...]]] = {}


def request_tables(plan: Any, prompt: list[int], profile: Profile) -> tuple[list[Any], ...]:
    """Per request id: T(L) with nothing cached; for a follow-up also the tokens C its first
    request's KV gives and T(L - C); and the ``SlotPool.owner`` entry its admission writes.

    Each session sends two requests and a request's own slot is new, so the only KV a
    follow-up can reuse is its first request's: these are every prefill cost a plan can
    incur, computed once per plan and profile instead of on each of the search's 2,077
    candidates. Callers must treat the lists as read-only.
    """
    entry = _REQUEST_TABLES.get(id(plan))
    if entry is not None and entry[0] is plan and entry[1] is profile and entry[2] is prompt:
        return entry[3]
    prefill_time, reusable = profile_memos(profile)
    miss_cost = [prefill_time(tokens) for tokens in prompt]
    hit_reuse = [0] * len(prompt)
    hit_cost = list(miss_cost)
    for rid in range(1, len(prompt), 2):
        reuse = hit_reuse[rid] = reusable(prompt[rid - 1], prompt[rid])
        hit_cost[rid] = prefill_time(prompt[rid] - reuse)
    owners = [(rid, rid >> 1, tokens) for rid, tokens in enumerate(prompt)]
    if len(_REQUEST_TABLES) > 256:
        _REQUEST_TABLES.clear()
    tables = (miss_cost, hit_reuse, hit_cost, owners)
    _REQUEST_TABLES[id(plan)] = (plan, profile, prompt, tables)
    return tables


@dataclass(frozen=True)
class CoreInputs:
    """A plan as the compiled core's arrays, for one profile (``core_inputs``)."""

    ints: Any  # int64 (3, requests): prompt, gen, C a surviving first request gives
    floats: Any  # float64 (3, requests): tool wait per session (padded), T(L), T(L - C)
    prompt_list: list[int]
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
    # Lazy: simcore imports numba, 0.22 s measured; the Python core never needs it.
    from rearrival.model.simcore import fits_int64

    prompt, gen, wait = plan_arrays(plan, SimConfig())
    miss_cost, hit_reuse, hit_cost, _ = request_tables(plan, prompt, profile)
    padded_wait = list(wait) + [0.0] * (len(prompt) - len(wait))
    inputs = CoreInputs(
        np.array([prompt, gen, hit_reuse], dtype=np.int64).reshape(3, -1),
        np.array([padded_wait, miss_cost, hit_cost], dtype=np.float64).reshape(3, -1),
        prompt,
        fits_int64(sum(gen), len(prompt), 1),
    )
    if len(_CORE_INPUTS) > 256:
        _CORE_INPUTS.clear()
    _CORE_INPUTS[id(plan)] = (plan, profile, inputs)
    return inputs


def _fixed_array(config: SimConfig) -> Any:
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


_CORE: list[Any] = []  # [rearrival.model.simcore] once imported; [None] if numba is unusable


def compiled_core() -> Any:
    """The compiled core module, or None (with one warning) when numba cannot be imported."""
    if not _CORE:
        try:
            from rearrival.model import simcore
        except ImportError as exc:  # e.g. a numpy that numba does not support yet
            warnings.warn(
                f"compiled simulator core unavailable ({exc}); running the Python "
                "core, same results, about 20x slower",
                RuntimeWarning,
                stacklevel=3,
            )
            simcore = None
        _CORE.append(simcore)
    return _CORE[0]


# A process's first calls run the Python core: loading numba and the cached machine code
# costs about 1.2 s, more than a one-off `rearrival simulate` spends simulating. Both
# cores give the same bits (tests/test_sim_equivalence.py), so only the speed differs.
PYTHON_FIRST_CALLS = 32
CORES = ("auto", "compiled", "python")
_CALLS = [0]


def simulate(
    plan: Any, config: SimConfig, profile: Profile | None = None, core: str = "auto"
) -> SimResult:
    """Predict one plan on one configuration (paper Section IV); see the module docstring.

    ``plan`` is a ``rearrival.model.plans.Plan`` (anything with ``.sessions``); ``profile``
    defaults to the measured RBLN-CA25 profile. ``core``: "compiled" runs
    ``rearrival.model.simcore``; "python" the plain event loop below (same results, same bits);
    "auto" the Python core for a process's first ``PYTHON_FIRST_CALLS`` calls (unless the
    compiled core is already loaded), then the compiled one. The Python core also runs,
    with a warning, when numba is missing or the plan's token counts are too large for
    the compiled core's int64 keys.
    """
    if profile is None:
        profile = measured_profile()
    plan_arrays(plan, config)  # validates fixed_arrivals against the plan
    if core not in CORES:
        raise SimConfigError(f"simulate core {core!r}: use one of {', '.join(CORES)}")
    if core == "python" or (core == "auto" and not _CORE and _CALLS[0] < PYTHON_FIRST_CALLS):
        _CALLS[0] += 1
        return simulate_python(plan, config, profile)
    core_module = compiled_core()
    inputs = core_inputs(plan, profile)
    if (
        core_module is None
        or not inputs.compiled_ok
        or not core_module.fits_int64(0, len(inputs.prompt_list), config.slots)
    ):
        if core_module is not None:
            warnings.warn(
                "plan too large for the compiled core's int64 keys; running the "
                "Python core (same results, slower)",
                RuntimeWarning,
                stacklevel=2,
            )
        return simulate_python(plan, config, profile)
    _, _, bucket_of, step_s, bucket_array, labels = _step_entry(config, profile)
    batch = config.batch_size
    args = (
        inputs.ints,
        inputs.floats,
        _fixed_array(config),
        step_s,
        batch,
        config.slots,
        config.release == "deferred",
        batch if config.dummy_block == "pre-evict" else 0,
        batch if config.dummy_block == "reserved" else 0,
        bucket_array,
    )
    hist, prefill_total, interference, makespan, decode_total, *counts = core_module.run_summary(
        *args
    )
    return SimResult(
        config,
        len(inputs.prompt_list) // 2,
        None,
        decode_total,
        prefill_total,
        interference,
        makespan,
        None,
        None,
        None,
        tuple(counts),
        (core_module, args, inputs.prompt_list),
        (hist, bucket_of, labels),
    )


def simulate_python(plan: Any, config: SimConfig, profile: Profile) -> SimResult:
    """The event core in plain Python: the fallback of ``simulate`` and the readable
    statement of what ``rearrival.model.simcore`` compiles (same operations, same order)."""
    # Per-plan and per-configuration work is cached (plan_arrays, request_tables,
    # step_table) and the loop below works on locals.
    prompt, gen, wait = plan_arrays(plan, config)
    miss_cost, hit_reuse, hit_cost, owners = request_tables(plan, prompt, profile)
    step_s, bucket_of = step_table(config, profile)
    count = len(wait)
    requests = 2 * count
    batch = config.batch_size
    fixed = config.fixed_arrivals
    eps = ARRIVAL_TOLERANCE_S

    # KV slots: rearrival.model.kvslots is the model. SlotPool.admit, .finish and .pre_evict are
    # written out below on the pool's public state instead of called (as in the compiled
    # core): they run once per request of every simulation, and the calls with admit's
    # generic per-session look-up took about a quarter of a simulation.
    slots = config.slots
    pool = SlotPool(slots, config.release)
    deferred = pool.deferred
    release_deferred = pool.release_deferred
    pad_below = batch if config.dummy_block == "pre-evict" else 0  # dummy block when n < this
    reserve_below = batch if config.dummy_block == "reserved" else 0  # reserved when n < this
    # "free or evictable" is the cheap form of pool.can_secure()
    free = pool.free
    evictable = pool.evictable
    pending = pool.pending
    slot_owner = pool.owner
    slot_key = pool.key

    # Per-request columns indexed by rid; first token time and computed tokens are
    # derived when records are built, so the hot loop does not store them.
    arrival = [0.0] * requests
    admit_s = [0.0] * requests
    complete_s = [0.0] * requests
    cached = [0] * requests
    prefill_s = [0.0] * requests
    slot_of = [0] * requests
    evicted_tag = [NO_OWNER] * requests
    running_at = [0] * requests

    waiting = deque(range(0, requests, 2))  # every session starts at t = 0, index order
    arrivals: list[tuple[float, int]] = []  # heap of (follow-up arrival time, its rid)
    # Heap of ``decode clock at completion << shift | rid``: ordered like (clock, rid)
    # pairs, but plain ints, so a push builds no tuple and the heap compares ints.
    running: list[int] = []
    shift = requests.bit_length()
    rid_mask = (1 << shift) - 1
    hist = [0] * (batch + 1)
    stretches: list[list[Any]] = []
    evictions: list[tuple[float, int, int, str]] = []
    t = 0.0
    clock = 0  # decode steps so far
    prefill_total = 0.0
    interference = 0.0
    stretch_n = 0  # n of the stretch a decode step would extend (0: a prefill came after it)
    inf = math.inf
    due = inf  # earliest pending follow-up arrival

    while True:
        while due <= t + eps:
            waiting.append(heappop(arrivals)[1])
            due = arrivals[0][0] if arrivals else inf
        nrun = len(running)
        if waiting and nrun < batch:
            # The padding block's reserved slot (variant d) while 0 < n < batch_size.
            reserved = 1 if 0 < nrun < reserve_below else 0
            if len(free) - reserved + len(evictable) >= 1:
                rid = waiting.popleft()
                # SlotPool.admit: secure a slot (a free one, else the FIFO victims), apply
                # the deferred releases, look up, occupy. The look-up is one check: a
                # follow-up's only reusable KV is its first request's (request_tables), so
                # it hits if that request's owner entry still sits in its slot.
                if len(free) > reserved:
                    slot = heappop(free)
                else:
                    for _ in range(reserved - len(free)):  # the padding block's slot
                        slot = heappop(evictable) % slots
                        victim = slot_owner[slot][0]
                        slot_owner[slot] = None
                        heappush(free, slot)
                        evictions.append((t, slot, victim, EVICTED_BY_ADMISSION))
                    slot = heappop(evictable) % slots
                    victim = slot_owner[slot][0]
                    slot_owner[slot] = None  # its KV is gone, even if it was the prefix
                    evicted_tag[rid] = victim
                    evictions.append((t, slot, victim, EVICTED_BY_ADMISSION))
                if pending:
                    for finished in pending:
                        heappush(evictable, slot_key[finished])
                    pending.clear()
                if rid & 1 and slot_owner[slot_of[rid - 1]] is owners[rid - 1]:
                    cached[rid] = hit_reuse[rid]
                    cost = hit_cost[rid]
                else:
                    cost = miss_cost[rid]
                slot_owner[slot] = owners[rid]
                key = pool.next_key
                slot_key[slot] = key + slot
                pool.next_key = key + slots
                admit_s[rid] = t
                prefill_s[rid] = cost
                slot_of[rid] = slot
                running_at[rid] = nrun
                interference += nrun * cost
                prefill_total += cost
                t += cost
                stretch_n = 0
                steps = gen[rid] - 1
                if steps:
                    heappush(running, (clock + steps) << shift | rid)
                else:
                    complete_s[rid] = t
                    if deferred:  # SlotPool.finish
                        pending.append(slot)
                    else:
                        heappush(evictable, slot_key[slot])
                    if not rid & 1:
                        session = rid >> 1
                        when = t + wait[session] if fixed is None else max(fixed[session], t)
                        arrival[rid + 1] = when
                        heappush(arrivals, (when, rid + 1))
                        if when < due:
                            due = when
                continue
            release_deferred()
            if not nrun:
                continue
        elif not nrun:
            if due == inf:
                break
            t = due
            continue

        if nrun < pad_below and not free and evictable:  # SlotPool.pre_evict
            slot = heappop(evictable) % slots
            victim = slot_owner[slot][0]
            slot_owner[slot] = None
            heappush(free, slot)
            evictions.append((t, slot, victim, EVICTED_BY_DUMMY_BLOCK))
        dt = step_s[nrun]
        k = (running[0] >> shift) - clock  # steps to the next completion
        end = t + k * dt
        if waiting:
            # The head of the queue is blocked (batch full, or no slot even after the
            # releases): later arrivals queue behind it and change nothing before the
            # next completion, unless this step's release or dummy block freed a slot.
            if nrun < batch and len(free) - reserved + len(evictable) >= 1:
                k = 1
                end = t + dt
        elif due <= end + eps and nrun < batch:
            # The arrival is seen before the next completion: stop at the first boundary
            # t + j*dt that sees it, by the exact test the next loop applies (arrival <=
            # boundary + eps); it is admitted there. due > t + eps here, so the estimate
            # is >= 1 and the loops only correct its rounding.
            k = int((due - t) / dt) + 1
            while k > 1 and due <= t + (k - 1) * dt + eps:
                k -= 1
            while due > t + k * dt + eps:
                k += 1
            end = t + k * dt
        clock += k
        hist[nrun] += k
        if nrun == stretch_n:
            last = stretches[-1]
            last[1] += k
            last[3] = end
        else:
            stretches.append([nrun, k, t, end])
            stretch_n = nrun
        t = end
        done = (clock + 1) << shift  # heap entries below this complete now
        while running and running[0] < done:
            rid = heappop(running) & rid_mask
            complete_s[rid] = t
            if deferred:  # SlotPool.finish
                pending.append(slot_of[rid])
            else:
                heappush(evictable, slot_key[slot_of[rid]])
            if not rid & 1:
                session = rid >> 1
                when = t + wait[session] if fixed is None else max(fixed[session], t)
                arrival[rid + 1] = when
                heappush(arrivals, (when, rid + 1))
                if when < due:
                    due = when

    # One plain loop, not a comprehension plus a generator sum: ~5% of a simulation at
    # batch 16. The sum runs in n order, as before.
    histogram = {}
    decode_total = 0.0
    for n in range(1, batch + 1):
        steps = hist[n]
        if steps:
            histogram[(n, bucket_of[n])] = steps
            decode_total += steps * step_s[n]
    columns = (
        arrival,
        admit_s,
        complete_s,
        prompt,
        cached,
        prefill_s,
        slot_of,
        evicted_tag,
        running_at,
    )
    return SimResult(
        config,
        count,
        histogram,
        decode_total,
        prefill_total,
        interference,
        t,
        columns,
        stretches,
        evictions,
    )
