"""The typed study definition: every section a frozen dataclass (tests/test_config_schema.py
checks them against config/schema.yaml), and the per-rule config values the workflow
passes as params."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import yaml

from rearrival.config.calibration import CALIBRATED, CALIBRATED_PROFILE, PUBLISHED
from rearrival.config.study import load_study_config, study_config_from_mapping
from rearrival.workflow.params import workflow_params
from rearrival.workflow.preregister import design_changes, registered_design

REPO = Path(__file__).resolve().parents[1]
SMALL = yaml.safe_load((REPO / ".test" / "config" / "config.yaml").read_text())


def _minimal() -> dict:
    """Only the required keys: every section takes its model's defaults."""
    return {
        key: copy.deepcopy(SMALL[key])
        for key in ("backend", "study_seed", "replicates", "configurations", "studies")
    }


def test_sections_are_frozen():
    cfg = study_config_from_mapping(_minimal(), "<test>")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.decision.tau_fixed = 0.5  # type: ignore[misc]


def _params(raw: dict) -> dict[str, str]:
    return workflow_params(study_config_from_mapping(raw, "<test>"))


def _changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {key for key in before if before[key] != after[key]}


def test_a_seed_edit_changes_every_plan_and_everything_after_it():
    raw = copy.deepcopy(SMALL)
    before = _params(raw)
    raw["study_seed"] += 1
    changed = _changed(before, _params(raw))
    for study in SMALL["studies"]:
        assert {
            f"plans:{study}",
            f"predict:{study}",
            f"prereg:{study}",
            f"run:{study}",
            f"decide:{study}",
        } <= changed
    assert {"injection", "search", "report"} <= changed


def test_an_n_edit_changes_only_that_study_and_the_report():
    raw = copy.deepcopy(SMALL)
    before = _params(raw)
    raw["studies"]["grid"]["n"] = [6, 8]
    assert _changed(before, _params(raw)) == {
        "plans:grid",
        "predict:grid",
        "prereg:grid",
        "run:grid",
        "decide:grid",
        "report",
    }


def test_a_criteria_edit_changes_registrations_and_decisions_not_plans_or_runs():
    raw = copy.deepcopy(SMALL)
    before = _params(raw)
    raw["decision"]["tau_fixed"] = 0.05
    changed = _changed(before, _params(raw))
    assert changed == {
        f"{stage}:{study}" for study in SMALL["studies"] for stage in ("prereg", "decide")
    } | {"report"}


def test_a_description_edit_changes_only_the_report():
    raw = copy.deepcopy(SMALL)
    before = _params(raw)
    raw["studies"]["grid"]["description"] = "new words"
    assert _changed(before, _params(raw)) == {"report"}


def test_the_default_studies_predict_with_their_own_calibration():
    """The paper's method: Table VII measured on the stack it then predicted."""
    for path in (REPO / "config" / "config.yaml", REPO / ".test" / "config" / "config.yaml"):
        measurement = load_study_config(path).measurement
        assert measurement.profile == CALIBRATED
        assert measurement.profile_path() == CALIBRATED_PROFILE


def test_a_profile_edit_re_registers_every_study_once():
    """The profile is part of every registered design: switching it re-predicts,
    re-registers, re-runs and re-decides every study, and reruns the search (the shared
    one and every study's own)."""
    raw = copy.deepcopy(SMALL)
    before = _params(raw)
    raw["profile"] = PUBLISHED
    stages = ("predict", "prereg", "run", "decide")
    own_searches = {f"search:{name}" for name, s in SMALL["studies"].items() if "search" in s}
    assert own_searches, "the small config has a study with its own search (agents)"
    assert (
        _changed(before, _params(raw))
        == {f"{stage}:{study}" for study in SMALL["studies"] for stage in stages}
        | {"search", "report"}
        | own_searches
    )
    cfg = study_config_from_mapping(raw, "<test>")
    study = cfg.study("validation")
    registered = registered_design(study_config_from_mapping(copy.deepcopy(SMALL), "<t>"), study)
    criteria = cfg.decision.to_dict()
    assert design_changes(cfg, study, registered, criteria) == [
        "prediction_profile: registered 'calibrated', config 'published'"
    ]


def test_design_changes_name_each_changed_key():
    cfg = study_config_from_mapping(copy.deepcopy(SMALL), "<test>")
    study = cfg.study("validation")
    design = registered_design(cfg, study) | {
        "description": "",
        "profile": "p",
        "configurations": registered_design(cfg, study)["configurations"]
        | {"selected": {"buckets": [1, 8], "batch_size": 8, "slots": 8}},
    }
    criteria = cfg.decision.to_dict()
    assert design_changes(cfg, study, design, criteria) == []
    edited = copy.deepcopy(SMALL)
    edited["study_seed"] = 8
    edited["configurations"]["slots16"]["buckets"] = [1, 2, 16]
    edited["decision"] = {"tau_fixed": 0.05}
    cfg2 = study_config_from_mapping(edited, "<test>")
    assert design_changes(cfg2, cfg2.study("validation"), design, criteria) == [
        "decision.bootstrap_resamples: registered 1000, config 10000",
        "decision.tau_fixed: registered 0.02, config 0.05",
        "configurations.slots16.buckets: registered [1, 2, 4, 8, 16], config [1, 2, 16]",
        "study_seed: registered 7, config 8",
    ]


def test_a_job_refuses_values_the_workflow_did_not_plan(tmp_path):
    """The digest a rule passes (--values) is what its verb checks: the same file passes,
    an edit that changes the stage's values after the DAG was built is one line."""
    from rearrival.workflow.params import ValuesChangedError, check_values

    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(copy.deepcopy(SMALL)))
    planned = workflow_params(load_study_config(path))
    check_values(load_study_config(path), "predict", "grid", planned["predict:grid"])
    check_values(load_study_config(path), "report", None, planned["report"])
    edited = copy.deepcopy(SMALL)
    edited["studies"]["grid"]["n"] = [6, 8]
    path.write_text(yaml.safe_dump(edited))
    with pytest.raises(ValuesChangedError) as info:
        check_values(load_study_config(path), "predict", "grid", planned["predict:grid"])
    message = str(info.value)
    assert "predict:grid values differ" in message and "run snakemake again" in message
    assert "\n" not in message
    # an edit the stage does not depend on leaves its digest alone
    check_values(load_study_config(path), "predict", "saturation", planned["predict:saturation"])
