"""config/schema.yaml and the typed models under rearrival.config agree: every model field
is a schema property and every property a model field, and every default the schema
documents is the model's default (the models are the one source; the schema repeats them
for snakemake's validation and for readers)."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from rearrival.config.backends import EmulatedHttpSettings, RblnSettings
from rearrival.config.calibration import CalibrationSettings, MeasurementSettings, ModelSpec
from rearrival.config.decision import REGISTERED_KEYS, DecisionCriteria, DecisionError
from rearrival.config.errors import StudyConfigError
from rearrival.config.injection import InjectionSettings
from rearrival.config.search import SearchSettings
from rearrival.config.study import (
    DEFAULT_REPEATS,
    Study,
    StudyConfig,
    config_schema_path,
    study_config_from_mapping,
    validate_against_schema,
)
from rearrival.config.workload import TRACE_KEYS, TraceSource
from rearrival.measure.backends import BackendSettings
from rearrival.model.configuration import RblnConfiguration
from rearrival.model.plans.plangen import MultiRoundSpec

REPO = Path(__file__).resolve().parents[1]
SCHEMA = yaml.safe_load(config_schema_path().read_text())
PROPS = SCHEMA["properties"]
STUDY_PROPS = PROPS["studies"]["additionalProperties"]["properties"]
SMALL = yaml.safe_load((REPO / ".test" / "config" / "config.yaml").read_text())

# schema section -> its model; the model's fields that are not keys of the section
SECTIONS: dict[str, tuple[type, set[str]]] = {
    "decision": (DecisionCriteria, set()),
    "injection": (InjectionSettings, set()),
    "search": (SearchSettings, {"workload"}),  # a study's search takes the study's workload
    "emulated_http": (EmulatedHttpSettings, set()),
    "rbln": (RblnSettings, set()),
    "model": (ModelSpec, set()),
    "calibration": (CalibrationSettings, set()),
}
# top-level keys typed inside StudyConfig.measurement, and the two integrity sections
MEASUREMENT_KEYS = {"profile", "model", "emulator_truth", "calibration"}
INTEGRITY = {"witness": "witness", "signing": "signing_key"}


def _plain(value: Any) -> Any:
    """A model value as YAML writes it: tuples as lists, dataclasses as mappings, a compiled
    configuration as its buckets and batch_size (slots only where they differ)."""
    if isinstance(value, RblnConfiguration):
        knobs = value.as_dict()
        return {k: v for k, v in knobs.items() if k != "slots" or v != value.batch_size}
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def _defaults(model: type) -> dict[str, Any]:
    """Every field's default (None where it has none or defaults to absent)."""
    instance = model()
    return {f.name: _plain(getattr(instance, f.name)) for f in dataclasses.fields(model)}


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_every_model_field_is_a_schema_property_and_back(section):
    model, not_keys = SECTIONS[section]
    fields = {f.name for f in dataclasses.fields(model)} - not_keys
    assert fields == set(PROPS[section]["properties"])


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_every_schema_default_is_the_models(section):
    defaults = _defaults(SECTIONS[section][0])
    for key, spec in PROPS[section]["properties"].items():
        if defaults[key] is None:  # absent by default (e.g. rbln.site_packages)
            assert "default" not in spec, key
        else:
            assert spec.get("default") == defaults[key], f"{section}.{key}"


def test_top_level_keys_are_typed_and_their_defaults_agree():
    config_fields = {f.name for f in dataclasses.fields(StudyConfig)}
    typed = (config_fields - {"source", "measurement", *INTEGRITY.values()}) | MEASUREMENT_KEYS
    assert typed | set(INTEGRITY) == set(PROPS)
    defaults = {f.name: f.default for f in dataclasses.fields(StudyConfig)}
    defaults |= {key: getattr(MeasurementSettings(), key) for key in ("profile", "emulator_truth")}
    for key, spec in PROPS.items():
        if spec.get("type") != "object":
            assert spec["default"] == defaults[key], key
    assert {INTEGRITY["witness"]: "remote", INTEGRITY["signing"]: "key"} == {
        INTEGRITY[key]: next(iter(PROPS[key]["properties"])) for key in INTEGRITY
    }


def test_study_keys_are_study_fields_and_their_defaults_agree():
    assert {f.name for f in dataclasses.fields(Study)} - {"name"} == set(STUDY_PROPS)
    assert STUDY_PROPS["rule"]["default"] == Study.rule
    assert STUDY_PROPS["repeats"]["default"] == DEFAULT_REPEATS
    own_search = STUDY_PROPS["search"]["properties"]
    assert set(own_search) == {f.name for f in dataclasses.fields(SearchSettings)} - {"workload"}
    spec_keys = {f.name for f in dataclasses.fields(MultiRoundSpec)}
    # the slot length is the model's and the tool cap the paper's: neither is a key
    generator = spec_keys - {"tool_cap_s", "max_context_tokens"}
    assert set(STUDY_PROPS["workload"]["properties"]) == {"kind"} | generator | set(TRACE_KEYS)


def test_the_workload_description_states_the_models_defaults():
    """The workload keys have no schema default (a left-out key takes the generator's
    or the trace reader's); the description names them, so it must name the models'."""
    text = STUDY_PROPS["workload"]["description"]
    spec = MultiRoundSpec()
    for key in ("rounds", "first_prompt_tokens", "new_tokens", "gen_tokens"):
        assert f"{key} {list(getattr(spec, key))}" in text, key
    assert f"start_spread_s {spec.start_spread_s:g}" in text
    assert f"token_scale default {TraceSource.token_scale:g}" in text
    assert f"on_overflow default {TraceSource.on_overflow}" in text


def _minimal() -> dict:
    """Only the required keys."""
    return {
        key: copy.deepcopy(SMALL[key])
        for key in ("backend", "study_seed", "replicates", "configurations", "studies")
    }


def test_schema_filled_and_model_defaults_give_the_same_sections(tmp_path):
    """Loading a config whose sections are empty fills the schema's defaults into them
    (snakemake's validate, as the Snakefile does); the typed sections then equal the
    models' own defaults, which a config without the sections gets."""
    empty = {name: {} for name in SECTIONS}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(_minimal() | empty))
    raw = yaml.safe_load(path.read_text())
    validate_against_schema(raw, str(path), config_schema_path())
    assert raw["search"]["top"] == SearchSettings.top  # the schema's defaults were filled in
    filled = study_config_from_mapping(raw, str(path))
    bare = study_config_from_mapping(_minimal(), "<test>")
    for name in ("decision", "injection", "search", "emulated_http", "rbln"):
        assert dataclasses.is_dataclass(getattr(filled, name)), name
        assert getattr(filled, name) == getattr(bare, name), name
    assert filled.measurement.model == ModelSpec()
    assert filled.measurement.calibration == CalibrationSettings()
    assert filled.tool_table == StudyConfig.tool_table
    http = study_config_from_mapping(_minimal() | {"backend": "emulated-http"}, "<test>")
    assert BackendSettings.from_study_config(http).time_scale == EmulatedHttpSettings.time_scale


def test_registered_criteria_keep_their_keys_and_round_trip():
    """criteria.json names the band ``band`` since the first registration; the one
    criteria type writes and reads that form, so old registrations read back."""
    criteria = DecisionCriteria(equivalence_band=(0.97, 1.03), exploratory_n=(12,))
    registered = criteria.to_dict()
    assert tuple(registered) == REGISTERED_KEYS and registered["band"] == [0.97, 1.03]
    assert DecisionCriteria.from_dict(registered) == criteria
    with pytest.raises(DecisionError, match="rule_version"):
        DecisionCriteria.from_dict(registered | {"rule_version": "other/2"})


def test_a_bad_section_value_is_one_line_naming_file_and_key():
    raw = _minimal() | {"decision": {"equivalence_band": [1.01, 1.02]}}
    with pytest.raises(StudyConfigError, match=r"^c\.yaml: decision\.equivalence_band") as info:
        study_config_from_mapping(raw, "c.yaml")
    assert "\n" not in str(info.value)
    raw = _minimal() | {"search": {"search_seed_block": 7, "evaluation_seed_block": 7}}
    with pytest.raises(StudyConfigError, match=r"^c\.yaml: search\.evaluation_seed_block"):
        study_config_from_mapping(raw, "c.yaml")
