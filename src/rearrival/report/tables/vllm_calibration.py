"""Table VII-V: the vLLM analogue of the paper's Table VII, the calibrated step cost of
docs/DESIGN.md §15 ("Calibration") as a vLLM calibration wrote it.

Each of the four coefficients with its 95 % interval, whether the data identify it (an
interval reaching 0 does not) and the unconstrained least-squares value beside it; the
residual of every cell of steps with the bound; the held-out run's device time against
the two predictions (the predictor with the run's re-arrival times, and the fitted cost
priced on the run's own steps). Everything is read from the profile file that
``rearrival calibrate --backend vllm`` wrote (``rearrival.measure.calibration.
vllm_document``); nothing is fitted, simulated or recomputed here, and the table says
what its seconds are (a CPU calibration's are CPU seconds, never GPU ones).

``vllm_calibration_table`` builds it from one declared profile file (a missing file
gives the table with a "not produced" note, as the other report tables do);
``write_vllm_calibration_table`` writes its CSV, Markdown and LaTeX files beside the
report's other tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from rearrival.atomic import atomic_write_text
from rearrival.errors import RearrivalError
from rearrival.measure.calibration.vllm_document import cell_label
from rearrival.model.cost.vllm_profile import COEFFICIENTS
from rearrival.report.table_model import Column, Part, Table, table_csv, table_latex, table_markdown

TABLE_ID = "VII-V"
TITLE = "vLLM step cost (calibration)"
# Each coefficient in the unit it is read in: (what it multiplies, unit, scale from s).
UNITS = {
    "base_s": ("every step", "ms", 1e3),
    "per_decode_token_s": ("decode token D_pad", "us", 1e6),
    "per_prefill_token_s": ("prefill token P", "us", 1e6),
    "per_kv_token_s": ("context token read C", "ns", 1e9),
}
RENDERERS = (("csv", table_csv), ("md", table_markdown), ("tex", table_latex))


class VllmCalibrationTableError(RearrivalError, ValueError):
    """A file that is not a vLLM calibration's profile; names the file and the fix."""


def _coefficients(document: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
    rows = []
    for name in COEFFICIENTS:
        entry = document["step_cost"][name]
        term, unit, scale = UNITS[name]
        low, high = entry["ci"]
        rows.append(
            {
                "coefficient": name,
                "multiplies": term,
                "unit": unit,
                "value": entry["value"] * scale,
                "ci_low": low * scale,
                "ci_high": high * scale,
                "identified": "yes" if entry["identified"] else "NO (interval reaches 0)",
                "unconstrained": entry["unconstrained"] * scale,
            }
        )
    return tuple(rows)


def _cells(document: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
    def verdict(within: bool | None) -> str:
        return {True: "within", False: "BEYOND", None: "too few steps"}[within]

    return tuple(
        {
            "cell": cell_label(cell),
            "steps": cell["steps"],
            "observed_ms": cell["observed_mean_ms"],
            "fitted_ms": cell["fitted_mean_ms"],
            "relative": cell["relative"],
            "bound": verdict(cell["within_bound"]),
        }
        for cell in document["residuals"]["cells"]
    )


def _held_out(document: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
    v = document["validation"]
    return (
        {
            "prediction": "simulated (the predictor, observed re-arrival times)",
            "steps": v["simulated_steps"],
            "logged_s": v["logged_elapsed_s"],
            "predicted_s": v["simulated_device_s"],
            "relative": v["simulated_relative_error"],
            "run_ids": v["run_id"],
        },
        {
            "prediction": "priced (the fitted cost on the run's own steps)",
            "steps": v["logged_steps"],
            "logged_s": v["logged_elapsed_s"],
            "predicted_s": v["priced_steps_s"],
            "relative": v["priced_relative_error"],
            "run_ids": v["run_id"],
        },
    )


def _notes(document: Mapping[str, Any], source: str) -> tuple[str, ...]:
    fit, residuals = document["fit"], document["residuals"]
    provenance, machine = document["provenance"], document["provenance"]["machine"]
    engine = document["engine"]
    knobs = ", ".join(f"{k} {v}" for k, v in engine["knobs"].items())
    beyond = residuals["beyond_bound"]
    return (
        f"{source}: {document['what']}.",
        f"Measured {provenance['measured_at']} on {machine['cpus']} x {machine['cpu']} "
        f"(load {machine['load_average_before'][0]} before, "
        f"{machine['load_average_after'][0]} after) by `{provenance['command']}` in "
        f"{provenance['wall_s']} s; knobs: {knobs}.",
        f"Fit: {fit['samples']} logged steps after {fit['warmup_steps_excluded']} warm-up "
        f"steps; {fit['resamples']} moving-block bootstrap resamples of "
        f"{fit['block_steps']} steps; rms residual {residuals['rms_residual_ms']} ms.",
        f"{len(beyond)} residual cells beyond the bound of "
        f"{residuals['bound_relative']:.0%} (cells of at least "
        f"{residuals['min_cell_steps']} steps)" + (f": {', '.join(beyond)}." if beyond else "."),
        "Runs: " + " ".join(str(run["run_id"]) for run in document["runs"]) + ".",
    )


def table_vii_vllm(document: Mapping[str, Any], source: str) -> Table:
    """Table VII-V from a vLLM calibration's profile document (module docstring)."""
    calibration_run = next(r["run_id"] for r in document["runs"] if r["role"] == "calibration")
    coefficients = tuple(dict(row, run_ids=calibration_run) for row in _coefficients(document))
    return Table(
        TABLE_ID,
        TITLE,
        "The vLLM step cost step_s = base + per_decode * D_pad + per_prefill * P + per_kv * "
        "C (docs/DESIGN.md §15) fitted to every logged iteration of a real vLLM server (each "
        "step's C from the run replayed on the vLLM rules), every coefficient >= 0, with its "
        "95 % moving-block bootstrap interval; a coefficient whose interval reaches 0 is not "
        "identified. Residual cells: steps alike in kind and size, observed against fitted "
        "mean. Held out: a multi-round agent plan on a second server, its logged device time "
        f"against the predictions. Device {document['device']}: "
        + (
            "CPU seconds, not GPU seconds."
            if document["device"] == "cpu"
            else "GPU seconds, synchronous scheduling."
        ),
        (
            Part(
                "coefficients",
                (
                    Column("coefficient", "coefficient"),
                    Column("multiplies", "per"),
                    Column("unit", "unit"),
                    Column("value", "value", "f4"),
                    Column("ci_low", "CI low", "f4"),
                    Column("ci_high", "CI high", "f4"),
                    Column("identified", "identified"),
                    Column("unconstrained", "unconstrained", "f4"),
                    Column("run_ids", "runs", "ids"),
                ),
                coefficients,
            ),
            Part(
                "residual cells",
                (
                    Column("cell", "cell"),
                    Column("steps", "steps", "int"),
                    Column("observed_ms", "observed (ms)", "f4"),
                    Column("fitted_ms", "fitted (ms)", "f4"),
                    Column("relative", "difference", "pct2"),
                    Column("bound", "bound"),
                ),
                _cells(document),
            ),
            Part(
                "held-out device time",
                (
                    Column("prediction", "prediction"),
                    Column("steps", "steps", "int"),
                    Column("logged_s", "logged (s)", "f4"),
                    Column("predicted_s", "predicted (s)", "f4"),
                    Column("relative", "error", "pct2"),
                    Column("run_ids", "runs", "ids"),
                ),
                _held_out(document),
            ),
        ),
        _notes(document, source),
        "vllm",
    )


def _document(path: Path) -> dict[str, Any]:
    """The profile as written, refused in one line when it is not a vLLM calibration's."""
    try:
        tree = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise VllmCalibrationTableError(f"{path}: cannot be read as YAML ({exc})") from None
    needed = ("step_cost", "residuals", "validation", "fit", "runs", "engine", "provenance")
    missing = [k for k in needed if not isinstance(tree, dict) or k not in tree]
    if missing or tree.get("substrate") != "vllm":
        raise VllmCalibrationTableError(
            f"{path}: not a vLLM calibration's profile (missing {', '.join(missing) or 'none'}"
            f", substrate {tree.get('substrate') if isinstance(tree, dict) else None!r}); "
            "give the file `rearrival calibrate --backend vllm --out` wrote"
        )
    return tree


def vllm_calibration_table(profile: Path) -> Table:
    """Table VII-V from the declared profile file; a note, not an error, before it exists."""
    if not profile.is_file():
        return Table(
            TABLE_ID,
            TITLE,
            "vLLM calibration not run yet.",
            (),
            (f"{profile} not produced (`rearrival calibrate --backend vllm --out {profile}`).",),
            "none",
        )
    return table_vii_vllm(_document(profile), str(profile))


def write_vllm_calibration_table(profile: Path, tables: Path) -> list[Path]:
    """Write Table VII-V of ``profile`` as ``tables/table_VII-V.{csv,md,tex}`` (atomic
    writes, as the report's other tables); returns the files written."""
    table = vllm_calibration_table(profile)
    written = []
    for suffix, render in RENDERERS:
        path = tables / f"table_{TABLE_ID}.{suffix}"
        atomic_write_text(path, render(table))
        written.append(path)
    return written
