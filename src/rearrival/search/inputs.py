"""The search and evaluation input plans of the search (paper V-A): their keys, how each
is generated from its own seed block, and their directory layout on disk."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rearrival.atomic import atomic_directory
from rearrival.config.search import SearchError, SearchSettings
from rearrival.config.study import StudyConfig, tool_table_for
from rearrival.model.plans.plan import Plan, load_plan, write_plan
from rearrival.model.plans.plangen import generate_plan
from rearrival.model.plans.workload import WorkloadPlans

INPUT_SETS = ("search", "evaluation")


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


def make_plan(
    key: PlanKey,
    settings: SearchSettings,
    study_seed: int,
    table: Any,
    workload: WorkloadPlans | None = None,
) -> Plan:
    """The plan of one key, from the one plan generator every study uses.

    Each input set keeps its own seed block (``block`` argument of ``generate_plan``) and
    numbers its (seed, block) pairs as replicates ``seed * blocks + block``, so the search
    and evaluation sets, and every study's plans, never share a plan seed (the generator
    also puts N in the seed, so the N levels are independent draws). A search over agent
    sessions (``settings.workload``) draws them with the same seeds from their own stream
    (``workload``, made once per stage so a trace is read once).
    """
    seeds = {
        "study_seed": study_seed,
        "replicate": key.seed * settings.blocks + key.block,
        "block": settings.seed_block(key.inputs),
        "tool_table": table,
    }
    if settings.workload is not None:
        return (workload or workload_plans(settings)).plan(key.n, **seeds)
    return generate_plan(key.n, **seeds)


def workload_plans(settings: SearchSettings) -> WorkloadPlans | None:
    """What draws a search's agent sessions, made once per stage (None: two-round)."""
    chosen = settings.workload
    return WorkloadPlans(chosen.spec, chosen.trace) if chosen is not None else None


def make_plans(cfg: StudyConfig, settings: SearchSettings) -> list[tuple[PlanKey, Plan]]:
    table = tool_table_for(cfg)
    workload = workload_plans(settings)
    return [
        (key, make_plan(key, settings, cfg.study_seed, table, workload))
        for key in plan_keys(settings)
    ]


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
