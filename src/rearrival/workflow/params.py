"""The config values each rule's jobs depend on, and the digest a job checks them by
(docs/DESIGN.md §10).

rules/common.smk passes each job the sha256 of the values its stage depends on as a
param, so Snakemake reruns exactly the jobs an edit affects (a seed or N edit reruns a
study's plans and everything after them, a description only the report). The job gets
the same digest as ``--values`` and its verb recomputes it from the study definition it
loads (:func:`check_values`): a file edited after the DAG was built, or read from
another checkout, is refused in one line instead of running with values the workflow
did not plan (and would record as the old ones).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from rearrival.config.backends import without_serving_defaults
from rearrival.config.study import Study, StudyConfig, tool_table_for
from rearrival.errors import RearrivalError
from rearrival.vocabulary import VLLM
from rearrival.workflow.preregister import registered_design

PLAN_KEYS = ("study", "study_seed", "replicates", "tool_table", "n", "seed_block", "workload")


class ValuesChangedError(RearrivalError):
    """A job's study definition is not the one the workflow planned it with."""


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _plans(cfg: StudyConfig, study: Study) -> dict[str, Any]:
    design = registered_design(cfg, study)
    return {key: design[key] for key in PLAN_KEYS if key in design}


def _predict(cfg: StudyConfig, study: Study) -> dict[str, Any]:
    design = registered_design(cfg, study)
    keys = ("configurations", "variants", "prediction_profile")
    return _plans(cfg, study) | {key: design[key] for key in keys}


def _judged(cfg: StudyConfig, study: Study) -> dict[str, Any]:
    """What the prereg and decide stages depend on: the design and the criteria."""
    return registered_design(cfg, study) | {"criteria": cfg.decision.to_dict()}


def _run(cfg: StudyConfig, study: Study) -> dict[str, Any]:
    # imported here: the backends pull in the HTTP client, which every other stage's
    # --values check (search, advise run by hand) would otherwise pay at start
    from rearrival.measure.backends import BackendSettings

    settings = asdict(BackendSettings.from_study_config(cfg))
    settings["vllm"] = without_serving_defaults(settings["vllm"])
    return registered_design(cfg, study) | {"settings": settings}


def _study_search(cfg: StudyConfig, study: Study) -> dict[str, Any]:
    return {
        "search": study.search.as_dict() if study.search is not None else None,
        "workload": registered_design(cfg, study).get("workload"),
        "study_seed": cfg.study_seed,
        "profile": cfg.measurement.profile,
        "tool_table": tool_table_for(cfg).source,
        "baseline": cfg.configurations[study.baseline].as_dict(),
        # the vLLM search's axes beside the study's batch sizes (backend vllm)
        **({"vllm": without_serving_defaults(asdict(cfg.vllm))} if cfg.backend == VLLM else {}),
    }


def _compile(cfg: StudyConfig, study: Study) -> dict[str, Any]:
    return {
        "configurations": registered_design(cfg, study)["configurations"],
        "model": asdict(cfg.measurement.model),
        "rbln": asdict(cfg.rbln),
    }


def _injection(cfg: StudyConfig) -> dict[str, Any]:
    return {
        "injection": asdict(cfg.injection),
        "backend": cfg.backend,
        "study_seed": cfg.study_seed,
        "configurations": {name: c.as_dict() for name, c in cfg.configurations.items()},
    }


def _calibration(cfg: StudyConfig) -> dict[str, Any]:
    return {
        "backend": cfg.backend,
        "study_seed": cfg.study_seed,
        "emulator_truth": cfg.measurement.emulator_truth,
        "model": asdict(cfg.measurement.model),
        "calibration": cfg.measurement.calibration.as_dict(),
        "rbln": asdict(cfg.rbln),
    }


def _search(cfg: StudyConfig) -> dict[str, Any]:
    return {
        "search": cfg.search.as_dict(),
        "study_seed": cfg.study_seed,
        "profile": cfg.measurement.profile,
        "tool_table": tool_table_for(cfg).source,
        "configurations": {name: c.as_dict() for name, c in cfg.configurations.items()},
    }


def _report(cfg: StudyConfig) -> dict[str, Any]:
    """Everything: the report states the whole definition (descriptions included), every
    default filled in by the models (the capacity section only when given, so a study
    without one keeps its digest)."""
    values = asdict(cfg)
    for section in ("capacity", "fleet"):
        if values[section] is None:
            del values[section]
    return values


def _capacity(cfg: StudyConfig) -> dict[str, Any]:
    return {"capacity": None if cfg.capacity is None else asdict(cfg.capacity)}


def _fleet(cfg: StudyConfig) -> dict[str, Any]:
    """The fleet study's stages (rules/fleet.smk): its section, the two pools' knobs, the
    profile its predictions are priced with and how the servers are started."""
    if cfg.fleet is None:
        return {"fleet": None}
    return {
        "fleet": cfg.fleet.as_dict(),
        "configurations": {n: cfg.configurations[n].as_dict() for n in cfg.fleet.pools},
        "profile": cfg.measurement.profile,
        "vllm": asdict(cfg.vllm),
        "study_seed": cfg.study_seed,
    }


# stage -> the values its jobs depend on; per-study stages take the study
PER_STUDY: dict[str, Callable[[StudyConfig, Study], dict[str, Any]]] = {
    "plans": _plans,
    "predict": _predict,
    "prereg": _judged,
    "run": _run,
    "decide": _judged,
    "search": _study_search,
    "compile": _compile,
}
WHOLE: dict[str, Callable[[StudyConfig], dict[str, Any]]] = {
    "injection": _injection,
    "calibration": _calibration,
    "search": _search,
    "report": _report,
    "capacity": _capacity,
    "fleet": _fleet,
}


def stage_key(stage: str, study: str | None = None) -> str:
    """``stage`` or ``stage:study``, the key of one job's values."""
    return stage if study is None else f"{stage}:{study}"


def stage_values(cfg: StudyConfig, stage: str, study: str | None = None) -> dict[str, Any]:
    """The config values the jobs of ``stage`` (for ``study``, when per study) depend on."""
    if study is None:
        return WHOLE[stage](cfg)
    return PER_STUDY[stage](cfg, cfg.study(study))


def values_digest(values: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of ``values``: the param Snakemake compares."""
    return hashlib.sha256(_canonical(values).encode()).hexdigest()


def workflow_params(cfg: StudyConfig) -> dict[str, str]:
    """Every job's values digest, keyed ``stage`` or ``stage:study`` (rules/common.smk)."""
    params = {stage: values_digest(values(cfg)) for stage, values in WHOLE.items()}
    for name, study in cfg.studies.items():
        for stage, values in PER_STUDY.items():
            if stage != "search" or study.search is not None:
                params[stage_key(stage, name)] = values_digest(values(cfg, study))
    return params


def check_values(cfg: StudyConfig, stage: str, study: str | None, given: str | None) -> None:
    """Refuse a job whose study definition gives other values than the digest its rule
    passed (``given``; None outside the workflow: nothing to check)."""
    if given is None:
        return
    now = values_digest(stage_values(cfg, stage, study))
    if now != given:
        raise ValuesChangedError(
            f"{cfg.source}: the {stage_key(stage, study)} values differ from those the "
            f"workflow planned this job with (--values {given[:12]}..., the file gives "
            f"{now[:12]}...); it changed after snakemake built the DAG: run snakemake again"
        )
