"""The calibrated vLLM profile: a finished vLLM calibration written in the layout of
``rearrival.model.cost.vllm_profile`` (docs/DESIGN.md §15), plus what a reader needs to
trust it: the fit (method, samples, bootstrap), the residual of every cell of steps with
the bound, the runs it read, the held-out validation and where it was measured.

Every coefficient carries its 95 % interval, whether the data identify it (an interval
reaching 0 does not), the unconstrained least-squares value beside the bounded one, and
its provenance. What was measured on which device is said in the file's own words: a CPU
calibration of a small model is never presented as GPU timings.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shlex
from pathlib import Path
from typing import Any

import yaml

from rearrival.atomic import atomic_write_bytes
from rearrival.measure.calibration.vllm_drive import (
    CALIBRATION,
    VALIDATION,
    VllmCalibration,
    run_summary,
)
from rearrival.model.cost.vllm_fit import Cell, Coefficient, VllmStepCostFit
from rearrival.model.cost.vllm_profile import vllm_profile_from_mapping

# What each coefficient multiplies, in the profile's provenance.
TERMS = {
    "base_s": "seconds per engine step",
    "per_decode_token_s": "seconds per decode (generation) token as run, D_pad",
    "per_prefill_token_s": "seconds per prefill (context) token, P",
    "per_kv_token_s": "seconds per token of context the step's requests had computed before it, C",
}


def _round(value: float) -> float:
    return float(f"{value:.6g}")


def _coefficient(coefficient: Coefficient, fit: VllmStepCostFit, where: str) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "value": _round(coefficient.value),
        "ci": [_round(coefficient.ci[0]), _round(coefficient.ci[1])],
        "identified": coefficient.identified,
        "unconstrained": _round(coefficient.unconstrained),
    }
    how = (
        f"fitted: {TERMS[coefficient.name]}; least squares with every "
        f"coefficient >= 0 on {fit.steps} logged steps ({where}); 95 % moving-block "
        f"bootstrap interval ({fit.resamples} resamples of {fit.block_steps}-step blocks)"
    )
    if not coefficient.identified:
        how += (
            "; NOT IDENTIFIED: the interval reaches 0, so at this noise the data cannot "
            "tell the term from zero"
            + (" (the fit holds it at its bound 0)" if coefficient.value == 0 else "")
        )
    entry["provenance"] = how
    return entry


def _cell(cell: Cell, bound: float, min_steps: int) -> dict[str, Any]:
    checked = cell.steps >= min_steps
    return {
        "kind": cell.kind,
        "decode_tokens": cell.decode_tokens,
        "prefill_tokens_up_to": cell.prefill_bin,
        "context_read_up_to": cell.context_bin,
        "steps": cell.steps,
        "observed_mean_ms": _round(cell.observed_mean_s * 1e3),
        "fitted_mean_ms": _round(cell.fitted_mean_s * 1e3),
        "relative": _round(cell.relative),
        "within_bound": (abs(cell.relative) <= bound) if checked else None,
    }


def cell_label(cell: dict[str, Any]) -> str:
    """A residual cell in words, e.g. ``prefill P<=512 C<=16384``."""
    parts = [str(cell["kind"])]
    if cell["decode_tokens"]:
        parts.append(f"D={cell['decode_tokens']}")
    if cell["prefill_tokens_up_to"]:
        parts.append(f"P<={cell['prefill_tokens_up_to']}")
    parts.append(f"C<={cell['context_read_up_to']}" if cell["context_read_up_to"] else "C=0")
    return " ".join(parts)


def _residuals(fit: VllmStepCostFit, bound: float, min_steps: int) -> dict[str, Any]:
    cells = [_cell(c, bound, min_steps) for c in fit.cells]
    checked = [c for c in cells if c["within_bound"] is not None]
    return {
        "bound_relative": bound,
        "min_cell_steps": min_steps,
        "meaning": "per cell of steps alike in kind, decode tokens, prefill tokens (up to a "
        "power of two) and context read (up to a power of four): observed and fitted mean "
        "step time; a cell of at least min_cell_steps steps is within the bound when its "
        "relative difference is at most bound_relative",
        "max_abs_relative": _round(max(abs(c["relative"]) for c in checked)) if checked else None,
        "rms_residual_ms": _round(fit.rms_residual_s * 1e3),
        "beyond_bound": [cell_label(c) for c in checked if not c["within_bound"]],
        "cells": cells,
    }


def _machine(calibration: VllmCalibration) -> dict[str, Any]:
    """Where it was measured: the CPU, its count, the load on the machine before and
    after (a shared machine's other work slows steps)."""
    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    before, after = calibration.load_average
    return {
        "cpu": model or platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "load_average_before": [round(x, 2) for x in before],
        "load_average_after": [round(x, 2) for x in after],
    }


def _validation(calibration: VllmCalibration) -> dict[str, Any]:
    v = calibration.validation
    return {
        "run_id": v.run_id,
        "plan": "held out: a small multi-round agent plan (measure/calibration/vllm_design.py "
        "validation_plan), no segment of the calibration plan",
        "requests": v.requests,
        "logged_steps": v.steps,
        "logged_elapsed_s": _round(v.logged_s),
        "simulated_device_s": _round(v.simulated_s),
        "simulated_steps": v.simulated_steps,
        "simulated_relative_error": _round(v.simulated_relative),
        "priced_steps_s": _round(v.priced_s),
        "priced_relative_error": _round(v.priced_relative),
        "meaning": "relative error = predicted / logged - 1. simulated: simulate_vllm with "
        "the fitted step cost and the run's observed re-arrival send times (the predictor "
        "as the search uses it); priced: the fitted step cost summed over the run's own "
        "steps as replayed (the cost model alone)",
    }


def _engine(calibration: VllmCalibration) -> dict[str, Any]:
    engine = calibration.calibration_run.manifest["engine"]
    c = calibration.settings.configuration
    return {
        "name": engine["name"],
        "version": engine["version"],
        "distributions": engine["distributions"],
        "device": engine["device"],
        "knobs": {
            "max_num_seqs": c.batch_size,
            "num_blocks": c.num_blocks,
            "block_size": c.block_size,
            "max_num_batched_tokens": c.max_num_batched_tokens,
            "max_model_len": engine["max_model_len"],
            "capture_sizes": engine["capture_sizes"],
        },
        "argv": engine["argv"],
    }


def _digest(fit: VllmStepCostFit) -> str:
    values = [c.value for c in fit.coefficients]
    return hashlib.sha256(json.dumps(values).encode()).hexdigest()[:12]


def profile_document(
    calibration: VllmCalibration,
    *,
    command: list[str],
    measured_at: str,
    memory: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The profile (module docstring); ``command`` is the command line that made it;
    ``memory`` the device's memory block (rearrival.measure.calibration.vllm_memory),
    None on a device without one."""
    fit, settings = calibration.fit, calibration.settings
    engine = calibration.calibration_run.manifest["engine"]
    model = engine["model"]
    device = str(engine["device"])
    where = f"vLLM {engine['version']} on {device}, {calibration.calibration_run.run_id}"
    document = {
        "profile_version": f"vllm-calibrated/{device}/{_digest(fit)}",
        "substrate": "vllm",
        "model_id": Path(model["directory"]).name,
        "model_config_sha256": model["config_sha256"],
        "vllm_version": str(engine["version"]),
        "device": device,
        "what": f"step cost of vLLM {engine['version']} on {device.upper()} serving "
        f"{Path(model['directory']).name} ({model['weights']} weights, {model['dtype']}), "
        "calibrated by `rearrival calibrate --backend vllm`"
        + ("; CPU timings, not GPU timings" if device == "cpu" else ""),
        "step_cost": {c.name: _coefficient(c, fit, where) for c in fit.coefficients},
        "kv": {
            "bytes_per_token": {
                "value": int(model["kv_bytes_per_token"]),
                "provenance": "model: 2 x layers x kv_heads x head_dim x bytes per element of "
                f"{Path(model['directory']).name}'s config.json ({model['dtype']})",
            },
        },
        **({"memory": memory} if memory is not None else {}),
        "engine": _engine(calibration),
        "fit": {
            "method": "least squares of each step's logged elapsed time on (1, D_pad, P, C), "
            "every coefficient >= 0 (scipy lsq_linear, bvls); C from the run replayed on the "
            "vLLM rules of docs/DESIGN.md §15, every step's counts checked against the log",
            "samples": fit.steps,
            "warmup_steps_excluded": settings.design.warmup_steps,
            "resamples": fit.resamples,
            "block_steps": fit.block_steps,
            "ci_level": 0.95,
            "seed": settings.seed,
            "observed_total_s": _round(fit.observed_total_s),
            "fitted_total_s": _round(fit.fitted_total_s),
            "design": settings.design.as_dict(),
        },
        "residuals": _residuals(fit, settings.max_residual, settings.min_cell_steps),
        "validation": _validation(calibration),
        "runs": [
            run_summary(calibration.calibration_run, CALIBRATION),
            run_summary(calibration.validation_run, VALIDATION),
        ],
        "provenance": {
            "measured_at": measured_at,
            "command": shlex.join(command),
            "wall_s": round(calibration.wall_s, 1),
            "machine": _machine(calibration),
        },
    }
    vllm_profile_from_mapping(document, "<calibrated vLLM profile>")  # the loader accepts it
    return document


def write_profile(document: dict[str, Any], path: Path) -> Path:
    """Write the profile YAML atomically with a header saying what it is."""
    header = (
        "# vLLM step-cost profile written by `rearrival calibrate --backend vllm`\n"
        "# (docs/DESIGN.md §15, 'Calibration'); layout of rearrival.model.cost.vllm_profile.\n"
        f"# {document['what']}.\n"
    )
    text = header + yaml.safe_dump(
        document, sort_keys=False, width=100, default_flow_style=None, allow_unicode=True
    )
    atomic_write_bytes(path, text.encode())
    return path
