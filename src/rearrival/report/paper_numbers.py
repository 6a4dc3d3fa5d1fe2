"""The paper's published numbers, and the "paper" and "difference" columns they add to
the regenerated tables.

``data/paper_numbers.yaml`` holds every quantitative statement of the paper's text that a
study here regenerates, each with its unit, where it is printed (section, table or
supplementary item), the experiment it belongs to, what it measures and the exact
sentence it comes from. Nothing in it is computed; this module only reads it, checks that
every entry carries that provenance, and joins the values onto this run's tables so a
reader sees both side by side. The scorecard (``rearrival.report.scorecard``) judges the paper's
findings with the same entries.

Values are compared in the tables' own units: a number printed as a percentage (e.g. "12.5%")
or in percentage points is stored as printed and divided by 100 here, because the tables
hold fractions.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from rearrival.errors import RearrivalError
from rearrival.report.table_model import Column, Part, Table, cell_number

DATA_FILE = "paper_numbers.yaml"
PROVENANCE = ("unit", "text", "where", "experiment", "measures", "quote")
PERCENT_UNITS = ("%", "pp")
PRINTED_NUMBER = re.compile(r"\d[\d,]*(?:\.(\d+))?")


class PaperNumbersError(RearrivalError):
    """The paper-numbers file is malformed; the message names the entry and the field."""


@dataclass(frozen=True)
class TableSlot:
    """Where a paper number sits in a regenerated table: the table, the cells that
    identify its row (default config's study and configuration names) and its column."""

    table: str
    match: tuple[tuple[str, Any], ...]
    column: str

    def matches(self, row: dict[str, Any]) -> bool:
        return all(_same(row.get(key), want) for key, want in self.match)


def _same(got: Any, want: Any) -> bool:
    if got is None or (isinstance(got, float) and math.isnan(got)):
        return False
    if isinstance(want, bool) or not isinstance(want, int | float):
        return str(got) == str(want)
    try:
        return float(got) == float(want)
    except (TypeError, ValueError):
        return False


@dataclass(frozen=True)
class PaperNumber:
    """One published number with its provenance (see the data file's header)."""

    id: str
    unit: str
    text: str
    where: str
    experiment: str
    measures: str
    quote: str
    hardware: bool
    value: float | str | None = None
    low: float | None = None
    high: float | None = None
    values: tuple[float, ...] = ()
    of: int | None = None
    tables: tuple[TableSlot, ...] = ()

    @property
    def scale(self) -> float:
        """Factor from the printed unit to the tables' unit (percentages -> fractions)."""
        return 0.01 if self.unit in PERCENT_UNITS else 1.0

    @property
    def number(self) -> float | None:
        """The single value in table units, or None for labels, ranges and sets."""
        if isinstance(self.value, int | float) and not isinstance(self.value, bool):
            return float(self.value) * self.scale
        return None

    @property
    def decimals(self) -> int:
        """Decimals the paper prints the number with (from ``text``)."""
        return max((len(m.group(1) or "") for m in PRINTED_NUMBER.finditer(self.text)), default=0)

    @property
    def half_unit(self) -> float:
        """Half a unit of the last digit the paper prints, in table units: how far a value
        may lie from the printed one and still be printed the same."""
        return 0.5 * 10.0**-self.decimals * self.scale

    @property
    def bounds(self) -> tuple[float, float] | None:
        """A stated range in table units."""
        if self.low is None or self.high is None:
            return None
        return self.low * self.scale, self.high * self.scale

    def display(self) -> str:
        """The number as the paper states it, in one short cell."""
        suffix = " %" if self.unit == "%" else " pp" if self.unit == "pp" else ""
        if self.of is not None:
            return f"{self.value}/{self.of}"
        if self.bounds is not None or self.values:
            return self.text
        if isinstance(self.value, float):
            return f"{self.value:.{self.decimals}f}{suffix}"
        if isinstance(self.value, int) and not isinstance(self.value, bool):
            return f"{self.value:,}{suffix}"
        return str(self.value)

    @property
    def is_label(self) -> bool:
        """A non-numeric value (a configuration, a direction) rather than a number."""
        return isinstance(self.value, str)

    def difference(self, ours: Any) -> float | str | None:
        """This run's cell minus the paper's value in table units; a count "k/m" only
        when both count the same m; for a range, the distance outside it (0 inside); for
        a label, "same" or "different"."""
        if self.is_label:
            return None if ours is None else "same" if str(ours) == self.value else "different"
        number = cell_number(ours)
        if self.of is not None:
            got = parse_count(ours)
            if got is not None:
                return float(got[0] - int(self.value)) if got[1] == self.of else None
            return None if number is None else number - int(self.value)
        if number is None:
            return None
        if self.bounds is not None:
            low, high = self.bounds
            return number - high if number > high else number - low if number < low else 0.0
        return None if self.number is None else number - self.number


def parse_count(value: Any) -> tuple[int, int] | None:
    """A "hits/re-arrivals" cell as (hits, re-arrivals), or None."""
    if not isinstance(value, str) or "/" not in value:
        return None
    head, _, tail = value.partition("/")
    try:
        return int(head), int(tail)
    except ValueError:
        return None


def _entry(raw: Any, index: int, source: str) -> PaperNumber:
    if not isinstance(raw, dict) or not raw.get("id"):
        raise PaperNumbersError(
            f"{source}: numbers[{index}] needs an 'id' and the fields {', '.join(PROVENANCE)}"
        )
    where = f"{source}: numbers[{index}] ({raw['id']})"
    for key in (*PROVENANCE, "hardware"):
        if raw.get(key) in (None, ""):
            raise PaperNumbersError(
                f"{where}: field '{key}' is missing; every number needs "
                f"its {', '.join(PROVENANCE)} and hardware flag"
            )
    shapes = [k for k in ("value", "low", "values") if k in raw]
    if len(shapes) != 1 or ("low" in raw) != ("high" in raw):
        raise PaperNumbersError(f"{where}: give exactly one of 'value', 'low'+'high' or 'values'")
    slots = []
    for slot in raw.get("tables", []):
        if not {"id", "match", "column"} <= set(slot):
            raise PaperNumbersError(f"{where}: each of 'tables' needs id, match and column")
        slots.append(TableSlot(str(slot["id"]), tuple(slot["match"].items()), str(slot["column"])))
    return PaperNumber(
        id=str(raw["id"]),
        unit=str(raw["unit"]),
        text=str(raw["text"]),
        where=str(raw["where"]),
        experiment=str(raw["experiment"]),
        measures=str(raw["measures"]),
        quote=str(raw["quote"]),
        hardware=bool(raw["hardware"]),
        value=raw.get("value"),
        low=raw.get("low"),
        high=raw.get("high"),
        values=tuple(float(v) for v in raw.get("values", ())),
        of=raw.get("of"),
        tables=tuple(slots),
    )


def load_paper_numbers(path: Path | str | None = None) -> dict[str, PaperNumber]:
    """Every entry of the paper-numbers file by id (the shipped file by default)."""
    if path is None:
        source = f"rearrival/data/{DATA_FILE}"
        text = resources.files("rearrival.data").joinpath(DATA_FILE).read_text()
    else:
        source, text = str(path), Path(path).read_text()
    try:
        tree = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PaperNumbersError(f"{source}: not valid YAML ({exc})") from exc
    if not isinstance(tree, dict) or not isinstance(tree.get("numbers"), list):
        raise PaperNumbersError(f"{source}: needs a top-level 'numbers' list")
    out: dict[str, PaperNumber] = {}
    for index, raw in enumerate(tree["numbers"]):
        entry = _entry(raw, index, source)
        if entry.id in out:
            raise PaperNumbersError(f"{source}: id '{entry.id}' appears twice")
        out[entry.id] = entry
    return out


# --- joining onto tables ---------------------------------------------------------------


def _paper_columns(column: Column, number: PaperNumber) -> tuple[Column, Column]:
    numeric = number.number is not None and number.of is None
    paper_fmt = column.fmt if numeric and column.fmt != "str" else "str"
    diff_fmt = (
        "str"
        if number.is_label
        else "int"
        if number.of is not None
        else column.fmt
        if column.fmt != "str"
        else "f4"
    )
    return (
        Column(f"paper:{column.key}", f"{column.header} (paper)", paper_fmt),
        Column(f"diff:{column.key}", f"{column.header}: this run - paper", diff_fmt),
    )


def _paper_cell(number: PaperNumber) -> Any:
    """Single numbers in table units (formatted like the column); counts, ranges, sets
    and labels as the paper prints them."""
    if number.number is not None and number.of is None:
        return number.number
    return number.display()


def with_paper(table: Table, numbers: dict[str, PaperNumber]) -> Table:
    """The table with a "paper" and a "difference" column beside every column for which
    the paper publishes a value in some row; other tables come back unchanged."""
    slots = [(n, s) for n in numbers.values() for s in n.tables if s.table == table.id]
    if not slots:
        return table
    parts, joined = [], 0
    for part in table.parts:
        found: dict[str, PaperNumber] = {}
        rows = []
        for row in part.rows:
            extra = {}
            for number, slot in slots:
                if slot.matches(row):
                    found.setdefault(slot.column, number)
                    extra[f"paper:{slot.column}"] = _paper_cell(number)
                    extra[f"diff:{slot.column}"] = number.difference(row.get(slot.column))
            rows.append(row | extra)
        if not found:
            parts.append(part)
            continue
        joined += 1
        columns: list[Column] = []
        shown = {c.key for c in part.columns}
        for column in part.columns:
            columns.append(column)
            if column.key in found:
                columns += _paper_columns(column, found[column.key])
        for key in sorted(set(found) - shown):
            columns += _paper_columns(Column(key, key), found[key])
        parts.append(Part(part.name, tuple(columns), tuple(rows)))
    if not joined:
        return table
    note = (
        "Paper columns: the value the paper publishes for the same study, N, "
        "configuration and variant (src/rearrival/data/paper_numbers.yaml, each with its "
        "sentence); difference = this run - paper (for 'k/m' counts, k when m agrees; "
        "for a stated range, the distance outside it). 'selected' is compared with the "
        "paper's pick {1,4,6,8,10,16}/16 whatever this run's search picked."
    )
    return replace(table, parts=tuple(parts), notes=(*table.notes, note))
