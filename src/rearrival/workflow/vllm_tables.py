"""The vLLM report stages (rules/vllm_report.smk, docs/DESIGN.md §15): after a vLLM study's
runs are sealed, its requests, runs and rounds tables against what it registered
(``rearrival.judge.vllm_tables``), and every run compared with the predictor re-run on its
observed arrivals (``rearrival.judge.vllm_agreement``), for the report section to render.
Computed after measurement, never registered.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

from rearrival.atomic import atomic_directory
from rearrival.config.study import StudyConfig, resolve_configurations
from rearrival.errors import StageError
from rearrival.judge.collect import run_dirs
from rearrival.judge.vllm_agreement import PredictorBugWarning, compare_run, write_agreement
from rearrival.judge.vllm_tables import vllm_tables
from rearrival.measure.records import read_run
from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.vllm_profile import load_vllm_profile
from rearrival.parquet import read_frame, write_frame
from rearrival.prereg.ledger import require_sealed
from rearrival.workflow.plans import read_study_plan
from rearrival.workflow.profile import substrate_of


@dataclass(frozen=True)
class VllmTableFiles:
    """Where the stage writes (rules/vllm_report.smk declares all three)."""

    requests: Path
    runs: Path
    rounds: Path


@dataclass(frozen=True)
class VllmTableInputs:
    """What the stage reads besides the run records (each a declared input)."""

    plans: Path
    predictions: Path
    predicted_requests: Path
    channels: Path
    ledger: Path | None = None
    selected: Path | None = None


def vllm_study_tables(
    cfg: StudyConfig,
    study_name: str,
    replicate_dirs: list[Path],
    inputs: VllmTableInputs,
    out: VllmTableFiles,
    *,
    repo_dir: Path,
) -> None:
    """The study's three tables from its complete, sealed runs, written to ``out``."""
    study = cfg.study(study_name)
    if substrate_of(cfg) != "vllm":
        raise StageError(
            f"{cfg.source}: backend {cfg.backend}: the vLLM tables compare runs on vLLM "
            "servers with the vllm rule set; set backend: vllm"
        )
    require_sealed(repo_dir, study_name, replicate_dirs, inputs.ledger)
    configurations = {
        name: c
        for name, c in resolve_configurations(cfg, study, inputs.selected).items()
        if isinstance(c, VllmConfiguration)
    }
    records = [
        record
        for record in (read_run(d, require_complete=False) for d in run_dirs(replicate_dirs))
        if record.manifest["status"] == "complete"
    ]
    if not records:
        raise StageError(f"study {study_name}: no complete run to tabulate; run it first")
    tables = vllm_tables(
        records,
        lambda n, replicate: read_study_plan(inputs.plans, n, replicate),
        configurations,
        read_frame(inputs.predictions, "predict"),
        read_frame(inputs.predicted_requests, "predict"),
        read_frame(inputs.channels, "channels"),
    )
    write_frame(tables["requests"], out.requests)
    write_frame(tables["runs"], out.runs)
    write_frame(tables["rounds"], out.rounds)


def vllm_agreement(
    cfg: StudyConfig,
    study_name: str,
    replicate_dirs: list[Path],
    *,
    plans_dir: Path,
    profile_path: Path,
    repo_dir: Path,
    out_dir: Path,
    ledger_record: Path | None = None,
) -> list[str]:
    """Every complete, sealed run of the study compared with the predictor re-run on its
    observed arrivals (``rearrival.judge.vllm_agreement``), one comparison directory per
    run under ``out_dir`` (``<replicate>/<condition>``), published together. Returns the
    predictor-bug warnings (requests the predicted pool admitted before evicting
    anything that disagree with vLLM), which the verb prints: the report shows them."""
    cfg.study(study_name)
    require_sealed(repo_dir, study_name, replicate_dirs, ledger_record)
    profile = load_vllm_profile(profile_path)
    bugs: list[str] = []
    with atomic_directory(out_dir) as staging:
        for run_dir in run_dirs(replicate_dirs):
            record = read_run(run_dir, require_complete=False)
            if record.manifest["status"] != "complete":
                continue
            m = record.manifest
            plan = read_study_plan(plans_dir, int(m["n"]), int(m["replicate"]))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", PredictorBugWarning)
                agreement = compare_run(record, plan, profile, str(m["plan_path"]))
            bugs += [str(w.message) for w in caught if issubclass(w.category, PredictorBugWarning)]
            write_agreement(agreement, staging / run_dir.parent.name / run_dir.name)
    return bugs
