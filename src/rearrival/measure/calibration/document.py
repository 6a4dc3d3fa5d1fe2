"""The calibrated profile: a finished calibration written in the schema of
``data/profile_rbln_ca25.yaml`` (docs/DESIGN.md §3; paper Table VII).

Every value carries its kind (measured, fitted, interpolated, assumed, model, published),
and measured or fitted ones their CI, sample count, backend and run ids, so a reader can
tell what this backend showed from what was carried over. One function per section.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from rearrival.atomic import atomic_write_bytes
from rearrival.config.calibration import MeasurementSettings, ModelSpec
from rearrival.config.study import StudyConfig
from rearrival.measure.calibration.drive import Calibration
from rearrival.model.cost.fits import interpolate_bucket, kv_bytes_per_token
from rearrival.model.cost.profile import Profile, measured_profile

PROFILE_FILE = "profile.yaml"


def required_buckets(cfg: StudyConfig) -> tuple[int, ...]:
    """Every bucket a configured study or the search can select (docs/DESIGN.md §12: the search
    draws buckets from 1..batch_size for each candidate batch size)."""
    wanted = {b for c in cfg.configurations.values() for b in c.buckets}
    batch_sizes = cfg.search.batch_sizes
    wanted.update(range(1, max(batch_sizes) + 1))
    return tuple(sorted(wanted))


def _ms(value: float) -> float:
    return round(value * 1e3, 6)


def _ms_pair(pair: tuple[float, float]) -> list[float]:
    return [_ms(pair[0]), _ms(pair[1])]


def profile_document(
    calibration: Calibration,
    config: MeasurementSettings,
    required_buckets: tuple[int, ...] = (),
    reference: Profile | None = None,
) -> dict[str, Any]:
    """The calibrated profile in the schema of ``profile_rbln_ca25.yaml``.

    g(b) = f(b) + alpha is what the step log measures; the split keeps the reference
    profile's alpha (labelled ``assumed``), so f(b) = g(b) - alpha and every prediction,
    which only uses f(b) + alpha + beta*n, is set by the measurements alone.
    """
    reference = reference or measured_profile()
    backend, model = calibration.backend, config.model
    alpha_ms = _ms(reference.alpha_s)
    g_points = {fit.bucket: fit.g_s for fit in calibration.decode.buckets}
    interpolated = _interpolated_costs(g_points, required_buckets, alpha_ms)
    return {
        "profile_version": f"calibrated/{backend}/{_samples_digest(calibration, g_points)}",
        "model_id": model.name,
        "stack": _stack_section(calibration, config),
        "calibration": {
            "backend": backend,
            "run_ids": list(calibration.measured.run_ids),
            "settings": _plain(config.calibration.as_dict()),
            "measured_buckets": sorted(g_points),
            "interpolated_buckets": sorted(interpolated),
        },
        "decode": _decode_section(calibration, config, alpha_ms, interpolated),
        "prefill": _prefill_section(calibration),
        "reuse": {
            "block_tokens": {
                "value": calibration.reuse.block_tokens,
                "kind": "checked",
                "checked": calibration.reuse.checked,
                "violations": len(calibration.reuse.violations),
                "source": "calibration: every re-arrival with a surviving "
                "prefix reported floor(min(P, L-1)/128)*128",
            },
        },
        "kv": _kv_section(model),
        "compile": _compile_section(calibration, reference),
    }


def _samples_digest(calibration: Calibration, g_points: dict[int, float]) -> str:
    """12 hex digits naming the fitted numbers, for the profile version."""
    decode, prefill = calibration.decode, calibration.prefill
    return hashlib.sha256(
        json.dumps(
            [sorted(g_points.items()), decode.beta_s, prefill.per_chunk_s, prefill.per_token_s],
        ).encode()
    ).hexdigest()[:12]


def _stack_section(calibration: Calibration, config: MeasurementSettings) -> dict[str, Any]:
    """What was measured: backend, emulator truth, model and calibration artifacts."""
    model = config.model
    return {
        "backend": calibration.backend,
        "emulator_truth": calibration.truth_version,
        "model": f"{model.name} {model.dtype}, max_seq_len {model.max_seq_len}, "
        f"num_devices {model.num_devices}",
        "artifacts": [
            {"name": a.name, "buckets": list(a.buckets), "batch_size": a.batch_size}
            for a in config.calibration.artifacts
        ],
    }


def _measured_costs(calibration: Calibration, alpha_ms: float) -> dict[int, Any]:
    """f(b) = g(b) - alpha of every measured bucket, with the samples behind it."""
    by_bucket = calibration.measured.decode.groupby("bucket")
    costs: dict[int, Any] = {}
    for fit in calibration.decode.buckets:
        rows = by_bucket.get_group(fit.bucket)
        costs[fit.bucket] = {
            "value": round(_ms(fit.g_s) - alpha_ms, 6),
            "kind": "measured",
            "g_ms": _ms(fit.g_s),
            "g_ci95_ms": _ms_pair(fit.ci_s),
            "samples": fit.samples,
            "n_values": list(fit.n_values),
            "artifact": str(rows["artifact"].iloc[0]),
            "backend": calibration.backend,
            "run_ids": sorted(set(rows["run_id"])),
            "source": "calibration: steady decode at exactly n, step-log durations, "
            "least squares of per-(b, n) medians on g(b) + beta*n; bootstrap CI",
        }
    return costs


def _interpolated_costs(
    g_points: dict[int, float], required: tuple[int, ...], alpha_ms: float
) -> dict[int, Any]:
    """f(b) of every required bucket that was not measured, for reading only."""
    interpolated = {}
    for bucket in sorted(set(required) - set(g_points)):
        value, between = interpolate_bucket(g_points, bucket)
        interpolated[bucket] = {
            "value": round(_ms(value) - alpha_ms, 6),
            "kind": "interpolated",
            "between": list(between),
            "source": "docs/DESIGN.md §3 rule; computed again at run time, never a reference point",
        }
    return interpolated


def _decode_section(
    calibration: Calibration,
    config: MeasurementSettings,
    alpha_ms: float,
    interpolated: dict[int, Any],
) -> dict[str, Any]:
    """f(b), alpha, beta and the residuals of the decode fit."""
    decode, backend = calibration.decode, calibration.backend
    return {
        "bucket_cost_ms": _measured_costs(calibration, alpha_ms),
        "alpha_ms": {
            "value": alpha_ms,
            "kind": "assumed",
            "source": "the step log measures g(b) = f(b) + alpha only; alpha "
            "keeps the published split (paper Table VII), so f(b) = "
            "g(b) - alpha and f(b) + alpha is measured",
        },
        "beta_ms_per_request": {
            "value": _ms(decode.beta_s),
            "kind": "fitted",
            "ci95": _ms_pair(decode.beta_ci_s),
            "samples": decode.samples,
            "backend": backend,
            "run_ids": sorted(set(calibration.measured.decode["run_id"])),
            "source": "calibration: common slope of the step time in n across buckets",
        },
        "residuals": {
            "bound_relative": config.calibration.max_residual,
            "max_abs_relative": round(decode.max_abs_residual, 6),
            "rms_relative": round(decode.rms_residual, 6),
            "points": [
                {
                    "bucket": r.bucket,
                    "n": r.n,
                    "samples": r.samples,
                    "median_ms": _ms(r.median_s),
                    "fitted_ms": _ms(r.fitted_s),
                }
                for r in decode.residuals
            ],
        },
        "interpolated_bucket_cost_ms": interpolated,
        "unmeasured_buckets": "linear interpolation between measured points; above the "
        "largest, extrapolation along the line through the two "
        "largest (docs/DESIGN.md §3); never used as reference points",
    }


def _prefill_section(calibration: Calibration) -> dict[str, Any]:
    """The prefill model ceil(q/128)*(a + b*q) with CIs, and its errors by range."""
    prefill, backend = calibration.prefill, calibration.backend
    prefill_runs = sorted(set(calibration.measured.prefill["run_id"]))
    return {
        "chunk_tokens": {
            "value": prefill.chunk_tokens,
            "kind": "measured",
            "source": "vllm-rbln prefill chunk (paper Section III-C)",
        },
        "per_chunk_s": {
            "value": prefill.per_chunk_s,
            "kind": "fitted",
            "ci95": list(prefill.per_chunk_ci_s),
            "samples": prefill.samples,
            "backend": backend,
            "run_ids": prefill_runs,
            "source": "calibration: server-side prefill times, relative "
            "least squares on ceil(q/128)*(a + b*q)",
        },
        "per_token_s": {
            "value": prefill.per_token_s,
            "kind": "fitted",
            "ci95": list(prefill.per_token_ci_s),
            "samples": prefill.samples,
            "backend": backend,
            "run_ids": prefill_runs,
            "source": "calibration: same fit",
        },
        "fit_range_tokens": {
            "value": list(prefill.fit_range),
            "kind": "measured",
            "source": "smallest and largest computed tokens measured",
        },
        "errors_by_range": [asdict(r) for r in prefill.ranges],
    }


def _kv_section(model: ModelSpec) -> dict[str, Any]:
    """The model's KV geometry, from its config.json or the config's model section."""

    def arch(value: int, what: str) -> dict[str, Any]:
        origin = model.config_json or "config model: section"
        return {"value": value, "kind": "model", "source": f"{what} of {model.name} ({origin})"}

    kv_bytes = kv_bytes_per_token(model.layers, model.kv_heads, model.head_dim, model.dtype_bytes)
    return {
        "layers": arch(model.layers, "num_hidden_layers"),
        "kv_heads": arch(model.kv_heads, "num_key_value_heads"),
        "head_dim": arch(model.head_dim, "head_dim"),
        "bytes_per_element": arch(model.dtype_bytes, model.dtype),
        "slot_tokens": arch(model.max_seq_len, "max_seq_len (eager: one block per sequence)"),
        "num_devices": arch(model.num_devices, "deployment"),
        "bytes_per_token": {
            "value": kv_bytes,
            "kind": "derived",
            "source": "2 x layers x kv_heads x head_dim x bytes",
        },
    }


def _compile_section(calibration: Calibration, reference: Profile) -> dict[str, Any]:
    """The compile-cost fit on backend rbln; elsewhere the published Table XIV numbers."""
    compile_fit = calibration.compile
    if compile_fit is None:
        section = {
            "seconds_intercept": {
                "value": reference.compile_intercept_s,
                "kind": "published",
                "source": "authors' fit (paper Table XIV); compile records "
                "are fitted only on backend rbln",
            },
            "seconds_per_graph": {
                "value": reference.compile_per_graph_s,
                "kind": "published",
                "source": "authors' fit (paper Table XIV)",
            },
            "artifact_gib_intercept": {
                "value": reference.artifact_intercept_gib,
                "kind": "published",
                "source": "paper Table XIV",
            },
            "artifact_gib_per_bucket": {
                "value": reference.artifact_per_bucket_gib,
                "kind": "published",
                "source": "paper Table XIV",
            },
        }
    else:
        fitted = {
            "kind": "fitted",
            "samples": compile_fit.samples,
            "backend": calibration.backend,
            "source": "least squares over this backend's compile records",
        }
        section = {
            "seconds_intercept": {"value": compile_fit.seconds_intercept, **fitted},
            "seconds_per_graph": {"value": compile_fit.seconds_per_graph, **fitted},
            "artifact_gib_intercept": {"value": compile_fit.gib_intercept, **fitted},
            "artifact_gib_per_bucket": {"value": compile_fit.gib_per_bucket, **fitted},
        }
    section["budget_s"] = {
        "value": reference.compile_budget_s,
        "kind": "assumed",
        "source": "search compile budget (paper Section V-A)",
    }
    return section


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def write_profile(document: dict[str, Any], path: Path) -> Path:
    """Write the profile YAML atomically with a header saying what it is."""
    header = (
        "# Calibrated substrate profile written by `rearrival calibrate` (docs/DESIGN.md §3).\n"
        "# Same schema as rearrival/data/profile_rbln_ca25.yaml; every value carries\n"
        "# its kind (measured/fitted/interpolated/assumed/model), CI, samples, backend\n"
        "# and run ids. Interpolated buckets are listed for reading only.\n"
    )
    text = header + yaml.safe_dump(document, sort_keys=False, width=100, default_flow_style=None)
    atomic_write_bytes(path, text.encode())
    return path
