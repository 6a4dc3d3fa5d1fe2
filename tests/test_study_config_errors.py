"""Every refusal of the study definition (config/config.yaml) is one line naming the file,
the key and the fix, YAML syntax errors included (rearrival.config.study)."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from rearrival.config.study import (
    SelectionMissingError,
    StudyConfigError,
    load_study_config,
    read_selected,
    resolve_configurations,
)
from rearrival.errors import StageError

REPO = Path(__file__).resolve().parents[1]
SMALL = yaml.safe_load((REPO / ".test" / "config" / "config.yaml").read_text())
CLI = str(Path(sys.executable).with_name("rearrival"))


def _write(tmp_path: Path, raw: dict[str, Any]) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _refused(path: Path, *parts: str) -> str:
    """Loading ``path`` fails with one line holding the file name and every part."""
    with pytest.raises(StudyConfigError) as error:
        load_study_config(path)
    message = str(error.value)
    assert "\n" not in message, message
    for part in (str(path), *parts):
        assert part in message, message
    return message


def _edited(tmp_path: Path, edit) -> Path:
    raw = copy.deepcopy(SMALL)
    edit(raw)
    return _write(tmp_path, raw)


def test_the_small_config_loads(tmp_path):
    """The baseline every refusal below edits is itself valid."""
    cfg = load_study_config(_write(tmp_path, copy.deepcopy(SMALL)))
    assert set(cfg.studies) == set(SMALL["studies"])


def test_an_unknown_study_lists_the_defined_ones(tmp_path):
    path = _write(tmp_path, copy.deepcopy(SMALL))
    cfg = load_study_config(path)
    with pytest.raises(StudyConfigError) as error:
        cfg.study("gird")
    message = str(error.value)
    assert "\n" not in message
    assert f"{path}: no study 'gird' under studies; defined: " in message
    assert all(name in message for name in SMALL["studies"])


def test_a_study_naming_an_undefined_configuration_is_refused(tmp_path):
    def edit(raw):
        raw["studies"]["grid"]["configurations"] = [*raw["studies"]["grid"]["configurations"], "g9"]

    _refused(
        _edited(tmp_path, edit),
        "studies.grid.configurations names 'g9', which is not under configurations",
        "define it or use one of",
    )


def test_two_studies_sharing_a_seed_block_are_refused(tmp_path):
    def edit(raw):
        raw["studies"]["mechanisms"]["seed_block"] = raw["studies"]["grid"]["seed_block"]

    block = SMALL["studies"]["grid"]["seed_block"]
    message = _refused(_edited(tmp_path, edit), f"seed_block {block} is also used by")
    assert "give every study its own block" in message


def test_an_amendment_of_an_unknown_study_is_refused(tmp_path):
    def edit(raw):
        raw["studies"]["validation_remeasure"]["amends"] = "validaton"

    _refused(
        _edited(tmp_path, edit),
        "studies.validation_remeasure.amends names unknown study 'validaton'",
    )


def test_a_bucket_set_without_its_batch_size_is_refused(tmp_path):
    def edit(raw):
        raw["configurations"]["grid6"]["buckets"] = [1, 2, 4, 6]

    _refused(_edited(tmp_path, edit), "grid6.buckets/grid6.batch_size")


def test_an_injection_on_an_undefined_configuration_is_refused(tmp_path):
    def edit(raw):
        raw.setdefault("injection", {})["configuration"] = "g9"

    _refused(_edited(tmp_path, edit), "injection.configuration names 'g9'", "use one of")


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (lambda raw: raw.update(backend="gpu"), "backend: 'gpu' is not one of"),
        (lambda raw: raw["studies"]["grid"].update(n=["six"]), "studies.grid.n[0]: 'six'"),
        (lambda raw: raw.pop("studies"), "'studies' is a required property of the study"),
    ],
)
def test_a_schema_violation_names_the_key_and_the_schema(tmp_path, edit, key):
    _refused(_edited(tmp_path, edit), key, "(see ", "schema.yaml)")


def test_a_missing_config_file_is_refused(tmp_path):
    _refused(tmp_path / "none.yaml", "cannot read the study definition", "No such file")


def test_a_directory_in_place_of_the_config_is_refused(tmp_path):
    _refused(tmp_path, "cannot read the study definition")


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        (
            "backend: emulated\nstudies: [grid, mechanisms\nreplicates: 2\n",
            ("line 3, column 11", "flow sequence that starts at line 2"),
        ),
        ("backend: emulated\n\tstudy_seed: 7\n", ("line 2, column 1", "'\\t'")),
        ("backend: *emulated\n", ("line 1, column 10", "undefined alias")),
        ('tool_table: "summary.json\n', ("line 2, column 1", "quoted scalar")),
        ("backend: \x07\n", ("not valid YAML", "#x0007")),
    ],
)
def test_malformed_yaml_is_one_line_with_its_position(tmp_path, text, parts):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    message = _refused(path, "not valid YAML", *parts)
    assert "^" not in message  # no parser excerpt with a caret


def test_malformed_yaml_is_one_line_on_the_command_line(tmp_path):
    """Through the CLI: exit 2 and exactly one line on stderr, no traceback."""
    path = tmp_path / "config.yaml"
    path.write_text("backend: emulated\nstudies: [grid\nreplicates: 2\n")
    done = subprocess.run(
        [CLI, "search", "--config", str(path), "--out", str(tmp_path / "search")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert f"{path}: line 3, column 11: not valid YAML" in done.stderr
    assert not (tmp_path / "search").exists()


def test_a_selected_study_without_the_search_pick_is_refused(tmp_path):
    cfg = load_study_config(_write(tmp_path, copy.deepcopy(SMALL)))
    study = next(s for s in cfg.studies.values() if s.uses_selected)
    with pytest.raises(SelectionMissingError) as error:
        resolve_configurations(cfg, study, None)
    assert "\n" not in str(error.value) and "results/search/selected.json" in str(error.value)
    with pytest.raises(StageError) as missing:
        read_selected(tmp_path / "selected.json")
    assert "\n" not in str(missing.value) and "run the search stage first" in str(missing.value)
