"""Bounds on a study's size in config/schema.yaml: a mistyped N is refused before any run
starts, with the key and the bound in the message."""

from __future__ import annotations

import pytest
import yaml
from conftest import CONFIG_FILE

from rearrival.config.errors import StudyConfigError
from rearrival.config.study import load_study_config


def _config(tmp_path, n: list[int]):
    raw = yaml.safe_load(CONFIG_FILE.read_text())
    raw["studies"]["slots"]["n"] = n
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_a_huge_n_is_refused_naming_the_key(tmp_path) -> None:
    with pytest.raises(StudyConfigError) as info:
        load_study_config(_config(tmp_path, [8, 100000]))
    message = str(info.value)
    assert "studies.slots.n[1]" in message and "1024" in message


def test_the_bound_itself_and_the_paper_sizes_pass(tmp_path) -> None:
    cfg = load_study_config(_config(tmp_path, [16, 1024]))
    assert cfg.studies["slots"].n == (16, 1024)
