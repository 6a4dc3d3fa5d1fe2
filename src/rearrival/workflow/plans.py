"""The plans stage (rules/plans.smk, docs/DESIGN.md §10): every plan of a study, one per
(N, replicate), from the study's seed block, and reading them back for later stages.
"""

from __future__ import annotations

from pathlib import Path

from rearrival.atomic import atomic_directory
from rearrival.config.errors import StudyConfigError
from rearrival.config.study import Study, StudyConfig, tool_table_for
from rearrival.errors import StageError
from rearrival.model.plans.plan import Plan, load_plan, write_plan
from rearrival.model.plans.plangen import generate_plan
from rearrival.model.plans.tools import ToolTable
from rearrival.model.plans.trace_plans import TraceError
from rearrival.model.plans.workload import WorkloadPlans


def plan_file(plans_dir: Path, n: int, replicate: int) -> Path:
    return plans_dir / f"n{n}_r{replicate}.parquet"


def study_plan(
    cfg: StudyConfig,
    study: Study,
    n: int,
    replicate: int,
    table: ToolTable,
    workload: WorkloadPlans | None = None,
) -> Plan:
    """The plan of one (N, replicate): the study's own seed block keeps seeds disjoint;
    a study with a workload draws agent sessions from its spec or its trace
    (``workload``, made once per stage so a trace is read once)."""
    seeds = {"study_seed": cfg.study_seed, "replicate": replicate, "block": study.seed_block}
    if workload is not None:
        return workload.plan(n, **seeds, tool_table=table)
    return generate_plan(n, **seeds, tool_table=table)


def make_plans(cfg: StudyConfig, study_name: str, out_dir: Path) -> list[Path]:
    """Write every plan of a study into ``out_dir`` (published as a whole, atomically)."""
    study = cfg.study(study_name)
    table = tool_table_for(cfg)
    workload = study.workload
    sessions = WorkloadPlans(workload.spec, workload.trace) if workload is not None else None
    written = []
    with atomic_directory(out_dir) as staging:
        for n in study.n:
            for replicate in range(cfg.replicates):
                try:
                    plan = study_plan(cfg, study, n, replicate, table, sessions)
                except TraceError as exc:
                    raise StudyConfigError(
                        f"{cfg.source}: studies.{study.name}.workload.path {exc}"
                    ) from None
                write_plan(plan, plan_file(staging, n, replicate))
                written.append(plan_file(out_dir, n, replicate))
    return written


def read_study_plan(plans_dir: Path, n: int, replicate: int) -> Plan:
    path = plan_file(plans_dir, n, replicate)
    if not path.exists():
        raise StageError(
            f"{path}: plan missing; re-run the plans stage (snakemake results/plans/<study>)"
        )
    return load_plan(path)
