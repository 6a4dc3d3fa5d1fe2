"""The stages of the study on a real fleet (rules/fleet.smk; docs/DESIGN.md §18): its open
plans, the registration, one run per condition and replicate on a fresh fleet, the seal,
and the decisions from the per-run comparisons (``rearrival compare``).

A run refuses to start unless the registration is committed; a run that does not complete
fails its job with one line naming it, its record is kept under the failed-runs folder
(never sealed, never judged) and the next invocation reruns that run alone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from rearrival.atomic import atomic_directory, atomic_write_json, atomic_write_text
from rearrival.config.fleet import FleetStudySettings
from rearrival.config.study import StudyConfig
from rearrival.errors import StageError
from rearrival.judge.fleet_agreement import REQUESTS_FILE, SUMMARY_FILE
from rearrival.judge.fleet_study import (
    CONDITIONS_FILE,
    DECISIONS_FILE,
    ComparedRun,
    decision_tables,
    registered_order,
    table_csv,
)
from rearrival.measure.backends import BackendSettings, RunRequest, run_manifest
from rearrival.measure.fleet.backend import FleetSettings, run_fleet
from rearrival.model.plans.plan import Plan, load_plan, write_plan
from rearrival.model.plans.plangen import derive_seed
from rearrival.model.plans.pool import load_pool
from rearrival.model.plans.workloads_open import open_plan
from rearrival.prereg.fleet import CRITERIA, DESIGN, PREDICTIONS, register_fleet
from rearrival.prereg.registered import recorded_registration
from rearrival.prereg.registration import check_before_run, registered_json
from rearrival.workflow.run import keeping_unfinished, refuse_failed_runs


def fleet_of(cfg: StudyConfig) -> FleetStudySettings:
    if cfg.fleet is None:
        raise StageError(f"{cfg.source}: no fleet: section; add one (config/fleet.yaml)")
    return cfg.fleet


def plan_name(replicate: int) -> str:
    return f"r{replicate}.json"


def run_key(folder: Path) -> tuple[str, str, int]:
    """(``r<rep>/<condition>``, condition, replicate) of a run's or a comparison's folder,
    named ``<condition>_r<rep>`` (rules/common.smk)."""
    label, sep, rep = folder.name.rpartition("_r")
    if not sep or not rep.isdigit():
        raise StageError(f"{folder}: not a fleet run folder (<condition>_r<replicate>)")
    return f"r{rep}/{label}", label, int(rep)


def fleet_plan(cfg: StudyConfig, replicate: int, pool_path: Path | None = None) -> Plan:
    """Replicate ``replicate``'s open plan: Poisson starts from the pool (the section's,
    or the file the rule declares for it), seed + replicate (each replicate's seed is new,
    registered in plans.json)."""
    fleet = fleet_of(cfg)
    pool = load_pool(pool_path or fleet.pool)
    return open_plan(
        pool.sessions, pool.prefixes, fleet.rate, fleet.horizon_s, fleet.seed + replicate
    )


def write_fleet_plans(cfg: StudyConfig, pool: Path, out_dir: Path) -> list[Path]:
    with atomic_directory(out_dir) as staging:
        for rep in range(fleet_of(cfg).replicates):
            write_plan(fleet_plan(cfg, rep, pool), staging / plan_name(rep))
    return [out_dir / plan_name(rep) for rep in range(fleet_of(cfg).replicates)]


def read_fleet_plans(cfg: StudyConfig, plans_dir: Path) -> list[Plan]:
    return [load_plan(plans_dir / plan_name(rep)) for rep in range(fleet_of(cfg).replicates)]


def preregister_fleet(
    cfg: StudyConfig, plans_dir: Path, profile: Path, repo_dir: Path, out: Path
) -> Path:
    """Register (or find registered) the fleet study, its predictions priced by
    ``profile``; ``out`` is the record the runs name."""
    fleet = fleet_of(cfg)
    register_fleet(repo_dir, cfg, read_fleet_plans(cfg, plans_dir), profile, out.parent)
    written = out.parent / f"{fleet.study}.json"
    if written != out:
        raise StageError(f"{out}: the prereg record is written as {written}; name it so")
    return out


def run_fleet_condition(
    cfg: StudyConfig,
    label: str,
    replicate: int,
    *,
    plans_dir: Path,
    repo_dir: Path,
    out_dir: Path,
    failed_dir: Path,
    prereg_path: Path | None = None,
) -> Path:
    """One condition's run of one replicate on a fresh fleet, published under ``out_dir``
    only when complete; with ``prereg_path`` (the registration stage's record) that record
    must name a registration of the study on HEAD's history."""
    fleet = fleet_of(cfg)
    condition = fleet.condition(label)
    if prereg_path is not None:
        recorded_registration(repo_dir, fleet.study, prereg_path)
    prereg = check_before_run(repo_dir, fleet.study).manifest_entry()
    plan_path = plans_dir / plan_name(replicate)
    plan = load_plan(plan_path)
    settings = BackendSettings.from_study_config(cfg)
    request = RunRequest(
        study=fleet.study,
        plan=plan,
        plan_path=plan_path,
        configuration=cfg.configurations[condition.configuration],
        variant=fleet.variant,
        label=label,
        replicate=replicate,
        seed=derive_seed(cfg.study_seed, replicate, plan.n, 0, f"fleet-run-{label}"),
        condition_order=[label],
        prereg=prereg,
    )
    fleet_settings = FleetSettings(
        policy=condition.policy,
        replicas=fleet.replicas,
        vllm=settings.vllm,
        router_ready_timeout_s=fleet.router_ready_timeout_s,
    )
    with atomic_directory(out_dir) as staging, keeping_unfinished(staging, failed_dir, out_dir):
        run_fleet(
            plan,
            staging / label,
            configuration=request.configuration,
            settings=fleet_settings,
            variant=fleet.variant,
            seed=request.seed,
            manifest=run_manifest(settings, request),
            plan_source=str(plan_path),
        )
        refuse_failed_runs(staging, [label], failed_dir)
    return out_dir / label


def registered(repo_dir: Path, study: str) -> dict[str, Any]:
    """The design, criteria and predictions as committed (HEAD's registration of
    ``study``), keyed by file name."""
    found = registered_json(repo_dir, study, [DESIGN, CRITERIA, PREDICTIONS])
    if found is None:
        raise StageError(
            f"preregistration/{study}/: no committed fleet registration; run the "
            "fleet_prereg stage first"
        )
    return found[1]


def decide_fleet(
    cfg: StudyConfig, comparisons: dict[str, Path], repo_dir: Path, out_dir: Path
) -> list[dict[str, Any]]:
    """Every registered criterion decided per replicate on the observed counts of the
    comparisons (``comparisons``: ``r<rep>/<label>`` -> its `rearrival compare` folder);
    writes the decisions and one row per condition (``decision_tables``)."""
    files = registered(repo_dir, fleet_of(cfg).study)
    criteria = files[CRITERIA]["criteria"]
    compared = {
        key: ComparedRun(
            pd.read_parquet(folder / REQUESTS_FILE),
            json.loads((folder / SUMMARY_FILE).read_text()),
        )
        for key, folder in comparisons.items()
    }
    decisions, rows = decision_tables(
        criteria,
        files[PREDICTIONS]["conditions"],
        registered_order(files[DESIGN]),
        compared,
    )
    with atomic_directory(out_dir) as staging:
        atomic_write_text(staging / DECISIONS_FILE, table_csv(decisions))
        atomic_write_text(staging / CONDITIONS_FILE, table_csv(rows))
        atomic_write_json(staging / "criteria.json", {"criteria": criteria})
    return decisions
