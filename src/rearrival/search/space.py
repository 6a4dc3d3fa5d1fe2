"""The size of a search before it is enumerated or simulated (docs/DESIGN.md §12,
"Bounds"; paper V-A): how many candidates the space holds, how many each filter removes,
and how much memory scoring them will take, so a mistyped option is refused in one line
in well under a second instead of growing until the kernel kills it.

Counting. For batch size B the candidates are the bucket sets {1, B} plus k of the B - 2
integers between them, k <= max_buckets - 2: sum over k of C(B - 2, k) sets (one, {1},
for B = 1). Both filters decide by size alone: the compile budget by the bucket count
(the authors' compile-time fit is linear in it, ``Profile.compile_seconds``) and the
memory filter by the batch size (a candidate's KV slots are its batch size,
``DeviceMemory.fits``). So every count is a sum of binomials, and only the batch sizes
and bucket counts that both filters leave are ever enumerated
(``rearrival.search.candidates.candidates``).

Memory. ``Footprint`` estimates the peak resident memory of scoring a space on a set of
plans, as the sum of measured costs (each coefficient is rounded up from the peak RSS
measured on the development machine for nine spaces from the paper's 2,077 candidates on
54 plans to 32,230 candidates on 108 plans, N up to 1,024 and batch sizes up to 1,024;
``benchmarks/bench_search.py`` prints the estimate beside the measured peak of its
fleet-scale search): the process itself, each (candidate, plan) row of the results and
their ranking, each candidate's tables (one entry per batch slot), each session round of
the input plans, and each worker process the pool starts. A space over
``MAX_CANDIDATES`` or an estimate over ``MAX_MEMORY_GIB`` is refused, naming the bound.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rearrival.config.search import SearchError, SearchSettings
from rearrival.limits import (
    MAX_BATCH_SIZE,
    MAX_CANDIDATES,
    MAX_MEMORY_GIB,
    LimitError,
    check_at_most,
)
from rearrival.model.cost.memory import DeviceMemory
from rearrival.model.cost.profile import GIB, Profile
from rearrival.model.plans.plan import Plan

# Peak-memory coefficients (module docstring). Measured: a process with the search's
# imports and the compiled core 0.25-0.34 GiB; 300-354 B per (candidate, plan) row; about
# 1 KiB per candidate plus 48 B per batch slot (bucket map and step-time rows, the bucket
# tuple); 270 B per session round of two-round plans; a worker 0.25 GiB plus its
# candidates' tables (0.34 GiB for the fleet search's 32,230).
PROCESS_GIB = 0.35
PAIR_BYTES = 360
CANDIDATE_BYTES = 1024
CANDIDATE_SLOT_BYTES = 64
ROUND_BYTES = 300
WORKER_GIB = 0.30
BATCH_SIZES_WHY = (
    "a plan of at most 1,024 sessions never fills a larger batch, and the shipped devices "
    "hold 49 slots"
)


def bucket_sets(batch_size: int, most_buckets: int) -> int:
    """Candidates of one batch size with at most ``most_buckets`` buckets, 1 and
    batch_size included: sum over k <= most_buckets - 2 of C(batch_size - 2, k)."""
    if batch_size == 1:
        return int(most_buckets >= 1)
    between, top = batch_size - 2, min(most_buckets - 2, batch_size - 2)
    if top < 0:
        return 0
    if top == between:
        return 2**between
    term, total = 1, 1
    for k in range(top):  # C(n, k + 1) = C(n, k) (n - k) / (k + 1), exact in integers
        term = term * (between - k) // (k + 1)
        total += term
    return total


def buckets_within_budget(profile: Profile, most: int) -> int:
    """The most buckets (at most ``most``) a candidate can have and still compile within
    the budget (paper V-A); 0 when not even one does."""
    per_graph = profile.compile_per_graph_s
    if per_graph <= 0:
        fits = profile.compile_seconds(1) <= profile.compile_budget_s
        return most if fits else 0
    guess = (profile.compile_budget_s - profile.compile_intercept_s) / per_graph - 1
    count = max(0, min(most, math.floor(guess)))
    while count < most and profile.compile_seconds(count + 1) <= profile.compile_budget_s:
        count += 1
    while count > 0 and profile.compile_seconds(count) > profile.compile_budget_s:
        count -= 1
    return count


@dataclass(frozen=True)
class SpaceSize:
    """A candidate space counted, not enumerated: per batch size how many bucket sets it
    holds and how many each filter removes (the compile budget first, then device
    memory), and what is left to search."""

    batch_sizes: tuple[int, ...]
    max_buckets: int
    memory_filter: bool
    per_batch_size: tuple[int, ...]  # enumerated, in batch_sizes order
    within_budget: tuple[int, ...]  # of those, within the compile budget
    fits_memory: tuple[bool, ...]  # whether the batch size's slots fit the devices
    budget_buckets: int  # the most buckets within the compile budget
    compile_budget_s: float
    max_slots: int
    per_device_gib: float

    @property
    def enumerated(self) -> int:
        return sum(self.per_batch_size)

    @property
    def excluded_by_compile_budget(self) -> int:
        return self.enumerated - sum(self.within_budget)

    @property
    def excluded_by_memory(self) -> int:
        if not self.memory_filter:
            return 0
        pairs = zip(self.within_budget, self.fits_memory, strict=True)
        return sum(n for n, fits in pairs if not fits)

    @property
    def searched(self) -> int:
        return sum(self.within_budget) - self.excluded_by_memory

    @property
    def searched_batch_sizes(self) -> tuple[int, ...]:
        """The batch sizes with candidates left after both filters."""
        rows = zip(self.batch_sizes, self.within_budget, self.fits_memory, strict=True)
        return tuple(b for b, n, fits in rows if n and (fits or not self.memory_filter))

    @property
    def searched_max_buckets(self) -> int:
        """The bucket cap the enumeration of the searched space uses."""
        return min(self.max_buckets, self.budget_buckets)

    def filter_counts(self) -> dict[str, int]:
        """How many candidates each filter removed (the summary's and Table S8's counts)."""
        return {
            "excluded_by_compile_budget": self.excluded_by_compile_budget,
            "excluded_by_memory": self.excluded_by_memory,
        }

    def check_bound(self) -> None:
        """Refuse a space too large to score, before enumerating it."""
        if self.searched > MAX_CANDIDATES:
            sizes = ",".join(map(str, self.batch_sizes))
            raise LimitError(
                f"the search space holds {self.searched:,} candidates (batch sizes {sizes}, "
                f"at most {self.max_buckets} buckets), over the bound of {MAX_CANDIDATES:,} "
                "a search scores (docs/DESIGN.md §12); lower --max-buckets or give fewer or "
                "smaller --batch-sizes"
            )

    def empty_message(self) -> str:
        """Why no candidate is left: the compile budget (checked first) or device memory."""
        sizes = ",".join(map(str, self.batch_sizes))
        if self.excluded_by_compile_budget == self.enumerated:
            return (
                f"no candidate left: the compile budget ({self.compile_budget_s:g} s) removed "
                f"all {self.enumerated:,} of batch sizes {sizes} with max_buckets "
                f"{self.max_buckets}; lower --max-buckets"
            )
        return (
            f"no candidate left: the memory filter removed all {self.excluded_by_memory:,} "
            f"within the compile budget (batch sizes {sizes}; at most {self.max_slots} KV "
            f"slots fit {self.per_device_gib:g} GiB per device); use batch sizes <= "
            f"{self.max_slots} or --no-memory-filter"
        )


def space_size(
    batch_sizes: Iterable[int],
    max_buckets: int,
    profile: Profile,
    memory: DeviceMemory,
    memory_filter: bool = True,
) -> SpaceSize:
    """Count the space of ``batch_sizes`` x at most ``max_buckets`` buckets and what
    each filter removes; a batch size over ``MAX_BATCH_SIZE`` is refused first."""
    sizes = tuple(sorted(set(batch_sizes)))
    if not sizes or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in sizes):
        raise SearchError(f"search.batch_sizes {list(batch_sizes)} must be integers >= 1")
    if isinstance(max_buckets, bool) or not isinstance(max_buckets, int) or max_buckets < 2:
        raise SearchError(
            f"search.max_buckets {max_buckets!r} must be an "
            "integer >= 2: it counts 1 and batch_size too"
        )
    check_at_most("--batch-sizes (search.batch_sizes)", sizes[-1], MAX_BATCH_SIZE, BATCH_SIZES_WHY)
    budget = buckets_within_budget(profile, max_buckets)
    return SpaceSize(
        batch_sizes=sizes,
        max_buckets=max_buckets,
        memory_filter=memory_filter,
        per_batch_size=tuple(bucket_sets(b, max_buckets) for b in sizes),
        within_budget=tuple(bucket_sets(b, budget) for b in sizes),
        fits_memory=tuple(memory.fits(b) for b in sizes),
        budget_buckets=budget,
        compile_budget_s=profile.compile_budget_s,
        max_slots=memory.max_slots(),
        per_device_gib=memory.per_device_gib,
    )


@dataclass(frozen=True)
class Footprint:
    """The estimated peak memory of scoring ``candidates`` (the widest with batch size
    ``batch_size``) on ``plans`` plans holding ``rounds`` session rounds, with
    ``workers`` worker processes (0: in this process)."""

    candidates: int
    batch_size: int
    plans: int
    rounds: int
    workers: int

    @property
    def pairs(self) -> int:
        return self.candidates * self.plans

    def candidate_gib(self) -> float:
        per = CANDIDATE_BYTES + CANDIDATE_SLOT_BYTES * (self.batch_size + 1)
        return self.candidates * per / GIB

    def gib(self) -> float:
        main = (
            PROCESS_GIB
            + (self.pairs * PAIR_BYTES + self.rounds * ROUND_BYTES) / GIB
            + self.candidate_gib()
        )
        return main + self.workers * (WORKER_GIB + self.candidate_gib())

    def check(self) -> None:
        """Refuse an estimate over ``MAX_MEMORY_GIB`` in one line naming the bound and the
        option that would bring it down most."""
        need = self.gib()
        if need <= MAX_MEMORY_GIB:
            return
        alone = Footprint(self.candidates, self.batch_size, self.plans, self.rounds, 0)
        fix = (
            f"use --workers 1 (about {alone.gib():.2f} GiB)"
            if self.workers and alone.gib() <= MAX_MEMORY_GIB
            else "give fewer --n, --batch-sizes or a lower --max-buckets"
        )
        raise LimitError(
            f"scoring {self.candidates:,} candidates on {self.plans:,} plans "
            f"({self.rounds:,} session rounds) with {self.workers} worker processes needs "
            f"about {need:.2f} GiB, over the bound of {MAX_MEMORY_GIB:g} GiB "
            f"(docs/DESIGN.md §12); {fix}"
        )


def plan_footprint(
    candidates: int, batch_size: int, plans: Sequence[Plan], workers: int
) -> Footprint:
    """The footprint of scoring on plans already in hand."""
    rounds = sum(len(s.rounds) for plan in plans for s in plan.sessions)
    return Footprint(candidates, batch_size, len(plans), rounds, workers)


def planned_footprint(
    candidates: int, batch_size: int, settings: SearchSettings, workers: int
) -> Footprint:
    """The footprint of a generated search before its plans are drawn: search and
    evaluation inputs, N x seeds x blocks each, N sessions of the workload's most rounds
    (two for the paper's sessions; sessions sampled from a trace share the trace's rounds,
    so count two, and the check on the drawn plans counts them exactly)."""
    spec = settings.workload.spec if settings.workload is not None else None
    per_session = spec.rounds[1] if spec is not None else 2
    copies = 2 * settings.seeds * settings.blocks
    rounds = copies * sum(settings.n) * per_session
    return Footprint(candidates, batch_size, copies * len(settings.n), rounds, workers)
