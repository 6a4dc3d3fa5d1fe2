"""The typed models under rearrival.config are the one source of the study definition's
keys: the schema is drawn from them (every model field is a schema property and every
property a model field), config/schema.yaml is exactly `rearrival study schema`'s output,
and every shipped config passes it. The models are the one source of defaults: the schema
states none, loading fills none in, and a key left out takes its model's default. A bad
key is one line naming it and the nearest valid one, both from the verbs and from
`snakemake -n all`."""

from __future__ import annotations

import copy
import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from rearrival.config.backends import EmulatedHttpSettings, RblnSettings, VllmStudySettings
from rearrival.config.calibration import CalibrationSettings, MeasurementSettings, ModelSpec
from rearrival.config.decision import REGISTERED_KEYS, DecisionCriteria, DecisionError
from rearrival.config.errors import StudyConfigError
from rearrival.config.injection import InjectionSettings
from rearrival.config.schema import REGENERATE, document_schema
from rearrival.config.search import SearchSettings
from rearrival.config.study import (
    Study,
    StudyConfig,
    config_schema_path,
    effective_definition,
    load_study_config,
    study_config_from_mapping,
    study_definition_schema,
    validate_against_schema,
)
from rearrival.config.workload import TRACE_KEYS, TraceSource
from rearrival.measure.backends import BackendSettings
from rearrival.model.plans.plangen import MultiRoundSpec

REPO = Path(__file__).resolve().parents[1]
SCHEMA = study_definition_schema()
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
    "vllm": (VllmStudySettings, set()),
    "model": (ModelSpec, set()),
    "calibration": (CalibrationSettings, set()),
}
# top-level keys typed inside StudyConfig.measurement, and the two integrity sections
MEASUREMENT_KEYS = {"profile", "model", "emulator_truth", "calibration"}
INTEGRITY = {"witness": "witness", "signing": "signing_key"}


def _defaults_stated(node: Any, where: str = "") -> list[str]:
    """Every key path of the schema that states a ``default``."""
    if isinstance(node, dict):
        found = [where] if "default" in node else []
        for key, value in node.items():
            found += _defaults_stated(value, f"{where}.{key}" if where else key)
        return found
    if isinstance(node, list):
        return [path for i, value in enumerate(node) for path in _defaults_stated(value, where)]
    return []


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_every_model_field_is_a_schema_property_and_back(section):
    model, not_keys = SECTIONS[section]
    fields = {f.name for f in dataclasses.fields(model)} - not_keys
    assert fields == set(PROPS[section]["properties"])


def test_the_schema_file_is_what_the_models_generate():
    """config/schema.yaml is `rearrival study schema`'s output, byte for byte: regenerated
    here through the verb and compared, so an edit of the file or of a model without the
    other fails."""
    from typer.testing import CliRunner

    from rearrival.cli import app

    done = CliRunner().invoke(app, ["study", "schema"])
    assert done.exit_code == 0, done.output
    assert yaml.safe_load(done.stdout) == SCHEMA
    assert config_schema_path().read_text() == done.stdout, (
        f"config/schema.yaml is not the schema the section models generate; run `{REGENERATE}`"
    )


SHIPPED = sorted(
    [p for p in (REPO / "config").glob("*.yaml") if p.name != "schema.yaml"]
    + [REPO / ".test" / "config" / "config.yaml"]
)


@pytest.mark.parametrize("config", SHIPPED, ids=lambda p: str(p.relative_to(REPO)))
def test_every_shipped_config_passes_the_generated_schema(config):
    """The generated schema accepts every study definition the repository ships (a new
    key in one is a model field first; then regenerate the file)."""
    assert {"config/config.yaml", "config/vllm.yaml", ".test/config/config.yaml"} <= {
        str(p.relative_to(REPO)) for p in SHIPPED
    }
    validate_against_schema(yaml.safe_load(config.read_text()), str(config))


def test_a_key_the_document_does_not_place_is_refused():
    """A new top-level key field that no placement names is an error when the schema is
    drawn, never a key the schema silently leaves out."""
    from rearrival.config.study import DOCUMENT_KEYS

    with pytest.raises(KeyError, match=r"StudyConfig\.tool_table is a key no placement"):
        document_schema(
            [p for p in DOCUMENT_KEYS if p[0] != "tool_table"], (StudyConfig, MeasurementSettings)
        )


def test_the_schema_states_no_default():
    """Defaults live in the section models only, so the schema cannot drift from them."""
    assert _defaults_stated(SCHEMA) == []


def test_top_level_keys_are_typed():
    config_fields = {f.name for f in dataclasses.fields(StudyConfig)}
    typed = (config_fields - {"source", "measurement", *INTEGRITY.values()}) | MEASUREMENT_KEYS
    assert typed | set(INTEGRITY) == set(PROPS)
    assert {INTEGRITY["witness"]: "remote", INTEGRITY["signing"]: "key"} == {
        INTEGRITY[key]: next(iter(PROPS[key]["properties"])) for key in INTEGRITY
    }


def test_study_keys_are_study_fields():
    assert {f.name for f in dataclasses.fields(Study)} - {"name"} == set(STUDY_PROPS)
    own_search = STUDY_PROPS["search"]["properties"]
    assert set(own_search) == {f.name for f in dataclasses.fields(SearchSettings)} - {"workload"}
    spec_keys = {f.name for f in dataclasses.fields(MultiRoundSpec)}
    # the slot length is the model's and the tool cap the paper's: neither is a key
    generator = spec_keys - {"tool_cap_s", "max_seq_len"}
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


def test_left_out_keys_take_the_models_defaults(tmp_path):
    """Loading a config whose sections are empty fills nothing into the file's mapping;
    every typed section is its model's default, as for a config without the sections."""
    empty = {name: {} for name in SECTIONS}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(_minimal() | empty))
    raw = yaml.safe_load(path.read_text())
    validate_against_schema(raw, str(path), config_schema_path())
    assert raw["search"] == {}  # checked, nothing filled in
    filled = load_study_config(path)
    bare = study_config_from_mapping(_minimal(), "<test>")
    for name in ("decision", "injection", "search", "emulated_http", "rbln"):
        assert dataclasses.is_dataclass(getattr(filled, name)), name
        assert getattr(filled, name) == getattr(bare, name), name
    assert filled.search == SearchSettings() and filled.decision == DecisionCriteria()
    assert filled.measurement.model == ModelSpec()
    assert filled.measurement.calibration == CalibrationSettings()
    assert filled.measurement.profile == MeasurementSettings().profile
    assert filled.tool_table == StudyConfig.tool_table
    http = study_config_from_mapping(_minimal() | {"backend": "emulated-http"}, "<test>")
    assert BackendSettings.from_study_config(http).time_scale == EmulatedHttpSettings.time_scale


def test_the_effective_definition_states_every_default_and_loads_back(tmp_path):
    """`rearrival study config` prints every value in effect; that text is a study
    definition giving the same typed settings as the file it came from."""
    for config in (REPO / "config" / "config.yaml", REPO / ".test" / "config" / "config.yaml"):
        cfg = load_study_config(config)
        shown = effective_definition(cfg)
        assert shown["search"]["top"] == cfg.search.top and "calibration" in shown
        path = tmp_path / "shown.yaml"
        path.write_text(yaml.safe_dump(shown, sort_keys=False))
        again = load_study_config(path)
        measurement = dataclasses.replace(again.measurement, source=cfg.measurement.source)
        assert dataclasses.replace(again, source=cfg.source, measurement=measurement) == cfg


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


# --- a misspelled key: one line, naming the key and the nearest valid one ---------------


def _misspelled(path: Path) -> Path:
    text = (REPO / "config" / "config.yaml").read_text().replace("\nreplicates:", "\nreplicatse:")
    path.write_text(text)
    return path


def test_a_misspelled_key_names_the_nearest_valid_one(tmp_path):
    path = _misspelled(tmp_path / "config.yaml")
    with pytest.raises(StudyConfigError) as info:
        load_study_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}: replicatse is not a key of the study definition")
    assert "did you mean replicates?" in message and "\n" not in message and "$" not in message
    nested = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    nested["studies"]["grid"]["seedblock"] = nested["studies"]["grid"].pop("seed_block")
    with pytest.raises(
        StudyConfigError,
        match=r"studies\.grid\.seedblock is not a key of "
        r"studies\.grid; did you mean seed_block\?",
    ):
        validate_against_schema(nested, "c.yaml", config_schema_path())


def test_snakemake_prints_the_misspelled_key_in_one_line(tmp_path):
    """`snakemake -n all` on a misspelled key: the one line and exit code 2, not the
    schema and the whole config around it."""
    work = tmp_path / "study"
    work.mkdir()
    for name in ("Snakefile", "rules", "envs", "config", "profiles"):
        source, target = REPO / name, work / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, target)
    _misspelled(work / "config" / "config.yaml")
    done = subprocess.run(
        [str(Path(sys.executable).parent / "snakemake"), "-n", "all"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    ours = [line for line in lines if not line.startswith("Using workflow specific profile")]
    assert done.returncode == 2, lines[-5:]
    assert ours == [
        "config/config.yaml: replicatse is not a key of the study definition; did you mean "
        f"replicates? (see {config_schema_path()})"
    ]
