"""The one compiled-configuration type (rearrival.model.configuration; docs/DESIGN.md §1):
its id, label and mapping round-trip, bad knobs are one line naming the field, and no
other module defines a parallel type holding buckets and a batch size."""

from __future__ import annotations

import ast
import random
import sys
from pathlib import Path

import pytest

from rearrival.cli import main
from rearrival.commands.configuration import configuration_option
from rearrival.config.errors import StudyConfigError
from rearrival.config.study import configuration_from_config
from rearrival.measure.records import manifest_template
from rearrival.measure.records.manifest import configuration_entry
from rearrival.model.buckets import select_bucket
from rearrival.model.configuration import (
    ConfigurationError,
    RblnConfiguration,
    VllmConfiguration,
    configuration_from_mapping,
    configuration_in_record,
)
from rearrival.model.simulator.rbln.sim import SimConfig, SimConfigError
from rearrival.search.candidates import candidate_record, enumerate_candidates
from rearrival.vocabulary import RULE_SETS

SRC = Path(__file__).resolve().parents[1] / "src" / "rearrival"


def some_configurations() -> list[RblnConfiguration]:
    """Search candidates of every batch size, some with slots above and below the batch."""
    rng = random.Random(26)
    every = enumerate_candidates((1, 2, 5, 8, 16), 4)
    picked = rng.sample(every, 40)
    return picked + [
        RblnConfiguration(c.buckets, c.batch_size, rng.choice([1, 3, c.batch_size + 7]))
        for c in picked[:15]
    ]


def test_id_label_and_mapping_round_trip() -> None:
    for c in some_configurations():
        assert configuration_from_mapping(c.as_dict()) == c
        assert configuration_from_mapping(candidate_record(c)) == c  # a search result's
        assert RblnConfiguration.from_id(c.id) == c
        assert c.label() == ("{" + ",".join(map(str, c.buckets)) + f"}}/{c.batch_size}/{c.slots}")
        assert list(c.as_dict()) == ["buckets", "batch_size", "slots"]


def test_the_spellings_written_into_files() -> None:
    """Ids, labels and mappings are in registrations, predictions and run records: their
    bytes are part of the record (docs/DESIGN.md §6)."""
    baseline = RblnConfiguration((1, 2, 4, 8), 8)
    assert baseline.id == "8:1,2,4,8" and baseline.label() == "{1,2,4,8}/8/8"
    assert RblnConfiguration((1, 2, 4, 8), 8, 5).id == "8:1,2,4,8/5"
    assert baseline.as_dict() == {"buckets": [1, 2, 4, 8], "batch_size": 8, "slots": 8}
    assert candidate_record(baseline) == {"id": "8:1,2,4,8", **baseline.as_dict()}
    manifest = manifest_template(
        study="s",
        backend="emulated",
        configuration=baseline,
        variant="wait",
        condition="c",
        replicate=0,
        n=1,
        plan_path="p",
        plan_sha256="0",
        plan_seed=None,
        run_seed=0,
        condition_order=["c"],
    )
    assert manifest["configuration"] == baseline.as_dict()


def test_names_travel_but_never_make_two_configurations_differ() -> None:
    named = RblnConfiguration((1, 2, 4, 8), 8, name="baseline")
    assert named == RblnConfiguration((1, 2, 4, 8), 8) and named.named("other").name == "other"
    manifest_entry = {**named.as_dict(), "name": "baseline"}  # as a run manifest writes it
    assert configuration_from_mapping(manifest_entry).name == "baseline"
    record = {**candidate_record(named), "search_score": 0.9, "n_buckets": 4}
    assert configuration_in_record(record, name="selected") == named
    assert configuration_in_record(record, name="selected").name == "selected"


def test_the_bucket_map_and_the_simulator_config_come_from_the_one_type() -> None:
    for c in some_configurations():
        assert c.bucket_map == (
            0,
            *(select_bucket(n, c.buckets) for n in range(1, c.batch_size + 1)),
        )
        for rules, (release, dummy_block) in RULE_SETS.items():
            sim = SimConfig.of(c, rules)
            assert (sim.buckets, sim.batch_size, sim.slots) == (c.buckets, c.batch_size, c.slots)
            assert (sim.release, sim.dummy_block) == (release, dummy_block)
    with pytest.raises(ConfigurationError, match="rule set 'paper'") as caught:
        SimConfig.of(RblnConfiguration((1, 2), 2), "paper")
    assert caught.value.fields == ("rules",)


def test_one_slots_default() -> None:
    """S = batch_size unless given, in the configuration and in a SimConfig built directly."""
    assert RblnConfiguration((1, 4, 16), 16).slots == SimConfig((1, 4, 16), 16).slots == 16
    assert RblnConfiguration((1, 4, 16), 16, 3).slots == SimConfig((1, 4, 16), 16, 3).slots == 3


BAD_KNOBS = [
    ({"buckets": (1, 2, 4), "batch_size": 8}, ("buckets", "batch_size"), "largest"),
    ({"buckets": (4, 2, 8), "batch_size": 8}, ("buckets", "batch_size"), "ascending"),
    ({"buckets": (0, 8), "batch_size": 8}, ("buckets", "batch_size"), "positive"),
    ({"buckets": (), "batch_size": 8}, ("buckets", "batch_size"), "positive"),
    ({"buckets": (8,), "batch_size": 0}, ("buckets", "batch_size"), "batch_size 0"),
    ({"buckets": (8,), "batch_size": True}, ("buckets", "batch_size"), "batch_size True"),
    ({"buckets": 8, "batch_size": 8}, ("buckets",), "list of integers"),
    ({"buckets": (1, 8), "batch_size": 8, "slots": 0}, ("slots",), "slots 0"),
    ({"buckets": (1, 8), "batch_size": 8, "slots": 2.5}, ("slots",), "slots 2.5"),
]


@pytest.mark.parametrize(("knobs", "fields", "message"), BAD_KNOBS)
def test_bad_knobs_are_one_line_naming_the_field(knobs, fields, message) -> None:
    with pytest.raises(ConfigurationError, match=message) as caught:
        RblnConfiguration(**knobs)
    assert caught.value.fields == fields and "\n" not in str(caught.value)
    assert any(field in str(caught.value) for field in fields)


@pytest.mark.parametrize(("knobs", "fields", "message"), BAD_KNOBS)
def test_simconfig_refuses_the_same_knobs(knobs, fields, message) -> None:
    """The simulator's own config shares the checks (rearrival.model.buckets)."""
    with pytest.raises(SimConfigError, match=message) as caught:
        SimConfig(**knobs)
    assert caught.value.fields == fields and "\n" not in str(caught.value)


def test_a_config_file_entry_names_its_keys() -> None:
    with pytest.raises(StudyConfigError) as caught:
        configuration_from_config(
            "grid6", {"buckets": [1, 8], "batch_size": 8, "slots": 0}, "c.yaml"
        )
    assert str(caught.value).startswith("c.yaml: grid6.slots: slots 0")
    # buckets may be listed in any order in a config file, as before
    assert configuration_from_config(
        "g", {"buckets": [8, 1], "batch_size": 8}, "c.yaml"
    ).buckets == (1, 8)


def test_a_mapping_with_an_unknown_knob_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(
        ConfigurationError,
        match=r"'slot' is unknown: rbln configurations have the fields buckets, batch_size, slots",
    ) as caught:
        configuration_from_mapping({"buckets": [1, 8], "batch_size": 8, "slot": 8})
    assert caught.value.fields == ("slot",)
    with pytest.raises(ConfigurationError, match="num_blocks"):
        configuration_from_mapping({"buckets": [], "batch_size": 8}, "vllm")
    with pytest.raises(ConfigurationError, match="substrate 'tpu'"):
        configuration_from_mapping({"buckets": [1, 8], "batch_size": 8}, "tpu")
    with pytest.raises(ConfigurationError, match="not of the form") as caught:
        RblnConfiguration.from_id("b1-2-4-8:bs8:s8")
    assert caught.value.fields == ("id",)


def test_vllm_configuration_round_trips_through_its_mapping() -> None:
    c = VllmConfiguration((1, 2, 4), 16, num_blocks=128, block_size=32, name="pool")
    assert configuration_from_mapping(c.as_dict(), "vllm") == c
    entry = {**configuration_entry(c), "name": "pool"}  # as a vLLM run manifest holds it
    assert next(iter(entry)) == "substrate" and configuration_from_mapping(entry) == c
    assert configuration_from_mapping(entry).name == "pool"
    assert "substrate" not in configuration_entry(RblnConfiguration((1, 2), 2))
    assert c.bucket_map[:6] == (0, 1, 2, 4, 4, 5)  # eager above the largest capture size


@pytest.mark.parametrize(
    ("options", "flag"),
    [
        (("1,2,4", 8, None), "--buckets/--batch-size"),
        (("1,x", 8, None), "--buckets"),
        (("1,2,4,8", 8, 0), "--slots"),
    ],
)
def test_cli_options_name_the_option_at_fault(options, flag) -> None:
    with pytest.raises(ConfigurationError) as caught:
        configuration_option(*options)
    assert str(caught.value).startswith(flag) and "\n" not in str(caught.value)


def test_rearrival_run_refuses_bad_slots_in_one_line_exit_2(tmp_path, monkeypatch, capsys):
    argv = ["rearrival", "run", str(tmp_path / "plan.json"), "--out", str(tmp_path / "r")]
    monkeypatch.setattr(sys, "argv", [*argv, "--slots", "0"])
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 2
    assert capsys.readouterr().err == (
        "rearrival: error: --slots: slots 0 must be a positive integer (default: batch_size)\n"
    )
    assert not (tmp_path / "r").exists()


# The configuration types a class may extend (the simulator's SimConfig extends the RBLN
# one with its rule set), so that holding buckets and a batch size is not a second type.
CONFIGURATION_TYPES = {"Configuration", "RblnConfiguration", "VllmConfiguration"}


def test_no_parallel_configuration_type() -> None:
    """A class holding buckets and a batch size outside model/configuration.py is a second
    configuration type, with its own checks and defaults: extend the one type instead."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        where = path.relative_to(SRC).as_posix()
        if where == "model/configuration.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            held = {
                stmt.target.id
                for stmt in node.body
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
            }
            held |= {
                target.attr
                for stmt in ast.walk(node)
                if isinstance(stmt, ast.Assign)
                for target in stmt.targets
                if isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            }
            if {"buckets", "batch_size"} <= held:
                bases = {base.id for base in node.bases if isinstance(base, ast.Name)}
                found.append((where, node.name, bool(bases & CONFIGURATION_TYPES)))
    # the scan sees a class holding both (not vacuous): the simulator's, an extension
    assert ("model/simulator/rbln/config.py", "SimConfig", True) in found
    parallel = [f"{where}: class {name}" for where, name, extends in found if not extends]
    assert parallel == [], "parallel configuration types: " + ", ".join(parallel)
