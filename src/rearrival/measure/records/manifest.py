"""Manifests of run records (docs/DESIGN.md §6): the helpers backends use to fill every
contract key consistently, from the run id to the software stack and the outcome."""

from __future__ import annotations

import hashlib
import json
import platform
import re
from datetime import UTC, datetime
from importlib import metadata as importlib_metadata
from typing import Any

from rearrival.measure.records.contract import PREREG_KEYS
from rearrival.model.configuration import Configuration, RblnConfiguration

# Distributions whose versions explain a run; absent ones are recorded as absent.
SOFTWARE = (
    "rearrival",
    "pandas",
    "pyarrow",
    "numpy",
    "scipy",
    "snakemake",
    "aiohttp",
    "vllm",
    "vllm-rbln",
    "optimum-rbln",
)


def utc_now_iso() -> str:
    """Current UTC time as ISO 8601 with an explicit +00:00 offset (manifest times)."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def software_versions() -> dict[str, str]:
    """Versions of Python and the packages that shape a run ('absent' when not installed).

    Recorded in every manifest so a result can be traced to the exact stack (docs/DESIGN.md §6).
    """
    versions = {"python": platform.python_version()}
    for name in SOFTWARE:
        try:
            versions[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


def _slug(value: object) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", str(value)).strip("-") or "x"


def new_run_id(study: str, condition: str, replicate: int, backend: str) -> str:
    """Deterministic, file-name-safe id: readable parts plus a short hash of the exact
    inputs, so two labels that slugify alike still get different ids."""
    canonical = json.dumps([study, condition, int(replicate), backend])
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:8]
    parts = (_slug(study), _slug(condition), f"r{int(replicate)}", _slug(backend), digest)
    return ".".join(parts)


def configuration_entry(configuration: Configuration) -> dict[str, Any]:
    """A manifest's ``configuration``: its knobs (``as_dict``), headed by its substrate on
    every substrate but RBLN, whose entries (every record of the paper's studies) name
    none and keep their bytes; ``configuration_from_mapping`` reads either back."""
    knobs = configuration.as_dict()
    if isinstance(configuration, RblnConfiguration):
        return knobs
    return {"substrate": configuration.substrate, **knobs}


def manifest_template(
    *,
    study: str,
    backend: str,
    configuration: Configuration,
    variant: str,
    condition: str,
    replicate: int,
    n: int,
    plan_path: str,
    plan_sha256: str,
    plan_seed: int | None,
    run_seed: int,
    condition_order: list[str] | tuple[str, ...],
    time_scale: float = 1.0,
    patch_sha256: str | None = None,
    prereg: dict[str, Any] | None = None,
    run_id: str | None = None,
    started_at: str | None = None,
) -> dict[str, Any]:
    """A manifest with every contract key; status starts as 'partial' (the run has not
    finished) until ``finish_manifest`` marks the outcome. ``configuration`` is written
    by ``configuration_entry``."""
    return {
        "run_id": run_id or new_run_id(study, condition, replicate, backend),
        "study": study,
        "backend": backend,
        "configuration": configuration_entry(configuration),
        "variant": variant,
        "condition": condition,
        "replicate": int(replicate),
        "n": int(n),
        "plan_path": str(plan_path),
        "plan_sha256": plan_sha256,
        "seeds": {"plan": plan_seed, "run": int(run_seed)},
        "software": software_versions(),
        "patch_sha256": patch_sha256,
        "prereg": _prereg_entry(prereg or {}),
        "started_at": started_at or utc_now_iso(),
        "finished_at": None,
        "condition_order": [str(c) for c in condition_order],
        "status": "partial",
        "reason": "run did not finish",
        "time_scale": float(time_scale),
    }


def _prereg_entry(prereg: dict[str, Any]) -> dict[str, Any]:
    """The manifest's ``prereg`` field; ``witness`` (remote and ref) only when the study
    has a witness, so manifests of the default pipeline keep their three keys."""
    entry = {key: prereg.get(key) for key in PREREG_KEYS}
    if prereg.get("witness"):
        entry["witness"] = dict(prereg["witness"])
    return entry


def finish_manifest(
    manifest: dict[str, Any],
    *,
    status: str = "complete",
    reason: str | None = None,
    finished_at: str | None = None,
) -> dict[str, Any]:
    """A copy of ``manifest`` with the run's outcome and end time filled in."""
    return manifest | {
        "status": status,
        "reason": reason,
        "finished_at": finished_at or utc_now_iso(),
    }
