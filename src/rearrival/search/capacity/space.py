"""The fleets a capacity search evaluates (docs/DESIGN.md §17 "Capacity"):
every configuration x fleet size x router, counted from the axes before any configuration
is built and refused over ``rearrival.limits.MAX_CAPACITY_FLEETS`` in one line.

vLLM configurations are every combination of block size, KV pool, ``max_num_seqs``, token
budget and capture-size set (as ``search --substrate vllm`` takes them); a pool defaults to
what the profile's memory holds (vLLM's own default, all memory) and is refused without a
memory block. Two filters remove configurations and are counted: a token budget below
``max_num_seqs`` (vLLM refuses to start) and a pool that cannot hold the pool's longest
request (vLLM would never finish it). RBLN configurations are explicit bucket sets or the
enumeration of ``search`` (batch sizes, at most ``max_buckets`` buckets), each with the KV
slots given (default: its batch size).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product
from typing import Any

from rearrival.errors import RearrivalError
from rearrival.limits import (
    CAPACITY_FLEETS_WHY,
    MAX_CAPACITY_FLEETS,
    MAX_REPLICAS,
    REPLICAS_WHY,
    LimitError,
    bound_problem,
    check_at_most,
)
from rearrival.model.configuration import RblnConfiguration, VllmConfiguration
from rearrival.model.fleet.routers import ROUTERS


class CapacitySpaceError(RearrivalError, ValueError):
    """A capacity space that cannot be searched; the message names the option and fix."""


@dataclass(frozen=True)
class Fleet:
    """One fleet of the search: R replicas of one configuration behind one router."""

    configuration: Any  # RblnConfiguration | VllmConfiguration
    replicas: int
    router: str

    @property
    def key(self) -> tuple[str, int, str]:
        return (self.configuration.id, self.replicas, self.router)


@dataclass(frozen=True)
class FleetAxes:
    """Fleet sizes and routers, checked."""

    replicas: tuple[int, ...]
    routers: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.replicas or min(self.replicas) < 1:
            raise CapacitySpaceError(
                f"option --replicas {list(self.replicas)}: give fleet sizes >= 1, e.g. 1,2"
            )
        check_at_most("--replicas", max(self.replicas), MAX_REPLICAS, REPLICAS_WHY)
        unknown = [r for r in self.routers if r not in ROUTERS]
        if not self.routers or unknown:
            raise CapacitySpaceError(
                f"option --routers {','.join(self.routers)}: use routers from {', '.join(ROUTERS)}"
            )

    @property
    def count(self) -> int:
        return len(self.replicas) * len(self.routers)


@dataclass(frozen=True)
class VllmKnobs:
    """The vLLM axes (None: the default of ``space_for_vllm``)."""

    block_sizes: tuple[int, ...]
    num_blocks: tuple[int, ...] | None
    max_num_seqs: tuple[int, ...]
    token_budgets: tuple[int, ...]
    capture_sets: tuple[str, ...]

    @property
    def count(self) -> int:
        pools = 1 if self.num_blocks is None else len(self.num_blocks)
        return (
            len(self.block_sizes)
            * pools
            * len(self.max_num_seqs)
            * len(self.token_budgets)
            * len(self.capture_sets)
        )


@dataclass(frozen=True)
class CapacitySpace:
    """The configurations in stable order, the fleet axes, and what the filters removed."""

    configurations: tuple[Any, ...]
    axes: FleetAxes
    enumerated: int
    excluded_by_budget: int = 0
    excluded_by_pool_too_small: int = 0

    @property
    def fleets(self) -> tuple[Fleet, ...]:
        return tuple(
            Fleet(c, r, router)
            for c in self.configurations
            for r in self.axes.replicas
            for router in self.axes.routers
        )

    def counts(self) -> dict[str, int]:
        return {
            "configurations_enumerated": self.enumerated,
            "excluded_by_budget": self.excluded_by_budget,
            "excluded_by_pool_too_small": self.excluded_by_pool_too_small,
            "configurations": len(self.configurations),
            "fleets": len(self.configurations) * self.axes.count,
        }


def check_fleet_bound(configurations: int, axes: FleetAxes) -> None:
    """Refuse a space of more fleets than ``MAX_CAPACITY_FLEETS`` before enumerating it."""
    problem = bound_problem(
        "the capacity space of configurations x replicas x routers",
        configurations * axes.count,
        MAX_CAPACITY_FLEETS,
        CAPACITY_FLEETS_WHY,
    )
    if problem is not None:
        raise LimitError(
            f"{problem}; give fewer values to the knob options, --replicas or --routers"
        )


def space_for_vllm(
    knobs: VllmKnobs, axes: FleetAxes, pool_plan: Any, memory_blocks: Any = None
) -> CapacitySpace:
    """The vLLM space (module docstring). ``memory_blocks(block_size)``: the most blocks
    the profile's memory holds, or None when it has no memory block."""
    from rearrival.model.simulator.vllm.inputs import vllm_inputs
    from rearrival.search.vllm.space import capture_sizes

    check_fleet_bound(knobs.count, axes)
    budget_out = small_out = 0
    kept: dict[str, VllmConfiguration] = {}
    for bs in knobs.block_sizes:
        pools = knobs.num_blocks or (_memory_pool(bs, memory_blocks),)
        needed = 1 + vllm_inputs(pool_plan, bs).blocks_needed()
        for blocks, seqs, tokens, rule in product(
            pools, knobs.max_num_seqs, knobs.token_budgets, knobs.capture_sets
        ):
            if tokens < seqs:
                budget_out += 1
            elif blocks < needed:
                small_out += 1
            else:
                cand = VllmConfiguration(
                    capture_sizes(rule, seqs, tokens),
                    seqs,
                    num_blocks=blocks,
                    block_size=bs,
                    max_num_batched_tokens=tokens,
                )
                kept.setdefault(cand.id, cand)
    space = CapacitySpace(tuple(kept.values()), axes, knobs.count, budget_out, small_out)
    if not space.configurations:
        raise CapacitySpaceError(_empty_vllm(budget_out, small_out, knobs, pool_plan))
    return space


def _memory_pool(block_size: int, memory_blocks: Any) -> int:
    holds = None if memory_blocks is None else memory_blocks(block_size)
    if holds is None:
        raise CapacitySpaceError(
            "option --num-blocks: give the KV pools in blocks (e.g. 600,1200); the step cost "
            "comes with no device memory to derive them from (a --profile with a memory "
            "block does)"
        )
    return holds


def _empty_vllm(budget_out: int, small_out: int, knobs: VllmKnobs, pool_plan: Any) -> str:
    if small_out:
        from rearrival.model.simulator.vllm.inputs import vllm_inputs

        need = min(1 + vllm_inputs(pool_plan, bs).blocks_needed() for bs in knobs.block_sizes)
        return (
            f"option --num-blocks: no pool holds the pool's longest request, which needs "
            f"{need:,} blocks (null block included); give larger --num-blocks"
        )
    return (
        f"option --max-num-batched-tokens {list(knobs.token_budgets)}: every budget is below "
        f"every --max-num-seqs {list(knobs.max_num_seqs)} and vLLM refuses to start; give "
        "budgets at least max_num_seqs"
    )


def space_for_rbln(
    bucket_sets: Sequence[tuple[int, ...]] | None,
    batch_sizes: Sequence[int] | None,
    max_buckets: int | None,
    slots: Sequence[int] | None,
    axes: FleetAxes,
) -> CapacitySpace:
    """The RBLN space: ``bucket_sets`` as given (batch size: the largest bucket, or the one
    ``batch_sizes`` value), else the enumeration of ``search`` over ``batch_sizes`` with at
    most ``max_buckets`` buckets; each with every ``slots`` value (default: batch size)."""
    from rearrival.search.candidates import candidates
    from rearrival.search.space import bucket_sets as count_sets

    slot_values: tuple[int | None, ...] = tuple(slots) if slots else (None,)
    if bucket_sets is not None:
        if batch_sizes is not None and len(batch_sizes) != 1:
            raise CapacitySpaceError(
                "options --buckets with --batch-sizes: give one batch size for the bucket "
                "sets, or leave --buckets out to enumerate bucket sets per batch size"
            )
        check_fleet_bound(len(bucket_sets) * len(slot_values), axes)
        batch = None if batch_sizes is None else batch_sizes[0]
        configs = [
            RblnConfiguration(b, batch or max(b), s) for b in bucket_sets for s in slot_values
        ]
    else:
        sizes = tuple(batch_sizes or (8,))
        most = max_buckets or 6
        count = sum(count_sets(b, most) for b in sizes) * len(slot_values)
        check_fleet_bound(count, axes)
        base = candidates(sizes, most)
        configs = [RblnConfiguration(c.buckets, c.batch_size, s) for c in base for s in slot_values]
    unique = tuple({c.id: c for c in configs}.values())
    return CapacitySpace(unique, axes, len(configs))
