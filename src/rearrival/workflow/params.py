"""The config values each rule's jobs depend on (rules/common.smk passes them as params),
so an edit reruns exactly the jobs it affects (docs/DESIGN.md §10).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from rearrival.config.study import StudyConfig, tool_table_for
from rearrival.measure.backends import BackendSettings
from rearrival.workflow.preregister import registered_design


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


PLAN_KEYS = ("study", "study_seed", "replicates", "tool_table", "n", "seed_block", "workload")


def workflow_params(cfg: StudyConfig, raw_config: dict[str, Any]) -> dict[str, str]:
    """The config values each rule's jobs depend on, as canonical JSON keyed
    ``stage`` or ``stage:study``. The Snakefile passes them as params, and Snakemake
    reruns a job whose params changed: a seed or N edit reruns a study's plans and
    everything after them, a report-only edit (a study's description) only the report.
    """
    criteria = cfg.decision.to_dict()
    backend = asdict(BackendSettings.from_study_config(cfg))
    params = {"report": _canonical(raw_config)}
    for name, study in cfg.studies.items():
        design = registered_design(cfg, study)
        plans = {key: design[key] for key in PLAN_KEYS if key in design}
        params[f"plans:{name}"] = _canonical(plans)
        params[f"predict:{name}"] = _canonical(
            plans
            | {key: design[key] for key in ("configurations", "variants", "prediction_profile")}
        )
        params[f"prereg:{name}"] = _canonical(design | {"criteria": criteria})
        params[f"run:{name}"] = _canonical(design | {"settings": backend})
        params[f"decide:{name}"] = _canonical(design | {"criteria": criteria})
        if study.search is not None:
            params[f"search:{name}"] = _canonical(
                {
                    "search": study.search.as_dict(),
                    "workload": design.get("workload"),
                    "study_seed": cfg.study_seed,
                    "profile": cfg.measurement.profile,
                    "tool_table": design["tool_table"],
                    "baseline": cfg.configurations[study.baseline].as_dict(),
                }
            )
        params[f"compile:{name}"] = _canonical(
            {"configurations": design["configurations"], "rbln": asdict(cfg.rbln)}
        )
    params["injection"] = _canonical(
        {
            "injection": asdict(cfg.injection),
            "backend": cfg.backend,
            "study_seed": cfg.study_seed,
            "configurations": {name: c.as_dict() for name, c in cfg.configurations.items()},
        }
    )
    params["calibration"] = _canonical(
        {
            "backend": cfg.backend,
            "study_seed": cfg.study_seed,
            "emulator_truth": cfg.measurement.emulator_truth,
            "model": asdict(cfg.measurement.model),
            "calibration": cfg.measurement.calibration.as_dict(),
        }
    )
    params["search"] = _canonical(
        {
            "search": cfg.search.as_dict(),
            "study_seed": cfg.study_seed,
            "profile": cfg.measurement.profile,
            "tool_table": tool_table_for(cfg).source,
            "configurations": {name: c.as_dict() for name, c in cfg.configurations.items()},
        }
    )
    return params
