"""The paper's published numbers (rearrival.report.paper_numbers, data/paper_numbers.yaml) and
the "paper" and "difference" columns they add to the regenerated tables."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from rearrival.config.study import load_study_config
from rearrival.report.paper_numbers import (
    PROVENANCE,
    PaperNumbersError,
    load_paper_numbers,
    with_paper,
)
from rearrival.report.results import Results
from rearrival.report.table_model import Column, Part, Table, cell_number
from rearrival.report.tables import TABLE_BUILDERS, build_tables

CONFIG_FILE = Path(__file__).resolve().parents[1] / "config" / "config.yaml"
NUMBERS = load_paper_numbers()


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("\u00a0", " "))


def test_every_entry_has_provenance_and_its_number_is_in_its_sentence() -> None:
    assert len(NUMBERS) >= 60
    for number in NUMBERS.values():
        for key in PROVENANCE:
            assert str(getattr(number, key)).strip(), (number.id, key)
        assert _normal(number.text) in _normal(number.quote), number.id
        assert re.match(r"(Sections?|Supplementary) ", number.where), number.id
        assert number.quote.rstrip().endswith((".", ")", "?")), number.id


def test_every_value_is_the_number_printed_in_its_text() -> None:
    """A typo in a value (not in its sentence) would go unnoticed otherwise."""
    checked = 0
    for number in NUMBERS.values():
        printed = number.text.replace(",", "")
        if not any(ch.isdigit() for ch in printed):
            continue  # "four", "none", "positive": words, checked by the sentence test
        if number.bounds is not None:
            wanted = [number.low, number.high]
        elif number.values:
            wanted = list(number.values)
        elif isinstance(number.value, int | float):
            wanted = [number.value] + ([number.of] if number.of is not None else [])
        else:
            continue
        for value in wanted:
            shown = f"{abs(value):.{number.decimals}f}"
            assert shown in printed, (number.id, shown, number.text)
            checked += 1
    assert checked >= 70


def test_examples_named_in_the_issue_are_there_with_the_paper_values() -> None:
    assert NUMBERS["val_n8_saving_slots16"].number == pytest.approx(0.0825)
    assert NUMBERS["val_n8_saving_selected"].number == pytest.approx(0.0972)
    assert NUMBERS["val_n8_grid_extra"].number == pytest.approx(0.0147)
    assert NUMBERS["rem_n6_reuse_baseline"].display() == "17/18"
    assert NUMBERS["search_pick"].value == "16:1,4,6,8,10,16"
    assert NUMBERS["search_evaluation_score"].number == pytest.approx(0.9066)
    assert NUMBERS["compile_minutes"].bounds == (7, 8)
    assert NUMBERS["kv_gib_per_slot_device"].number == 0.28125
    assert NUMBERS["val_error_sign"].value == "positive"
    assert NUMBERS["existing_steps_mare"].number == pytest.approx(0.018)
    # the savings of N=8 differ by the stated extra, to the printed precision
    extra = NUMBERS["val_n8_saving_selected"].number - NUMBERS["val_n8_saving_slots16"].number
    assert extra == pytest.approx(NUMBERS["val_n8_grid_extra"].number, abs=1e-12)


def test_printed_precision() -> None:
    assert NUMBERS["existing_padding_mae"].half_unit == pytest.approx(0.0005)
    assert NUMBERS["existing_steps_mare"].half_unit == pytest.approx(0.0005)  # 1.8 %
    assert NUMBERS["compile_minutes"].half_unit == 0.5
    assert NUMBERS["chan_r_baseline"].half_unit == pytest.approx(0.05)
    assert NUMBERS["sat_n10_ratio_24"].display() == "0.8480"


def test_table_slots_name_real_studies_tables_and_columns() -> None:
    """Every slot points at a study of the default config, a built table and one of its
    columns: a typo would silently drop a paper value from the report."""
    cfg = load_study_config(CONFIG_FILE)
    tables = {
        t.id: t for t in (b(Results(cfg, Path("/nonexistent"))) for b in TABLE_BUILDERS.values())
    }
    slots = [(n, s) for n in NUMBERS.values() for s in n.tables]
    assert len(slots) >= 40
    for number, slot in slots:
        assert slot.table in tables, number.id
        study = dict(slot.match).get("study")
        assert study is None or study in cfg.studies, number.id
        keys = {c.key for p in tables[slot.table].parts for c in p.columns}
        assert slot.column in keys, (number.id, slot.column)


def _toy_table() -> Table:
    columns = (
        Column("study", "study"),
        Column("n", "N", "int"),
        Column("configuration", "configuration"),
        Column("variant", "variant"),
        Column("reuse", "reuse"),
        Column("padding_ratio", "padding", "f3"),
        Column("decode_steps", "steps", "int"),
        Column("run_ids", "runs", "ids"),
    )
    rows = (
        {
            "study": "grid",
            "n": 6,
            "configuration": "baseline",
            "variant": "control",
            "reuse": "16/18",
            "padding_ratio": 0.217,
            "decode_steps": 1383,
            "run_ids": "a",
        },
        {
            "study": "grid",
            "n": 6,
            "configuration": "baseline",
            "variant": "wait",
            "reuse": "15/20",
            "padding_ratio": 0.2,
            "decode_steps": 1727,
            "run_ids": "b",
        },
        {
            "study": "other",
            "n": 6,
            "configuration": "baseline",
            "variant": "wait",
            "reuse": "1/2",
            "padding_ratio": 0.1,
            "decode_steps": 5,
            "run_ids": "c",
        },
    )
    return Table("VI", "toy", "caption", (Part("p", columns, rows),), ("a note",), "emulated")


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        (0.25, 0.25),
        (6, 6.0),
        (np.float32(0.5), 0.5),
        (np.int64(8), 8.0),
        (float("inf"), float("inf")),
        (None, None),
        (float("nan"), None),
        (np.nan, None),
        (True, None),
        ("0.25", None),
        ("18/18", None),
        ([1.0], None),
    ],
)
def test_a_cell_is_a_number_only_when_it_holds_one(cell, expected) -> None:
    """The one float-or-None reading shared by the scorecard, the paper columns and the
    fixed-arrival analysis: text (labels, "k/m" counts) and booleans are never numbers,
    NaN (an empty cell read back) is absent."""
    assert cell_number(cell) == expected


def test_with_paper_joins_values_and_differences() -> None:
    joined = with_paper(_toy_table(), NUMBERS)
    part = joined.parts[0]
    keys = [c.key for c in part.columns]
    # paper and difference right after the column they belong to, run ids stay last
    assert keys[keys.index("reuse") + 1 : keys.index("reuse") + 3] == ["paper:reuse", "diff:reuse"]
    assert keys[-1] == "run_ids"
    control, wait, other = part.rows
    assert control["paper:reuse"] == "18/18" and control["diff:reuse"] == -2
    assert control["paper:padding_ratio"] == 0.232
    assert control["diff:padding_ratio"] == pytest.approx(0.217 - 0.232)
    assert control["diff:decode_steps"] == 1383 - 1288
    # a count over a different number of re-arrivals has no difference
    assert wait["paper:reuse"] == "14/18" and wait["diff:reuse"] is None
    assert "paper:reuse" not in other
    assert joined.notes[0] == "a note" and "paper_numbers.yaml" in joined.notes[-1]


def test_ranges_and_untouched_tables() -> None:
    r = NUMBERS["chan_r_baseline"]
    assert r.difference(1.2) == 0.0
    assert r.difference(0.82) == pytest.approx(0.82 - 1.0)
    assert r.difference(2.0) == pytest.approx(0.3)
    assert r.difference("n/a") is None
    pick = NUMBERS["search_pick"]
    assert pick.difference("16:1,4,6,8,10,16") == "same"
    assert pick.difference("12:1,12") == "different" and pick.difference(None) is None
    overlap = NUMBERS["search_restricted_68_overlap"]  # 4 of the top 20
    assert overlap.difference(3) == -1 and overlap.difference("3/20") == -1
    assert overlap.difference("3/10") is None
    toy = _toy_table()
    untouched = Table("VIII", "t", "c", toy.parts, (), "x")
    assert with_paper(untouched, NUMBERS) is untouched


def test_build_tables_without_results_join_only_the_model_tables() -> None:
    """With no results only Table XV (KV memory from the profile's model dimensions) has
    rows, so only it gets paper columns, and the profile agrees with the paper exactly."""
    cfg = load_study_config(CONFIG_FILE)
    tables = {t.id: t for t in build_tables(Results(cfg, Path("/nonexistent")))}
    joined = [
        i
        for i, t in tables.items()
        if any(c.key.startswith("paper:") for p in t.parts for c in p.columns)
    ]
    assert joined == ["XV"]
    rows = [r for r in tables["XV"].parts[0].rows if "paper:value" in r]
    assert [r["quantity"] for r in rows] == [
        "KV per token",
        "KV per slot",
        "KV per slot per device (4 devices)",
    ]
    assert all(r["diff:value"] == pytest.approx(0.0, abs=1e-12) for r in rows)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda e: e.pop("quote"), "field 'quote' is missing"),
        (lambda e: e.pop("value"), "exactly one of"),
        (lambda e: e.update(low=1), "exactly one of"),
        (lambda e: e.update(tables=[{"id": "III"}]), "needs id, match and column"),
    ],
)
def test_malformed_entries_name_the_entry_and_field(tmp_path, edit, message) -> None:
    from importlib import resources

    tree = yaml.safe_load(
        resources.files("rearrival.data").joinpath("paper_numbers.yaml").read_text()
    )
    edit(tree["numbers"][3])
    path = tmp_path / "numbers.yaml"
    path.write_text(yaml.safe_dump(tree))
    with pytest.raises(PaperNumbersError, match=message) as info:
        load_paper_numbers(path)
    assert str(path) in str(info.value) and tree["numbers"][3]["id"] in str(info.value)


def test_duplicate_ids_are_refused(tmp_path) -> None:
    from importlib import resources

    tree = yaml.safe_load(
        resources.files("rearrival.data").joinpath("paper_numbers.yaml").read_text()
    )
    tree["numbers"].append(dict(tree["numbers"][0]))
    path = tmp_path / "numbers.yaml"
    path.write_text(yaml.safe_dump(tree))
    with pytest.raises(PaperNumbersError, match="appears twice"):
        load_paper_numbers(path)
