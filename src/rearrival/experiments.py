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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from rearrival.atomic import atomic_directory, atomic_write_bytes
from rearrival.errors import RearrivalError
from rearrival.plangen import derive_seed, generate_plan
from rearrival.plans import Plan, load_plan, write_plan
from rearrival.studies import SELECTED, Configuration, Study, StudyConfig
from rearrival.tools import ToolTable, default_tool_table, load_summary_json

if TYPE_CHECKING:
    from rearrival.profile import Profile

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
    from rearrival.sim import SimConfig, simulate

    release, dummy_block = SIMULATORS[simulator]
    config = SimConfig(buckets=configuration.buckets, batch_size=configuration.batch_size,
                       slots=configuration.slots, release=release, dummy_block=dummy_block)
    summary = simulate(plan.variant(variant), config, profile).summary()
    summary["histogram"] = json.dumps(summary["histogram"], sort_keys=True)
    return summary


def predict(cfg: StudyConfig, study_name: str, plans_dir: Path, out: Path,
            selected_path: Path | None = None) -> pd.DataFrame:
    """Simulator predictions for every plan x condition x simulator variant (paper IV)."""
    from rearrival.calibrate_config import calibration_config_for

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
    from rearrival.backends import BackendSettings, run_backend
    from rearrival.prereg import check_before_run

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


def run_dirs(runs_root: Path) -> list[Path]:
    """Every run directory under a study's runs (one per condition per replicate)."""
    return sorted(p.parent for p in runs_root.glob("*/*/manifest.json"))


def collect_channels(runs_root: Path, out: Path,
                     profile: Profile | None = None) -> pd.DataFrame:
    """Channel A/B per run plus what decisions and tables need, incomplete runs included
    (with their status) so a decision can say which replicate is missing and why."""
    from rearrival.channels import channels
    from rearrival.records import read_run

    rows = []
    for run_dir in run_dirs(runs_root):
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


def study_design(cfg: StudyConfig, study: Study, selected_path: Path | None) -> dict[str, Any]:
    """What the study compares, on which backend, with which inputs: fixed before runs."""
    from rearrival.calibrate_config import calibration_config_for
    from rearrival.profile import profile_sha256

    calibration = calibration_config_for(cfg)
    configurations = resolve_configurations(cfg, study, selected_path)
    return {
        "study": study.name, "kind": study.kind, "description": study.description,
        "backend": cfg.backend, "rule": study.rule, "amends": study.amends,
        "n": list(study.n), "replicates": cfg.replicates, "variants": list(study.variants),
        "repeats": study.repeats, "seed_block": study.seed_block,
        "study_seed": cfg.study_seed, "tool_table": tool_table_for(cfg).source,
        "profile": calibration.prediction_profile().version,
        # the profile predictions used; its bytes are committed beside (profile.yaml)
        "profile_sha256": profile_sha256(calibration.profile_path()),
        "configurations": {name: c.as_dict() for name, c in configurations.items()},
    }


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
    from rearrival.calibrate_config import calibration_config_for
    from rearrival.decisions import criteria_from_config
    from rearrival.prereg import PROFILE_FILE, open_repo, register, registrations
    from rearrival.profile import profile_bytes

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
                 # the amended study's own record stays as its runs saw it, so its
                 # finished runs are not made stale; git holds the full history
                 records_dir=records_dir / "amendments")
    predictions = read_frame(predictions_path, "predict")
    files = {
        "design.json": study_design(cfg, study, selected_path),
        "criteria.json": criteria,
        "plans.json": plan_registry(cfg, study, plans_dir),
        "predictions.json": prediction_record(predictions, study),
        PROFILE_FILE: profile_bytes(calibration_config_for(cfg).profile_path()),
    }
    record = register(repo_dir, study.name, files,
                      message=f"prereg({study.name}): predictions and criteria before runs",
                      records_dir=records_dir)
    return record.to_json()


def committed_prereg_file(repo_dir: Path, record_path: Path, name: str) -> bytes:
    """A study's prereg file as committed at the recorded registration, never as it may
    stand in the working tree now: decisions use what was registered."""
    from rearrival.prereg import open_repo

    if not record_path.exists():
        raise StageError(f"{record_path}: no preregistration record; run the prereg stage")
    record = json.loads(record_path.read_text())
    repo = open_repo(repo_dir)
    path = f"preregistration/{record['study']}/{name}"
    try:
        blob = repo.commit(record["commit"]).tree / path
    except KeyError:
        raise StageError(f"{path}: not in prereg commit {record['commit'][:12]}; "
                         "re-run the prereg stage") from None
    return blob.data_stream.read()


def decide(cfg: StudyConfig, study_name: str, *, channels_path: Path,
           predictions_path: Path, prereg_path: Path, repo_dir: Path, out: Path) -> None:
    """The study's decision table under the criteria and rule it registered."""
    from dataclasses import replace

    from rearrival.decide import DecisionCriteria
    from rearrival.decisions import decide_study

    criteria = DecisionCriteria.from_dict(
        json.loads(committed_prereg_file(repo_dir, prereg_path, "criteria.json")),
        f"preregistration/{study_name}/criteria.json")
    design = json.loads(committed_prereg_file(repo_dir, prereg_path, "design.json"))
    registered = replace(cfg, studies=cfg.studies | {
        study_name: replace(cfg.study(study_name), rule=design["rule"])})
    decide_study(registered, study_name, channels_path, predictions_path, criteria, out)


def injection(cfg: StudyConfig, out: Path) -> pd.DataFrame:
    """Prefill injection (paper III-C): background inter-token gaps around one injected
    prefill of each configured size, on the emulated engine."""
    from rearrival.calibrate_config import calibration_config_for
    from rearrival.emulate import load_truth, run_injection

    truth = load_truth(calibration_config_for(cfg).truth_path())  # config emulator_truth:
    settings = cfg.injection
    configuration = cfg.configurations[settings.get("configuration", "baseline")]
    frames = []
    for size in settings.get("injected_prompt_tokens", [256, 1024, 2048, 4096]):
        seed = derive_seed(cfg.study_seed, 0, int(size), 0, "injection")
        frames.append(run_injection(
            background_sessions=int(settings.get("background_sessions", 4)),
            injected_prompt_tokens=int(size),
            inject_at_s=float(settings.get("inject_at_s", 1.2)),
            gen_tokens=int(settings.get("background_gen_tokens", 256)),
            buckets=configuration.buckets, batch_size=configuration.batch_size, seed=seed,
            truth=truth))
    frame = pd.concat(frames, ignore_index=True)
    frame["backend"] = "emulated"
    write_frame(frame, out)
    return frame


# --- compile (real hardware) ----------------------------------------------------------------


def compile_study(cfg: StudyConfig, study_name: str, out: Path,
                  selected_path: Path | None = None) -> dict[str, Any]:
    """Compile (or reuse) every configuration of a study with optimum-rbln and record
    where each artifact is and what compiling it cost (Table XIV on hardware)."""
    from rearrival.atomic import atomic_write_json
    from rearrival.rbln import CompileConfig, compile_artifact

    study = cfg.study(study_name)
    settings = cfg.rbln
    artifacts = Path(settings.get("artifacts", "artifacts"))
    entries = {}
    for name, configuration in resolve_configurations(cfg, study, selected_path).items():
        result = compile_artifact(CompileConfig(
            model=str(settings.get("model", "Qwen/Qwen3-4B")),
            batch_size=configuration.batch_size, buckets=configuration.buckets,
            max_seq_len=int(settings.get("max_seq_len", 8192)),
            num_devices=int(settings.get("num_devices", 4))), artifacts)
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
