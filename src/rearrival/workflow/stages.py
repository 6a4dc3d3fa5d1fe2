"""The study stages the Snakefile calls (SPEC section 11): plans, predictions,
preregistration, runs and channel tables for one study of config/config.yaml.

Each function reads the files of the previous stage and writes its own atomically, so
data flows one way (plan -> run records -> channels -> decisions -> tables) and every
stage can be re-run alone. The science lives in the modules these call; this module
only decides which plan, configuration and seed each piece of work gets.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from rearrival.atomic import atomic_directory, atomic_write_bytes
from rearrival.config.study import SELECTED, Configuration, Study, StudyConfig
from rearrival.errors import RearrivalError
from rearrival.model.plangen import derive_seed, generate_plan
from rearrival.model.plans import Plan, load_plan, write_plan
from rearrival.model.tools import ToolTable, default_tool_table, load_summary_json

if TYPE_CHECKING:
    from rearrival.model.profile import Profile

# Simulator variants predicted for every condition. "base" is the paper's predictor
# (Section IV) and the only one preregistered as the prediction; "dummy" adds the
# observed dummy-block rule (Supplementary S9); "stack" uses the measured stack's rules
# (immediate release + dummy block).
SIMULATORS: dict[str, tuple[str, str]] = {
    "base": ("deferred", "off"),
    "dummy": ("deferred", "pre-evict"),
    "stack": ("immediate", "pre-evict"),
}
PREDICTION = "base"
INJECTION_BACKEND = "emulated"  # the only backend with a prefill-injection driver


class StageError(RearrivalError):
    """A stage's inputs are missing or inconsistent; the message names the file and fix."""


# --- plans ------------------------------------------------------------------------------


def tool_table_for(cfg: StudyConfig) -> ToolTable:
    """The configured tool-latency table; 'default' is the published TraceLab aggregate."""
    if cfg.tool_table == "default":
        return default_tool_table()
    return load_summary_json(cfg.tool_table)


def plan_file(plans_dir: Path, n: int, replicate: int) -> Path:
    return plans_dir / f"n{n}_r{replicate}.parquet"


def study_plan(cfg: StudyConfig, study: Study, n: int, replicate: int,
               table: ToolTable) -> Plan:
    """The plan of one (N, replicate): the study's own seed block keeps seeds disjoint."""
    return generate_plan(n, study_seed=cfg.study_seed, replicate=replicate,
                         block=study.seed_block, tool_table=table)


def make_plans(cfg: StudyConfig, study_name: str, out_dir: Path) -> list[Path]:
    """Write every plan of a study into ``out_dir`` (published as a whole, atomically)."""
    study = cfg.study(study_name)
    table = tool_table_for(cfg)
    written = []
    with atomic_directory(out_dir) as staging:
        for n in study.n:
            for replicate in range(cfg.replicates):
                plan = study_plan(cfg, study, n, replicate, table)
                write_plan(plan, plan_file(staging, n, replicate))
                written.append(plan_file(out_dir, n, replicate))
    return written


def read_study_plan(plans_dir: Path, n: int, replicate: int) -> Plan:
    path = plan_file(plans_dir, n, replicate)
    if not path.exists():
        raise StageError(f"{path}: plan missing; re-run the plans stage "
                         "(snakemake results/plans/<study>)")
    return load_plan(path)


# --- configurations ---------------------------------------------------------------------


def read_selected(path: Path) -> Configuration:
    """The configuration the search picked (results/search/selected.json)."""
    if not path.exists():
        raise StageError(f"{path}: no search result; run the search stage first "
                         "(snakemake results/search/selected.json)")
    raw = json.loads(path.read_text())
    buckets = tuple(int(b) for b in raw["buckets"])
    batch = int(raw["batch_size"])
    return Configuration(SELECTED, buckets, batch, int(raw.get("slots", batch)))


def resolve_configurations(cfg: StudyConfig, study: Study,
                           selected_path: Path | None) -> dict[str, Configuration]:
    resolved = {}
    for name in study.configurations:
        if name == SELECTED:
            if selected_path is None:
                raise StageError(f"study {study.name} compares the search's pick; pass "
                                 "--selected results/search/selected.json")
            resolved[name] = read_selected(selected_path)
        else:
            resolved[name] = cfg.configurations[name]
    return resolved


# --- predictions ------------------------------------------------------------------------


def simulate_condition(plan: Plan, configuration: Configuration, variant: str,
                       simulator: str, profile: Profile | None = None) -> dict[str, Any]:
    """One simulator summary for one plan under one condition."""
    from rearrival.model.sim import SimConfig, simulate

    release, dummy_block = SIMULATORS[simulator]
    config = SimConfig(buckets=configuration.buckets, batch_size=configuration.batch_size,
                       slots=configuration.slots, release=release, dummy_block=dummy_block)
    summary = simulate(plan.variant(variant), config, profile).summary()
    summary["histogram"] = json.dumps(summary["histogram"], sort_keys=True)
    return summary


def predict(cfg: StudyConfig, study_name: str, plans_dir: Path, out: Path,
            selected_path: Path | None = None) -> pd.DataFrame:
    """Simulator predictions for every plan x condition x simulator variant (paper IV)."""
    from rearrival.config.calibration import calibration_config_for

    study = cfg.study(study_name)
    configurations = resolve_configurations(cfg, study, selected_path)
    profile = calibration_config_for(cfg).prediction_profile()  # config `profile:`
    rows = []
    for n in study.n:
        for replicate in range(cfg.replicates):
            plan = read_study_plan(plans_dir, n, replicate)
            for condition in study.conditions():
                configuration = configurations[condition.configuration]
                for simulator in SIMULATORS:
                    summary = simulate_condition(plan, configuration, condition.variant,
                                                 simulator, profile)
                    rows.append({
                        "study": study.name, "n": n, "replicate": replicate,
                        "configuration": condition.configuration,
                        "config_label": configuration.label(),
                        "variant": condition.variant, "simulator": simulator,
                        "plan_sha256": plan.sha256(), **summary,
                    })
    frame = pd.DataFrame(rows)
    write_frame(frame, out)
    return frame


def write_frame(frame: pd.DataFrame, out: Path) -> None:
    """Parquet without the pandas index, published atomically (same data, same bytes)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), sink,
                   compression="zstd")
    atomic_write_bytes(out, sink.getvalue().to_pybytes())


def read_frame(path: Path, stage: str) -> pd.DataFrame:
    if not path.exists():
        raise StageError(f"{path}: missing; run the {stage} stage first")
    return pd.read_parquet(path)


def predicted_ratios(predictions: pd.DataFrame, baseline: str,
                     simulator: str = PREDICTION) -> pd.DataFrame:
    """Replicate-summed predicted device time per condition and its ratio to the baseline
    configuration under the same variant (sums first, never means of ratios)."""
    chosen = predictions[predictions["simulator"] == simulator]
    sums = (chosen.groupby(["n", "configuration", "variant"], sort=True)
            .agg(device_s=("device_s", "sum"), decode_s=("decode_s", "sum"),
                 prefill_s=("prefill_s", "sum"), reuse_hits=("reuse_hits", "sum"),
                 re_arrivals=("re_arrivals", "sum"),
                 computed_prefill_tokens=("computed_prefill_tokens", "sum"))
            .reset_index())
    base = sums[sums["configuration"] == baseline].set_index(["n", "variant"])["device_s"]
    keys = list(zip(sums["n"], sums["variant"], strict=True))
    sums["ratio_pred"] = [d / base.loc[k] for d, k in zip(sums["device_s"], keys, strict=True)]
    return sums


# --- runs -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSlot:
    """One run of a replicate: which condition, which repeat, which seed."""

    label: str
    configuration: str
    variant: str
    seed: int


def run_slots(cfg: StudyConfig, study: Study, n: int, replicate: int) -> list[RunSlot]:
    """Every run of one replicate in a seeded shuffled order (paper II-D: the order of
    conditions changes from replicate to replicate so drift cannot favour one)."""
    slots = []
    for condition in study.conditions():
        for repeat in range(study.repeats):
            label = condition.label if study.repeats == 1 else f"{condition.label}-{repeat}"
            seed = derive_seed(cfg.study_seed, replicate, n, study.seed_block, f"run:{label}")
            slots.append(RunSlot(label, condition.configuration, condition.variant, seed))
    order_seed = derive_seed(cfg.study_seed, replicate, n, study.seed_block, "order")
    random.Random(order_seed).shuffle(slots)
    return slots


def run_replicate(cfg: StudyConfig, study_name: str, n: int, replicate: int, *,
                  plans_dir: Path, out_dir: Path, repo_dir: Path,
                  selected_path: Path | None = None,
                  compile_record: Path | None = None) -> list[Path]:
    """Run every condition of one replicate, refusing to start without a committed prereg.

    The replicate directory is published only when every run has been written (failed
    runs are written too, with their status and reason, and never used by a decision).
    """
    from rearrival.measure.backends import BackendSettings, run_backend
    from rearrival.prereg.registration import check_before_run

    study = cfg.study(study_name)
    settings = BackendSettings.from_study_config(cfg, compile_record)
    prereg = check_before_run(repo_dir, study.name).manifest_entry()
    configurations = resolve_configurations(cfg, study, selected_path)
    plan_path = plan_file(plans_dir, n, replicate)
    plan = read_study_plan(plans_dir, n, replicate)
    slots = run_slots(cfg, study, n, replicate)
    order = [slot.label for slot in slots]
    written = []
    with atomic_directory(out_dir) as staging:
        for slot in slots:
            run = RunRequest(study=study.name, plan=plan, plan_path=plan_path,
                             configuration=configurations[slot.configuration],
                             variant=slot.variant, label=slot.label, replicate=replicate,
                             seed=slot.seed, condition_order=order, prereg=prereg)
            run_backend(settings, run, staging / slot.label)
            written.append(out_dir / slot.label)
    return written


@dataclass(frozen=True)
class RunRequest:
    """Everything one backend run needs besides the backend settings."""

    study: str
    plan: Plan
    plan_path: Path
    configuration: Configuration
    variant: str
    label: str
    replicate: int
    seed: int
    condition_order: list[str]
    prereg: dict[str, Any]


def run_dirs(replicate_dirs: list[Path]) -> list[Path]:
    """Every run directory (one per condition) under the given replicate directories."""
    return sorted(p.parent for d in replicate_dirs for p in Path(d).glob("*/manifest.json"))


def collect_channels(replicate_dirs: list[Path], out: Path | None,
                     profile: Profile | None = None) -> pd.DataFrame:
    """Channel A/B per run plus what decisions and tables need, incomplete runs included
    (with their status) so a decision can say which replicate is missing and why.
    ``out`` None returns the table without writing it (the audit recomputes it)."""
    from rearrival.judge.channels import channels
    from rearrival.measure.records import read_run

    rows = []
    for run_dir in run_dirs(replicate_dirs):
        record = read_run(run_dir, require_complete=False)
        manifest = record.manifest
        row = {
            "run_id": manifest["run_id"], "run_dir": str(run_dir),
            "study": manifest["study"], "backend": manifest["backend"],
            "condition": manifest["condition"], "variant": manifest["variant"],
            "configuration": manifest["configuration"].get("name"),
            "n": manifest["n"], "replicate": manifest["replicate"],
            "status": manifest["status"], "reason": manifest.get("reason"),
        }
        rows.append(row)
        if manifest["status"] == "complete":
            row.update(channels(record, profile))
            row.update(run_statistics(record.requests, record.steps))
    frame = pd.DataFrame(rows)
    if out is not None:
        write_frame(frame, out)
    return frame


def run_statistics(requests: pd.DataFrame, steps: pd.DataFrame) -> dict[str, Any]:
    """What the mechanism tables show per run: reuse on re-arrivals (III-B), decode
    steps and padding (III-A), prefill work; read from the records, never predicted."""
    followups = requests[requests["turn"] == 1]
    decode = steps[steps["kind"] == "decode"]
    buckets = decode["b"].astype("int64")
    histogram = decode.groupby(["n", "b"]).size()
    return {
        "re_arrivals": len(followups),
        "reuse_hits": int((followups["cached_tokens"].fillna(0) > 0).sum()),
        "computed_prefill_tokens": int(followups["computed_tokens"].fillna(0).sum()),
        "total_computed_tokens": int(requests["computed_tokens"].fillna(0).sum()),
        "decode_steps": len(decode),
        "padding_ratio": float((buckets - decode["n"]).sum() / buckets.sum())
        if len(decode) else 0.0,
        "histogram": json.dumps({f"{n}->{b}": int(c) for (n, b), c in histogram.items()},
                                sort_keys=True),
    }


# --- preregistration --------------------------------------------------------------------


def plan_registry(cfg: StudyConfig, study: Study, plans_dir: Path) -> dict[str, Any]:
    """Hash and seed of every plan a study will run (audited against run manifests)."""
    plans = []
    for n in study.n:
        for replicate in range(cfg.replicates):
            plan = read_study_plan(plans_dir, n, replicate)
            plans.append({"replicate": replicate, "n": n, "seed": plan.meta.seed,
                          "sha256": plan.sha256()})
    return {"validation": study.kind == "validation", "plans": plans}


def prediction_record(predictions: pd.DataFrame, study: Study) -> dict[str, Any]:
    """The predictions a study commits to: replicate-summed ratios per condition."""
    sums = predicted_ratios(predictions, study.baseline)
    per_plan = predictions[predictions["simulator"] == PREDICTION]
    return {
        "simulator": f"{PREDICTION} (release={SIMULATORS[PREDICTION][0]}, "
                     f"dummy_block={SIMULATORS[PREDICTION][1]})",
        "ratios": [
            {"n": int(r.n), "configuration": r.configuration, "variant": r.variant,
             "device_s": float(r.device_s), "ratio_pred": float(r.ratio_pred),
             "reuse_hits": int(r.reuse_hits), "re_arrivals": int(r.re_arrivals)}
            for r in sums.itertuples()],
        "per_plan": [
            {"n": int(r.n), "replicate": int(r.replicate), "configuration": r.configuration,
             "variant": r.variant, "plan_sha256": r.plan_sha256, "device_s": float(r.device_s)}
            for r in per_plan.itertuples()],
    }


def registered_design(cfg: StudyConfig, study: Study) -> dict[str, Any]:
    """The part of a study's registered design the config alone fixes: everything in
    design.json except the one-line description (report text), the profile version and
    the search's pick (a result, known only after the search ran). The Snakefile passes
    it as a param, so an edit reruns the study's jobs, and compares it with the
    registration, so an edit after registering is refused (:func:`design_changes`)."""
    return {
        "study": study.name, "kind": study.kind,
        "backend": cfg.backend, "rule": study.rule, "amends": study.amends,
        "n": list(study.n), "replicates": cfg.replicates, "variants": list(study.variants),
        "repeats": study.repeats, "seed_block": study.seed_block,
        "study_seed": cfg.study_seed, "tool_table": tool_table_for(cfg).source,
        "prediction_profile": cfg.measurement.profile,
        "emulator_truth": cfg.measurement.emulator_truth,
        "configurations": {name: cfg.configurations[name].as_dict()
                           for name in study.configurations if name != SELECTED},
    }


def study_design(cfg: StudyConfig, study: Study, selected_path: Path | None) -> dict[str, Any]:
    """What the study compares, on which backend, with which inputs: fixed before runs."""
    from rearrival.config.calibration import calibration_config_for
    from rearrival.model.profile import profile_sha256

    calibration = calibration_config_for(cfg)
    configurations = resolve_configurations(cfg, study, selected_path)
    return registered_design(cfg, study) | {
        "description": study.description,
        "profile": calibration.prediction_profile().version,
        # the profile predictions used; its bytes are committed beside (profile.yaml)
        "profile_sha256": profile_sha256(calibration.profile_path()),
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


def design_changes(cfg: StudyConfig, study: Study, registered_design_json: dict[str, Any],
                   registered_criteria: dict[str, Any]) -> list[str]:
    """``key: registered -> config`` for every registered design or criteria value the
    config now contradicts (the search's pick and the description are not compared)."""
    from rearrival.judge.decisions import criteria_from_config

    registered = {key: registered_design_json.get(key) for key in registered_design(cfg, study)}
    registered["configurations"] = {
        name: value for name, value in (registered["configurations"] or {}).items()
        if name != SELECTED}
    old = _flat(registered, "design") | _flat(registered_criteria, "decision")
    new = (_flat(registered_design(cfg, study), "design")
           | _flat(criteria_from_config(cfg).to_dict(), "decision"))
    keys = sorted(set(old) | set(new))
    missing = "(absent)"
    return [f"{key.removeprefix('design.')}: registered {old.get(key, missing)!r}, "
            f"config {new.get(key, missing)!r}"
            for key in keys if old.get(key, missing) != new.get(key, missing)]


def refuse_changed_designs(cfg: StudyConfig, repo_dir: Path, runs_root: Path) -> None:
    """Refuse, before any job is scheduled, a config that contradicts a registration.

    Registered files never change (SPEC 9), so re-running a registered study under an
    edited design or criteria could only end in a refused prereg commit or, worse, in
    runs judged by criteria they were not registered under. One message per study names
    the changed keys, the registering commit and the two ways forward.
    """
    from rearrival.prereg.registration import registered_json

    problems = []
    for study in cfg.studies.values():
        found = registered_json(repo_dir, study.name, ("design.json", "criteria.json"))
        if found is None:
            continue
        commit, files = found
        changes = design_changes(cfg, study, files["design.json"], files["criteria.json"])
        if not changes:
            continue
        runs = len(list((runs_root / study.name).glob("*/*/manifest.json")))
        state = (f"has {runs} run(s) judged under registration commit {commit[:12]}" if runs
                 else f"is registered in commit {commit[:12]} (no runs yet)")
        problems.append(
            f"study {study.name} {state}, but {cfg.source} changes its registered design or "
            f"criteria: {'; '.join(changes)}. Registered values never change. Either restore "
            f"them, or (1) declare an amendment: a new study with `amends: {study.name}` "
            "carrying the change, registered as an amendment that applies only to runs after "
            "it (as validation_remeasure does), or (2) start a new study name for the changed "
            "design.")
    if problems:
        raise StageError("\n".join(problems))


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


PLAN_KEYS = ("study", "study_seed", "replicates", "tool_table", "n", "seed_block")


def workflow_params(cfg: StudyConfig, raw_config: dict[str, Any]) -> dict[str, str]:
    """The config values each rule's jobs depend on, as canonical JSON keyed
    ``stage`` or ``stage:study``. The Snakefile passes them as params, and Snakemake
    reruns a job whose params changed: a seed or N edit reruns a study's plans and
    everything after them, a report-only edit (a study's description) only the report.
    """
    from rearrival.judge.decisions import criteria_from_config
    from rearrival.measure.backends import BackendSettings

    criteria = criteria_from_config(cfg).to_dict()
    backend = asdict(BackendSettings.from_study_config(cfg))
    params = {"report": _canonical(raw_config)}
    for name, study in cfg.studies.items():
        design = registered_design(cfg, study)
        plans = {key: design[key] for key in PLAN_KEYS}
        params[f"plans:{name}"] = _canonical(plans)
        params[f"predict:{name}"] = _canonical(
            plans | {key: design[key]
                     for key in ("configurations", "variants", "prediction_profile")})
        params[f"prereg:{name}"] = _canonical(design | {"criteria": criteria})
        params[f"run:{name}"] = _canonical(design | {"settings": backend})
        params[f"decide:{name}"] = _canonical(design | {"criteria": criteria})
        params[f"compile:{name}"] = _canonical(
            {"configurations": design["configurations"], "rbln": asdict(cfg.rbln)})
    params["injection"] = _canonical({
        "injection": asdict(cfg.injection), "backend": cfg.backend, "study_seed": cfg.study_seed,
        "configurations": {name: c.as_dict() for name, c in cfg.configurations.items()}})
    params["calibration"] = _canonical({
        "backend": cfg.backend, "study_seed": cfg.study_seed,
        "emulator_truth": cfg.measurement.emulator_truth,
        "model": asdict(cfg.measurement.model),
        "calibration": asdict(cfg.measurement.calibration)})
    params["search"] = _canonical({
        "search": dict(cfg.search), "study_seed": cfg.study_seed,
        "profile": cfg.measurement.profile,
        "tool_table": tool_table_for(cfg).source,
        "configurations": {name: c.as_dict() for name, c in cfg.configurations.items()}})
    return params


def amendment_record(study: Study, criteria: dict[str, Any]) -> dict[str, Any]:
    """The amended channel-agreement rule, registered on the study it amends before the
    re-measurement (paper II-D); it applies only to runs after its commit."""
    return {
        "amends": study.amends, "applies_to": study.name,
        "rule": study.rule,
        "definition": "tau = max(tau_fixed, r_BASE / B_BASE), r and B summed over the "
                      "three baseline replicates of the new measurement",
        "tau_fixed": criteria["tau_fixed"],
    }


def preregister(cfg: StudyConfig, study_name: str, *, plans_dir: Path,
                predictions_path: Path, repo_dir: Path, records_dir: Path,
                selected_path: Path | None = None) -> dict[str, Any]:
    """Commit a study's design, criteria, plan registry and predictions (SPEC 9).

    An amending study first commits its amendment to the study it amends, then its own
    registration; identical re-registration makes no commit (a re-run does no work).
    """
    from rearrival.config.calibration import calibration_config_for
    from rearrival.judge.decisions import criteria_from_config
    from rearrival.model.profile import profile_bytes
    from rearrival.prereg.registration import (
        PROFILE_FILE,
        open_repo,
        register,
        registered_json,
        registrations,
    )

    study = cfg.study(study_name)
    criteria = criteria_from_config(cfg).to_dict()
    if study.amends:
        amended = registrations(open_repo(repo_dir), study.amends)
        if not amended:
            raise StageError(f"preregistration/{study.amends}/: study {study.name} amends "
                             f"{study.amends}, which is not registered; run it first")
        register(repo_dir, study.amends,
                 {f"amendment-{study.name}.json": amendment_record(study, criteria)},
                 message=f"prereg({study.amends}): amend channel-agreement rule before "
                         f"{study.name}", amendment_of=amended[0].hexsha,
                 # the amended study's record stays as its runs saw it, so its finished
                 # runs are not made stale; git holds the full history
                 write_record=False)
    predictions = read_frame(predictions_path, "predict")
    design = study_design(cfg, study, selected_path)
    registered = registered_json(repo_dir, study.name, ("design.json",))
    if registered is not None:
        # the description is report text, not design: an edit reruns only the report,
        # and a later re-registration keeps the registered words
        design["description"] = registered[1]["design.json"]["description"]
    files = {
        "design.json": design,
        "criteria.json": criteria,
        "plans.json": plan_registry(cfg, study, plans_dir),
        "predictions.json": prediction_record(predictions, study),
        PROFILE_FILE: profile_bytes(calibration_config_for(cfg).profile_path()),
    }
    record = register(repo_dir, study.name, files,
                      message=f"prereg({study.name}): predictions and criteria before runs",
                      records_dir=records_dir)
    return record.to_json()


@dataclass(frozen=True)
class Registration:
    """A study as its registration commit holds it: what the study compares (design),
    the criteria and the predictions. Decisions are computed from this, never from the
    working files, so an edit after measuring cannot change what is judged."""

    commit: str
    study: Study
    replicates: int
    study_seed: int
    criteria: Any  # DecisionCriteria
    predictions: pd.DataFrame
    files: dict[str, bytes]


REGISTERED_FILES = ("design.json", "criteria.json", "predictions.json")


def registered_study(design: dict[str, Any], per_plan: list[dict[str, Any]]) -> Study:
    """The Study a design.json registered. Its configurations are a key-sorted JSON
    object, so their order (the first is the baseline) is read from the per-plan
    predictions, which list conditions in the study's order."""
    order = list(dict.fromkeys(row["configuration"] for row in per_plan))
    return Study(name=design["study"], kind=design["kind"],
                 description=design["description"], n=tuple(design["n"]),
                 configurations=tuple(order), variants=tuple(design["variants"]),
                 seed_block=design["seed_block"], rule=design["rule"],
                 amends=design["amends"], repeats=design["repeats"])


def read_registration(repo: Any, study_name: str, commit: str) -> Registration:
    """The registration of ``study_name`` at ``commit`` read from git objects."""
    from rearrival.judge.decide import DecisionCriteria

    files = {}
    for name in REGISTERED_FILES:
        path = f"preregistration/{study_name}/{name}"
        try:
            files[name] = (repo.commit(commit).tree / path).data_stream.read()
        except KeyError:
            raise StageError(f"{path}: not in prereg commit {commit[:12]}; re-run the prereg "
                             "stage") from None
    design = json.loads(files["design.json"])
    per_plan = json.loads(files["predictions.json"])["per_plan"]
    predictions = pd.DataFrame(per_plan)
    predictions["simulator"] = PREDICTION
    criteria = DecisionCriteria.from_dict(json.loads(files["criteria.json"]),
                                          f"preregistration/{study_name}/criteria.json at "
                                          f"{commit[:12]}")
    return Registration(commit, registered_study(design, per_plan), design["replicates"],
                        design["study_seed"], criteria, predictions, files)


PER_PLAN_KEYS = ["n", "replicate", "configuration", "variant", "plan_sha256", "device_s"]


def prediction_difference(working: pd.DataFrame, registered: pd.DataFrame) -> str | None:
    """The first per-plan prediction (base simulator) that differs from the registered
    one, as text; None when the working predictions are what was registered."""
    keys = PER_PLAN_KEYS[:4]
    mine = (working[working["simulator"] == PREDICTION][PER_PLAN_KEYS]
            .sort_values(keys).reset_index(drop=True))
    theirs = registered[PER_PLAN_KEYS].sort_values(keys).reset_index(drop=True)
    if len(mine) != len(theirs):
        return f"{len(mine)} per-plan predictions, {len(theirs)} registered"
    for ours, reg in zip(mine.itertuples(index=False), theirs.itertuples(index=False),
                         strict=True):
        if tuple(ours) != tuple(reg):
            return (f"N={reg.n} replicate {reg.replicate} {reg.configuration}-{reg.variant}: "
                    f"device_s {ours.device_s!r}, registered {reg.device_s!r}")
    return None


def registration_for_decision(repo_dir: Path, study_name: str, prereg_path: Path,
                              predictions_path: Path) -> Registration:
    """The registration a decision uses, refusing when the working copy disagrees: the
    record must name a registration of the study on HEAD's history, the working
    preregistration files must be the committed ones, and the working predictions must
    be the registered predictions."""
    from rearrival.prereg.registration import open_repo, registrations

    if not prereg_path.exists():
        raise StageError(f"{prereg_path}: no preregistration record; run the prereg stage")
    commit = json.loads(prereg_path.read_text())["commit"]
    repo = open_repo(repo_dir)
    if commit not in {c.hexsha for c in registrations(repo, study_name)}:
        raise StageError(f"{prereg_path}: commit {commit[:12]} is not a registration of study "
                         f"{study_name} on HEAD's history; re-run the prereg stage")
    registration = read_registration(repo, study_name, commit)
    root = Path(repo.working_tree_dir)
    for name, data in registration.files.items():
        path = root / "preregistration" / study_name / name
        if not path.exists() or path.read_bytes() != data:
            raise StageError(f"preregistration/{study_name}/{name}: the working copy differs "
                             f"from registration commit {commit[:12]}; decisions use what was "
                             f"registered, so restore it (git checkout -- {path})")
    difference = prediction_difference(read_frame(predictions_path, "predict"),
                                       registration.predictions)
    if difference is not None:
        raise StageError(f"{predictions_path}: differs from the predictions registered in "
                         f"commit {commit[:12]} ({difference}); decisions use what was "
                         "registered, so re-run the predict stage from the registered plans "
                         "or restore the file")
    return registration


def decide(cfg: StudyConfig, study_name: str, *, channels_path: Path,
           predictions_path: Path, prereg_path: Path, repo_dir: Path, out: Path) -> None:
    """The study's decision table from its registration commit: the design, criteria
    and predictions registered before the runs, and the channels of the runs."""
    from rearrival.atomic import atomic_write_text
    from rearrival.judge.decisions import decision_table
    from rearrival.prereg.ledger import require_sealed

    cfg.study(study_name)
    registration = registration_for_decision(repo_dir, study_name, prereg_path,
                                             predictions_path)
    channels = read_frame(channels_path, "channels")
    if "run_dir" in channels:
        require_sealed(repo_dir, study_name,
                       sorted({Path(run_dir).parent for run_dir in channels["run_dir"]}))
    text, _ = decision_table(registration.study, registration.replicates,
                             registration.study_seed, channels,
                             registration.predictions, registration.criteria)
    atomic_write_text(out, text)


def injection(cfg: StudyConfig, out: Path) -> pd.DataFrame:
    """Prefill injection (paper III-C): background inter-token gaps around one injected
    prefill of each configured size, on the emulated engine."""
    from rearrival.config.calibration import calibration_config_for
    from rearrival.measure.emulate.injection import run_injection
    from rearrival.measure.emulate.truth import load_truth

    if cfg.backend != INJECTION_BACKEND:
        raise StageError(f"{cfg.source}: backend {cfg.backend}: the prefill injection "
                         f"(paper III-C) has a driver only on the {INJECTION_BACKEND} engine, "
                         "and its result would be filed under a backend that did not produce "
                         "it; the workflow leaves it out on this backend (set backend: "
                         f"{INJECTION_BACKEND} to measure it)")
    truth = load_truth(calibration_config_for(cfg).truth_path())  # config emulator_truth:
    settings = cfg.injection
    configuration = cfg.configurations[settings.configuration]
    frames = []
    for size in settings.injected_prompt_tokens:
        seed = derive_seed(cfg.study_seed, 0, int(size), 0, "injection")
        frames.append(run_injection(
            background_sessions=settings.background_sessions,
            injected_prompt_tokens=int(size), inject_at_s=settings.inject_at_s,
            gen_tokens=settings.background_gen_tokens,
            buckets=configuration.buckets, batch_size=configuration.batch_size, seed=seed,
            truth=truth))
    frame = pd.concat(frames, ignore_index=True)
    frame["backend"] = INJECTION_BACKEND
    write_frame(frame, out)
    return frame


# --- compile (real hardware) ----------------------------------------------------------------


def compile_study(cfg: StudyConfig, study_name: str, out: Path,
                  selected_path: Path | None = None) -> dict[str, Any]:
    """Compile (or reuse) every configuration of a study with optimum-rbln and record
    where each artifact is and what compiling it cost (Table XIV on hardware)."""
    from rearrival.atomic import atomic_write_json
    from rearrival.measure.rbln import CompileConfig, compile_artifact

    study = cfg.study(study_name)
    settings = cfg.rbln
    artifacts = Path(settings.artifacts)
    entries = {}
    for name, configuration in resolve_configurations(cfg, study, selected_path).items():
        result = compile_artifact(CompileConfig(
            model=settings.model,
            batch_size=configuration.batch_size, buckets=configuration.buckets,
            max_seq_len=settings.max_seq_len, num_devices=settings.num_devices), artifacts)
        entries[name] = {"artifact": str(result.artifact), "reused": result.skipped,
                         **json.loads(result.record.read_text())}
    record = {"study": study.name, "configurations": entries}
    atomic_write_json(out, record)
    return record


def compiled_artifact(compile_record: Path, configuration: str) -> Path:
    """The artifact directory the compile stage recorded for a configuration."""
    if not compile_record.exists():
        raise StageError(f"{compile_record}: no compile record; run the compile stage "
                         "(backend rbln)")
    entries = json.loads(compile_record.read_text())["configurations"]
    if configuration not in entries:
        raise StageError(f"{compile_record}: configuration {configuration} was not compiled; "
                         "re-run the compile stage")
    return Path(entries[configuration]["artifact"])
