"""The compile stage (rules/compile.smk, real hardware only): compile or reuse every
configuration of a study with optimum-rbln and record where each artifact is and what
compiling it cost (Table XIV); the run stage reads the record back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rearrival.atomic import atomic_write_json
from rearrival.config.study import StudyConfig, resolve_configurations
from rearrival.measure.rbln import CompileConfig, compile_artifact


def compile_study(
    cfg: StudyConfig, study_name: str, out: Path, selected_path: Path | None = None
) -> dict[str, Any]:
    """Compile (or reuse) every configuration of a study with optimum-rbln and record
    where each artifact is and what compiling it cost (Table XIV on hardware)."""
    study = cfg.study(study_name)
    model = cfg.measurement.model
    artifacts = Path(cfg.rbln.artifacts)
    entries = {}
    for name, configuration in resolve_configurations(cfg, study, selected_path).items():
        result = compile_artifact(
            CompileConfig(
                model=model.name,
                configuration=configuration,
                max_seq_len=model.max_seq_len,
                num_devices=model.num_devices,
            ),
            artifacts,
        )
        entries[name] = {
            "artifact": str(result.artifact),
            "reused": result.skipped,
            **json.loads(result.record.read_text()),
        }
    record = {"study": study.name, "configurations": entries}
    atomic_write_json(out, record)
    return record
