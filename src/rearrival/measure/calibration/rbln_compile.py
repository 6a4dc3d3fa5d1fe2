"""Compile the calibration artifacts on the RBLN stack (backend rbln; paper Table XIV).

The compile record says where each artifact is and what compiling it cost; it feeds
``rearrival calibrate --compiled`` and the compile-cost fit of the calibrated profile.
"""

from __future__ import annotations

import json
from pathlib import Path

from rearrival.atomic import atomic_write_json
from rearrival.config.backends import RblnSettings
from rearrival.config.calibration import MeasurementSettings
from rearrival.measure import rbln as rbln_stack
from rearrival.measure.calibration.design import STUDY, CalibrationError


def compile_calibration(config: MeasurementSettings, rbln: RblnSettings, out: Path) -> Path:
    """Compile (or reuse) every calibration artifact with optimum-rbln and record where
    each is and what compiling it cost; the record feeds ``--compiled`` and the compile
    fit (backend rbln only)."""
    model = config.model
    entries = {}
    for artifact in config.calibration.artifacts:
        # Looked up on the module at call time, so a test can stand in for the compiler.
        result = rbln_stack.compile_artifact(
            rbln_stack.CompileConfig(
                model=model.name,
                configuration=artifact,
                max_seq_len=model.max_seq_len,
                num_devices=model.num_devices,
            ),
            Path(rbln.artifacts),
        )
        entries[artifact.name] = {
            "artifact": str(result.artifact),
            "reused": result.skipped,
            **json.loads(result.record.read_text()),
        }
    atomic_write_json(out, {"study": STUDY, "configurations": entries})
    return out


def compile_records(record_path: Path) -> list[tuple[int, float, float]]:
    """(buckets, compile seconds, artifact GiB) of every artifact in a compile record."""
    try:
        entries = json.loads(record_path.read_text())["configurations"]
        return [
            (
                len(e["config"]["buckets"]),
                float(e["compile_s"]),
                float(e["artifact_bytes"]) / 1024**3,
            )
            for e in entries.values()
        ]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CalibrationError(
            f"{record_path}: not a compile record with config.buckets, "
            f"compile_s and artifact_bytes per artifact ({exc!r}); run "
            "`rearrival calibrate-compile`"
        ) from exc
