"""The typed study definition: one source of defaults (config/schema.yaml), every section
a frozen dataclass, and the per-rule config values the workflow passes as params."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import yaml

from rearrival.config.calibration import CALIBRATED, CALIBRATED_PROFILE, PUBLISHED
from rearrival.config.study import (
    DecisionSettings,
    EmulatedHttpSettings,
    InjectionSettings,
    RblnSettings,
    config_schema_path,
    load_study_config,
    schema_defaults,
    study_config_from_mapping,
)
from rearrival.judge.decide import DecisionCriteria
from rearrival.judge.decisions import criteria_from_config
from rearrival.measure.backends import BackendSettings
from rearrival.workflow.params import workflow_params
from rearrival.workflow.preregister import design_changes, registered_design

REPO = Path(__file__).resolve().parents[1]
SMALL = yaml.safe_load((REPO / ".test" / "config" / "config.yaml").read_text())
SECTIONS = {
    "decision": DecisionSettings,
    "injection": InjectionSettings,
    "emulated_http": EmulatedHttpSettings,
    "rbln": RblnSettings,
}


def _minimal() -> dict:
    """Only the required keys: every section comes from the schema's defaults."""
    return {
        key: copy.deepcopy(SMALL[key])
        for key in ("backend", "study_seed", "replicates", "configurations", "studies")
    }


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_every_schema_key_of_a_section_is_a_typed_field(section):
    schema = yaml.safe_load(config_schema_path().read_text())
    keys = set(schema["properties"][section]["properties"])
    assert {f.name for f in dataclasses.fields(SECTIONS[section])} == keys


def test_a_config_without_sections_gets_the_schema_defaults(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(_minimal()))
    cfg = load_study_config(path)
    defaults = schema_defaults()
    for section, kind in SECTIONS.items():
        typed = dataclasses.asdict(getattr(cfg, section))
        assert typed == {
            key: tuple(v) if isinstance(v, list) else v for key, v in defaults[section].items()
        }, section
        assert isinstance(getattr(cfg, section), kind)
    assert dict(cfg.search) == defaults["search"]
    assert cfg.tool_table == defaults["tool_table"]


def test_time_scale_has_one_default_the_schemas():
    raw = _minimal() | {"backend": "emulated-http"}
    cfg = study_config_from_mapping(raw, "<test>")
    assert cfg.emulated_http.time_scale == schema_defaults()["emulated_http"]["time_scale"]
    assert BackendSettings.from_study_config(cfg).time_scale == cfg.emulated_http.time_scale


def test_decision_criteria_defaults_agree_with_the_schema():
    cfg = study_config_from_mapping(_minimal(), "<test>")
    assert criteria_from_config(cfg) == DecisionCriteria()


def test_sections_are_frozen():
    cfg = study_config_from_mapping(_minimal(), "<test>")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.decision.tau_fixed = 0.5  # type: ignore[misc]


def _params(raw: dict) -> dict[str, str]:
    return workflow_params(study_config_from_mapping(raw, "<test>"), raw)


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
    re-registers, re-runs and re-decides every study, and reruns the search."""
    raw = copy.deepcopy(SMALL)
    before = _params(raw)
    raw["profile"] = PUBLISHED
    stages = ("predict", "prereg", "run", "decide")
    assert _changed(before, _params(raw)) == {
        f"{stage}:{study}" for study in SMALL["studies"] for stage in stages
    } | {"search", "report"}
    cfg = study_config_from_mapping(raw, "<test>")
    study = cfg.study("validation")
    registered = registered_design(study_config_from_mapping(copy.deepcopy(SMALL), "<t>"), study)
    criteria = criteria_from_config(cfg).to_dict()
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
    criteria = criteria_from_config(cfg).to_dict()
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
