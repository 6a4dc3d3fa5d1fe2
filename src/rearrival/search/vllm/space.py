"""The space a vLLM search scores (docs/DESIGN.md §15 "Search and advice"): every
combination of block size, ``max_num_seqs``, KV pool, token budget and (GPU only)
capture-size set, counted before it is enumerated and bounded as the RBLN space is
(``rearrival.search.space``, ``rearrival.limits.MAX_CANDIDATES``).

KV pools. An explicit ``--num-blocks`` list is searched as given. Otherwise the pools
are derived from memory and the inputs: a geometric ladder of ``pool_sizes`` sizes from
the smallest pool that holds the longest request of the inputs (vLLM would never finish
it in less, and refuses to start a server whose ``max_model_len`` does not fit) up to
the smaller of the most the profile's memory holds (device memory less weights and
overhead, divided by the KV bytes of a block) and the pool that never evicts on the
search inputs (``VllmInputs.never_evicting_blocks``: more than that changes nothing).

Filters, applied in order and counted like the RBLN ones: a token budget below
``max_num_seqs`` (vLLM refuses to start), a pool that cannot hold the longest request,
and, with ``memory_filter``, a pool whose KV plus the weights and overhead do not fit
the devices. Sizes and budgets come from the axes alone, so the space is counted and
refused over the bound before any plan is drawn; the pool filters need the inputs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from rearrival.config.search import SearchError
from rearrival.limits import (
    BATCH_SIZE_WHY,
    KV_BLOCKS_WHY,
    MAX_BATCH_SIZE,
    MAX_CANDIDATES,
    MAX_KV_BLOCKS,
    LimitError,
    check_at_most,
)
from rearrival.model.buckets import sizes_problem
from rearrival.model.configuration import ConfigurationError, VllmConfiguration
from rearrival.model.cost.memory import DeviceMemory
from rearrival.model.cost.vllm_profile import VllmProfile
from rearrival.model.plans.plan import Plan
from rearrival.model.simulator.vllm.inputs import vllm_inputs
from rearrival.search.vllm.defaults import (
    BLOCK_SIZE,
    CAPTURE_DEFAULT,
    CAPTURE_NONE,
    MAX_NUM_SEQS,
    TOKEN_BUDGETS,
    default_capture_sizes,
)

POOL_SIZES = 8  # ladder length when none is given
# A ladder finer than this resolves nothing the hit-rate table can show (it is printed
# whole) and multiplies the simulations.
MAX_POOL_SIZES = 64
POOL_SIZES_WHY = "the hit-rate table prints every pool size"


@dataclass(frozen=True)
class VllmAxes:
    """The values searched on each knob; ``num_blocks`` None: pools derived from memory."""

    block_sizes: tuple[int, ...]
    max_num_seqs: tuple[int, ...]
    token_budgets: tuple[int, ...]
    capture_sets: tuple[str, ...]
    num_blocks: tuple[int, ...] | None = None
    pool_sizes: int = POOL_SIZES
    memory_filter: bool = True

    def __post_init__(self) -> None:
        for name in ("block_sizes", "max_num_seqs", "token_budgets"):
            values = getattr(self, name)
            if not values or any(not isinstance(v, int) or v < 1 for v in values):
                raise SearchError(f"vLLM search {name} {list(values)} must be integers >= 1")
        if self.num_blocks is not None:
            if not self.num_blocks or min(self.num_blocks) < 2:
                raise SearchError(
                    f"option --num-blocks {list(self.num_blocks)}: give pool sizes >= 2 "
                    "(block 0 is vLLM's null block)"
                )
            check_at_most("--num-blocks", max(self.num_blocks), MAX_KV_BLOCKS, KV_BLOCKS_WHY)
        check_at_most("--max-num-seqs", max(self.max_num_seqs), MAX_BATCH_SIZE, BATCH_SIZE_WHY)
        if self.pool_sizes < 2:
            raise SearchError(f"option --pool-sizes {self.pool_sizes}: give at least 2")
        check_at_most("--pool-sizes", self.pool_sizes, MAX_POOL_SIZES, POOL_SIZES_WHY)

    @classmethod
    def for_profile(cls, profile: VllmProfile, **given: Any) -> VllmAxes:
        """The axes given (None: not given) over the defaults of the profile's device: its
        vLLM block size, ``MAX_NUM_SEQS``, ``TOKEN_BUDGETS``, and vLLM's own capture sizes
        on a GPU (none on the CPU, where a capture-size set is refused)."""
        defaults = {
            "block_sizes": (BLOCK_SIZE[profile.device],),
            "max_num_seqs": MAX_NUM_SEQS,
            "token_budgets": TOKEN_BUDGETS,
            "capture_sets": (CAPTURE_DEFAULT if profile.device == "gpu" else CAPTURE_NONE,),
            "num_blocks": None,
            "pool_sizes": POOL_SIZES,
            "memory_filter": True,
        }
        chosen = {k: (given[k] if given.get(k) is not None else v) for k, v in defaults.items()}
        if profile.device == "cpu" and chosen["capture_sets"] != (CAPTURE_NONE,):
            raise SearchError(
                f"option --capture-sizes {';'.join(chosen['capture_sets'])}: the profile "
                f"{profile.name or profile.source} is a CPU profile and vLLM's CPU build "
                "captures no CUDA graphs; drop --capture-sizes or give a GPU profile"
            )
        return cls(**chosen)

    def pairs(self) -> tuple[int, int]:
        """(max_num_seqs x budget pairs vLLM starts with, pairs it refuses: budget below
        max_num_seqs)."""
        refused = sum(t < s for s in self.max_num_seqs for t in self.token_budgets)
        return len(self.max_num_seqs) * len(self.token_budgets) - refused, refused

    def pools(self) -> int:
        return self.pool_sizes if self.num_blocks is None else len(self.num_blocks)

    def enumerated(self) -> int:
        """Configurations the axes name (before duplicates are merged and pools filtered)."""
        per_pair = len(self.block_sizes) * self.pools() * len(self.capture_sets)
        return per_pair * len(self.max_num_seqs) * len(self.token_budgets)

    def check_bound(self) -> None:
        """Refuse a space over ``MAX_CANDIDATES`` before a plan is drawn."""
        started, _ = self.pairs()
        at_most = started * len(self.block_sizes) * self.pools() * len(self.capture_sets)
        if at_most > MAX_CANDIDATES:
            raise LimitError(
                f"the vLLM search space holds up to {at_most:,} configurations, over the "
                f"bound of {MAX_CANDIDATES:,} a search scores (docs/DESIGN.md §12); give "
                "fewer --max-num-seqs, --max-num-batched-tokens, --num-blocks or "
                "--capture-sizes values, or a lower --pool-sizes"
            )
        if started == 0:
            raise SearchError(
                f"no candidate left: every token budget {list(self.token_budgets)} is below "
                f"every max_num_seqs {list(self.max_num_seqs)} and vLLM refuses to start "
                "such a server; give --max-num-batched-tokens at least --max-num-seqs"
            )


def parse_capture_sets(text: str) -> tuple[str, ...]:
    """``--capture-sizes "none;default;1,2,4,8"``: sets separated by ';', each ``none``
    (eager), ``default`` (vLLM's own rule for each candidate's knobs) or sizes."""
    sets = []
    for part in (p.strip() for p in text.split(";")):
        if part in (CAPTURE_NONE, CAPTURE_DEFAULT):
            sets.append(part)
            continue
        try:
            sizes = tuple(int(v) for v in part.split(","))
        except ValueError:
            sizes = ()
        problem = sizes_problem(sizes, "capture sizes", "1,2,4,8") if sizes else "empty"
        if problem is not None:
            raise SearchError(
                f"option --capture-sizes {text!r}: each set is none, default or ascending "
                f"sizes such as 1,2,4,8, separated by ';' (set {part!r})"
            )
        sets.append(",".join(map(str, sizes)))
    return tuple(dict.fromkeys(sets))


def capture_sizes(rule: str, max_num_seqs: int, budget: int) -> tuple[int, ...]:
    """The sizes one capture set gives a candidate: vLLM drops sizes above the budget."""
    if rule == CAPTURE_NONE:
        return ()
    if rule == CAPTURE_DEFAULT:
        return default_capture_sizes(max_num_seqs, budget)
    return tuple(s for s in map(int, rule.split(",")) if s <= budget)


@dataclass(frozen=True)
class PoolRange:
    """What bounds the pools of one block size on these inputs: the smallest pool that
    holds the longest request, the pool that never evicts on the search inputs, and
    the most the memory holds (None: the profile gives no memory)."""

    block_size: int
    smallest: int
    never_evicting: int
    memory_holds: int | None

    def ladder(self, count: int) -> tuple[int, ...]:
        """``count`` sizes, geometric from ``smallest`` to the smaller of the other two
        (fewer when the range is narrow); empty when the memory cannot hold the smallest."""
        top = self.never_evicting
        if self.memory_holds is not None:
            top = min(top, self.memory_holds, MAX_KV_BLOCKS)
        return () if top < self.smallest else geometric(self.smallest, top, count)


def pool_range(
    block_size: int,
    every_plan: Sequence[Plan],
    search_plans: Sequence[Plan],
    memory: DeviceMemory | None,
) -> PoolRange:
    """The bounds of ``PoolRange`` for one block size (null block included)."""
    smallest = 1 + max(vllm_inputs(p, block_size).blocks_needed() for p in every_plan)
    ample = max(vllm_inputs(p, block_size).never_evicting_blocks() for p in search_plans)
    holds = None if memory is None else memory.max_slots()
    return PoolRange(block_size, smallest, max(ample, smallest), holds)


@dataclass(frozen=True)
class VllmSpace:
    """The searched configurations in stable order and how many each filter removed."""

    candidates: tuple[VllmConfiguration, ...]
    enumerated: int
    excluded_by_budget: int
    excluded_by_pool_too_small: int
    excluded_by_memory: int
    pools: dict[int, tuple[int, ...]]  # per block size, the pools searched
    ranges: dict[int, PoolRange]
    derived: bool  # pools derived from memory (no --num-blocks)
    memory_filter: bool

    def counts(self) -> dict[str, Any]:
        return {
            "enumerated": self.enumerated,
            "excluded_by_budget": self.excluded_by_budget,
            "excluded_by_pool_too_small": self.excluded_by_pool_too_small,
            "excluded_by_memory": self.excluded_by_memory,
            "memory_filter": self.memory_filter,
            "merged_duplicates": self.enumerated
            - self.excluded_by_budget
            - self.excluded_by_pool_too_small
            - self.excluded_by_memory
            - len(self.candidates),
            "searched": len(self.candidates),
            "pools": {str(bs): list(pools) for bs, pools in self.pools.items()},
            "pools_derived_from_memory": self.derived,
            "pool_ranges": {
                str(bs): {
                    "smallest_holding_the_longest_request": r.smallest,
                    "never_evicting_on_search_inputs": r.never_evicting,
                    "memory_holds": r.memory_holds,
                }
                for bs, r in self.ranges.items()
            },
        }


def block_budget(profile: VllmProfile, block_size: int) -> DeviceMemory | None:
    """The devices' memory in KV blocks of ``block_size`` (None: no memory block)."""
    memory = profile.memory
    return None if memory is None else memory.budget(profile.kv_bytes_per_block(block_size))


def build_space(
    axes: VllmAxes,
    profile: VllmProfile,
    every_plan: Sequence[Plan],
    search_plans: Sequence[Plan],
) -> VllmSpace:
    """Enumerate and filter the space (module docstring) on these inputs; refuses an
    empty space, naming the filter that removed the last configuration."""
    axes.check_bound()
    if axes.num_blocks is None and profile.memory is None:
        raise SearchError(
            f"{profile.name or profile.source}: the vLLM profile has no memory block, so "
            "KV pools cannot be derived from memory; give the pools to search with "
            "--num-blocks (e.g. 512,1024,2048) or add a memory block to the profile "
            "(docs/DESIGN.md §15)"
        )
    ranges = {
        bs: pool_range(bs, every_plan, search_plans, block_budget(profile, bs))
        for bs in axes.block_sizes
    }
    counted = {"budget": 0, "small": 0, "memory": 0}
    pools: dict[int, tuple[int, ...]] = {}
    kept: dict[str, VllmConfiguration] = {}
    for bs in axes.block_sizes:
        given = axes.num_blocks or ranges[bs].ladder(axes.pool_sizes)
        pools[bs] = tuple(sorted(set(given)))
        budget = block_budget(profile, bs)
        for blocks in pools[bs]:
            for seqs in axes.max_num_seqs:
                for tokens in axes.token_budgets:
                    for rule in axes.capture_sets:
                        reason = _excluded(blocks, seqs, tokens, ranges[bs], budget, axes)
                        if reason is not None:
                            counted[reason] += 1
                            continue
                        cand = _candidate(rule, seqs, blocks, bs, tokens)
                        kept.setdefault(cand.id, cand)
    per_pool = len(axes.max_num_seqs) * len(axes.token_budgets) * len(axes.capture_sets)
    space = VllmSpace(
        tuple(sorted(kept.values(), key=_order)),
        per_pool * sum(len(p) for p in pools.values()),
        counted["budget"],
        counted["small"],
        counted["memory"],
        pools,
        ranges,
        axes.num_blocks is None,
        axes.memory_filter and profile.memory is not None,
    )
    if not space.candidates:
        raise SearchError(empty_message(space, axes))
    return space


def _excluded(
    blocks: int,
    seqs: int,
    tokens: int,
    pools: PoolRange,
    budget: DeviceMemory | None,
    axes: VllmAxes,
) -> str | None:
    if tokens < seqs:
        return "budget"
    if blocks < pools.smallest:
        return "small"
    if axes.memory_filter and budget is not None and not budget.fits(blocks):
        return "memory"
    return None


def _candidate(rule: str, seqs: int, blocks: int, bs: int, tokens: int) -> VllmConfiguration:
    try:
        return VllmConfiguration(
            capture_sizes(rule, seqs, tokens),
            seqs,
            num_blocks=blocks,
            block_size=bs,
            max_num_batched_tokens=tokens,
        )
    except ConfigurationError as exc:  # a knob over its bound (rearrival.limits)
        raise SearchError(f"vLLM search space: {exc}") from None


def _order(cand: VllmConfiguration) -> tuple[Any, ...]:
    return (
        cand.block_size,
        cand.num_blocks,
        cand.batch_size,
        cand.max_num_batched_tokens,
        cand.buckets,
    )


def empty_message(space: VllmSpace, axes: VllmAxes) -> str:
    """Why no configuration is left, naming the filter and how to relax it."""
    smallest = min(r.smallest for r in space.ranges.values())
    if space.excluded_by_memory == 0 or space.excluded_by_pool_too_small >= space.enumerated:
        holds = [r.memory_holds for r in space.ranges.values() if r.memory_holds is not None]
        memory = f"; the memory holds {max(holds):,} blocks" if holds else ""
        return (
            f"no candidate left: the longest request of the inputs needs a pool of "
            f"{smallest:,} blocks (null block included) and no searched pool holds it"
            f"{memory}; give larger --num-blocks, or shorten the sessions (--max-model-len "
            "or --token-scale)"
        )
    return (
        f"no candidate left: the memory filter removed all {space.excluded_by_memory:,} "
        "pools large enough for the inputs; give smaller --num-blocks, a profile with more "
        "device memory, or --no-memory-filter"
    )


def with_pool(cand: VllmConfiguration, num_blocks: int) -> VllmConfiguration:
    """The same knobs on another pool (the per-pool hit-rate table)."""
    return replace(cand, num_blocks=num_blocks, name="")


def ladder_text(space: VllmSpace) -> str:
    """Where the pools came from, in one phrase for the summary and the advice."""
    parts = []
    for bs, pools in space.pools.items():
        r = space.ranges[bs]
        if space.derived:
            held = "no memory limit" if r.memory_holds is None else f"{r.memory_holds:,}"
            parts.append(
                f"block size {bs}: {len(pools)} pools from {pools[0]:,} (the longest request) "
                f"to {pools[-1]:,} blocks (never evicting on the search inputs: "
                f"{r.never_evicting:,}; memory holds {held})"
            )
        else:
            parts.append(f"block size {bs}: pools {', '.join(f'{p:,}' for p in pools)}")
    return "; ".join(parts)


def geometric(low: int, high: int, count: int) -> tuple[int, ...]:
    """``count`` integers from ``low`` to ``high`` in equal ratios (both ends kept)."""
    if high <= low:
        return (low,)
    step = math.log(high / low) / (count - 1)
    return tuple(sorted({round(low * math.exp(step * i)) for i in range(count)} | {low, high}))
