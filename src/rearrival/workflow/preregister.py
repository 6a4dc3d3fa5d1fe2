"""The preregister stage (rules/preregister.smk, docs/DESIGN.md §8): commit a study's design,
criteria, plan registry and predictions before any run, and refuse a config that
contradicts what is already registered (the Snakefile checks before scheduling a job).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from rearrival.atomic import is_staging
from rearrival.config.backends import without_serving_defaults
from rearrival.config.study import (
    SELECTED,
    Study,
    StudyConfig,
    resolve_configurations,
    tool_table_for,
)
from rearrival.errors import StageError
from rearrival.judge.predictions import predicted_ratios
from rearrival.model.cost.profile import profile_bytes, profile_sha256
from rearrival.parquet import read_frame
from rearrival.prereg.registration import (
    PROFILE_FILE,
    Signing,
    open_repo,
    register,
    registered_json,
    registrations,
)
from rearrival.prereg.witness import publish
from rearrival.vocabulary import BACKEND_STAGES, PREDICTION, RULE_SETS, VLLM, VLLM_RULES
from rearrival.workflow.plans import read_study_plan
from rearrival.workflow.profile import stage_profile, substrate_of


def plan_registry(cfg: StudyConfig, study: Study, plans_dir: Path) -> dict[str, Any]:
    """Hash and seed of every plan a study will run (audited against run manifests)."""
    plans = []
    for n in study.n:
        for replicate in range(cfg.replicates):
            plan = read_study_plan(plans_dir, n, replicate)
            plans.append(
                {"replicate": replicate, "n": n, "seed": plan.meta.seed, "sha256": plan.sha256()}
            )
    return {"validation": study.kind == "validation", "plans": plans}


def rule_set_entry(rule_set: str) -> str:
    """The registered predictions' ``simulator``: the rule set's name first (read back by
    ``rearrival.prereg.registered``), then what it is."""
    if rule_set == VLLM_RULES:
        return f"{VLLM_RULES} (vLLM 0.32.0's scheduler rules, docs/DESIGN.md §15)"
    release, dummy_block = RULE_SETS[rule_set]
    return f"{rule_set} (release={release}, dummy_block={dummy_block})"


def prediction_record(
    predictions: pd.DataFrame, study: Study, rule_set: str = PREDICTION
) -> dict[str, Any]:
    """The predictions a study commits to: replicate-summed ratios per condition, under
    the backend's registered rule set (``BackendStages.prediction``)."""
    sums = predicted_ratios(predictions, study.baseline, rule_set)
    per_plan = predictions[predictions["simulator"] == rule_set]
    return {
        "simulator": rule_set_entry(rule_set),
        "ratios": [
            {
                "n": int(r.n),
                "configuration": r.configuration,
                "variant": r.variant,
                "device_s": float(r.device_s),
                "ratio_pred": float(r.ratio_pred),
                "reuse_hits": int(r.reuse_hits),
                "re_arrivals": int(r.re_arrivals),
            }
            for r in sums.itertuples()
        ],
        "per_plan": [
            {
                "n": int(r.n),
                "replicate": int(r.replicate),
                "configuration": r.configuration,
                "variant": r.variant,
                "plan_sha256": r.plan_sha256,
                "device_s": float(r.device_s),
            }
            for r in per_plan.itertuples()
        ],
    }


def registered_design(cfg: StudyConfig, study: Study) -> dict[str, Any]:
    """The part of a study's registered design the config alone fixes: everything in
    design.json except the one-line description (report text), the profile version and
    the search's pick (a result, known only after the search ran). The Snakefile passes
    it as a param, so an edit reruns the study's jobs, and compares it with the
    registration, so an edit after registering is refused (:func:`design_changes`).
    A study of agent sessions also registers its ``workload`` (left out for the paper's
    two-round sessions, so their registrations keep their bytes), a study on vLLM what
    its servers serve."""
    design = {
        "study": study.name,
        "kind": study.kind,
        "backend": cfg.backend,
        "rule": study.rule,
        "amends": study.amends,
        "n": list(study.n),
        "replicates": cfg.replicates,
        "variants": list(study.variants),
        "repeats": study.repeats,
        "seed_block": study.seed_block,
        "study_seed": cfg.study_seed,
        "tool_table": tool_table_for(cfg).source,
        "prediction_profile": cfg.measurement.profile,
        "emulator_truth": cfg.measurement.emulator_truth,
        "configurations": {
            name: cfg.configurations[name].as_dict()
            for name in study.configurations
            if name != SELECTED
        },
    }
    if study.workload is not None:
        design["workload"] = study.workload.as_dict()
    if cfg.backend == VLLM:  # what every run's server serves (left out elsewhere)
        served = cfg.vllm
        design["vllm"] = {
            "model": served.model,
            "max_model_len": served.max_model_len,
            "device": served.device,
        } | without_serving_defaults(
            {
                "extra_args": list(served.extra_args),
                "async_scheduling": served.async_scheduling,
                "tensor_parallel_size": served.tensor_parallel_size,
            }
        )  # how the server schedules and shards is the design too (a default is left out)
    return design


def study_design(
    cfg: StudyConfig, study: Study, selected_path: Path | None, profile_path: Path | None
) -> dict[str, Any]:
    """What the study compares, on which backend, with which inputs: fixed before runs."""
    calibration = cfg.measurement
    configurations = resolve_configurations(cfg, study, selected_path)
    return registered_design(cfg, study) | {
        "description": study.description,
        "profile": stage_profile(calibration, profile_path, substrate=substrate_of(cfg)).version,
        # the profile predictions used; its bytes are committed beside (profile.yaml)
        "profile_sha256": profile_sha256(profile_path),
        "configurations": {name: c.as_dict() for name, c in configurations.items()},
    }


def _flat(value: Any, prefix: str) -> dict[str, Any]:
    """Nested mappings as dotted keys, so a change is named down to the leaf."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, inner in value.items():
            out |= _flat(inner, f"{prefix}.{key}")
        return out
    return {prefix: value}


def design_changes(
    cfg: StudyConfig,
    study: Study,
    registered_design_json: dict[str, Any],
    registered_criteria: dict[str, Any],
) -> list[str]:
    """``key: registered -> config`` for every registered design or criteria value the
    config now contradicts (the search's pick and the description are not compared)."""
    registered = {key: registered_design_json.get(key) for key in registered_design(cfg, study)}
    registered["configurations"] = {
        name: value
        for name, value in (registered["configurations"] or {}).items()
        if name != SELECTED
    }
    old = _flat(registered, "design") | _flat(registered_criteria, "decision")
    new = _flat(registered_design(cfg, study), "design") | _flat(cfg.decision.to_dict(), "decision")
    keys = sorted(set(old) | set(new))
    missing = "(absent)"
    return [
        f"{key.removeprefix('design.')}: registered {old.get(key, missing)!r}, "
        f"config {new.get(key, missing)!r}"
        for key in keys
        if old.get(key, missing) != new.get(key, missing)
    ]


def refuse_changed_designs(cfg: StudyConfig, repo_dir: Path, runs_root: Path) -> None:
    """Refuse, before any job is scheduled, a config that contradicts a registration.

    Registered files never change (docs/DESIGN.md §8), so re-running a registered study under an
    edited design or criteria could only end in a refused prereg commit or, worse, in
    runs judged by criteria they were not registered under. One message per study names
    the changed keys, the registering commit and the two ways forward.
    """
    problems = []
    for study in cfg.studies.values():
        found = registered_json(repo_dir, study.name, ("design.json", "criteria.json"))
        if found is None:
            continue
        commit, files = found
        changes = design_changes(cfg, study, files["design.json"], files["criteria.json"])
        if not changes:
            continue
        runs = sum(
            not is_staging(p.relative_to(runs_root))
            for p in (runs_root / study.name).glob("*/*/manifest.json")
        )
        state = (
            f"has {runs} run(s) judged under registration commit {commit[:12]}"
            if runs
            else f"is registered in commit {commit[:12]} (no runs yet)"
        )
        problems.append(
            f"study {study.name} {state}, but {cfg.source} changes its registered design or "
            f"criteria: {'; '.join(changes)}. Registered values never change. Either restore "
            f"them, or (1) declare an amendment: a new study with `amends: {study.name}` "
            "carrying the change, registered as an amendment that applies only to runs after "
            "it (as validation_remeasure does), or (2) start a new study name for the changed "
            "design."
        )
    if problems:
        raise StageError("\n".join(problems))


def amendment_record(study: Study, criteria: dict[str, Any]) -> dict[str, Any]:
    """The amended channel-agreement rule, registered on the study it amends before the
    re-measurement (paper II-D); it applies only to runs after its commit."""
    return {
        "amends": study.amends,
        "applies_to": study.name,
        "rule": study.rule,
        "definition": "tau = max(tau_fixed, r_BASE / B_BASE), r and B summed over the "
        "three baseline replicates of the new measurement",
        "tau_fixed": criteria["tau_fixed"],
    }


def require_amended_decisions(study: Study, path: Path | None) -> None:
    """An amendment applies to runs after the amended study's decision (paper Section
    II-D): an amending study is registered only once that decision table exists."""
    if path is None or not path.is_file():
        raise StageError(
            f"{path or '--amended'}: study {study.name} amends {study.amends}, whose "
            f"decision table must exist first; run the decide stage of {study.amends} and "
            "pass its table as --amended"
        )


def preregister(
    cfg: StudyConfig,
    study_name: str,
    *,
    plans_dir: Path,
    predictions_path: Path,
    repo_dir: Path,
    records_dir: Path,
    selected_path: Path | None = None,
    profile_path: Path | None = None,
    amended_decisions: Path | None = None,
) -> dict[str, Any]:
    """Commit a study's design, criteria, plan registry and predictions (docs/DESIGN.md §8).

    An amending study first commits its amendment to the study it amends, then its own
    registration; identical re-registration makes no commit (a re-run does no work).
    With ``signing:`` the commits are SSH-signed; with ``witness:`` every registration is
    then published, before any run can start.
    """
    study = cfg.study(study_name)
    signing = Signing.from_key(cfg.signing_key)
    criteria = cfg.decision.to_dict()
    if study.amends:
        require_amended_decisions(study, amended_decisions)
        amended = registrations(open_repo(repo_dir), study.amends)
        if not amended:
            raise StageError(
                f"preregistration/{study.amends}/: study {study.name} amends "
                f"{study.amends}, which is not registered; run it first"
            )
        register(
            repo_dir,
            study.amends,
            {f"amendment-{study.name}.json": amendment_record(study, criteria)},
            message=f"prereg({study.amends}): amend channel-agreement rule before {study.name}",
            amendment_of=amended[0].hexsha,
            # the amended study's record stays as its runs saw it, so its finished
            # runs are not made stale; git holds the full history
            write_record=False,
            signing=signing,
        )
    predictions = read_frame(predictions_path, "predict")
    design = study_design(cfg, study, selected_path, profile_path)
    registered = registered_json(repo_dir, study.name, ("design.json",))
    if registered is not None:
        # the description is report text, not design: an edit reruns only the report,
        # and a later re-registration keeps the registered words
        design["description"] = registered[1]["design.json"]["description"]
    files = {
        "design.json": design,
        "criteria.json": criteria,
        "plans.json": plan_registry(cfg, study, plans_dir),
        "predictions.json": prediction_record(
            predictions, study, BACKEND_STAGES[cfg.backend].prediction
        ),
        PROFILE_FILE: profile_bytes(profile_path),
    }
    record = register(
        repo_dir,
        study.name,
        files,
        message=f"prereg({study.name}): predictions and criteria before runs",
        records_dir=records_dir,
        signing=signing,
    )
    if cfg.witness:
        publish(open_repo(repo_dir), cfg.witness)
    return record.to_json()
