"""The vLLM tables stage (rules/vllm_report.smk, docs/DESIGN.md §15): after a vLLM study's
runs are sealed, its requests, runs and rounds tables (``rearrival.judge.vllm_tables``)
from the sealed run records, the registered predictions and the channel table, for the
report section to render. Computed after measurement, never registered.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rearrival.config.study import StudyConfig, resolve_configurations
from rearrival.errors import StageError
from rearrival.judge.collect import run_dirs
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
    profile: Path
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
    profile = load_vllm_profile(inputs.profile)
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
        profile.step_cost,
        read_frame(inputs.predictions, "predict"),
        read_frame(inputs.predicted_requests, "predict"),
        read_frame(inputs.channels, "channels"),
    )
    write_frame(tables["requests"], out.requests)
    write_frame(tables["runs"], out.runs)
    write_frame(tables["rounds"], out.rounds)
