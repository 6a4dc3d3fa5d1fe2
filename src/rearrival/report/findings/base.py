"""What every finding shares: the evidence it is judged on, its outcome, and the reading
of the regenerated tables (the scorecard's rows, ``rearrival.report.findings``).

A finding is a claim of the paper in one line, the section it comes from, the ids of the
published numbers it rests on (``data/paper_numbers.yaml``) and a test stated as a
sentence. Each test is the comparison the claim itself makes: a direction (the same sign
of a difference), an order (A above B), a classification under the preregistered rule,
the same pick, or a published value at the precision it is printed with. None has a
tolerance chosen after seeing results; thresholds come from the registration or from the
paper's printed numbers, never from code.

A judge returns "not comparable" when the run lacks what the finding needs (the study,
the configuration, the paper's candidate set) or when the finding is a property of the
RBLN device or stack itself (compile time, channel-B overhead and the channel-agreement
decisions resting on it) and the run did not use that hardware; this run's value is
still shown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rearrival.report.paper_numbers import PaperNumber, parse_count
from rearrival.report.table_model import cell_number
from rearrival.vocabulary import RBLN

HOLDS, FAILS, NOT_COMPARABLE = "holds", "does not hold", "not comparable"


@dataclass(frozen=True)
class Evidence:
    """What the findings are judged on: the regenerated tables by id, the search summary,
    the simulator's reproduction of this run's mechanism runs, and the backends used."""

    tables: dict[str, Any]
    search: dict[str, Any] | None
    backends: tuple[str, ...]
    reproduction: dict[str, Any] | None = None
    band: tuple[float, float] = (0.98, 1.02)
    confirmatory_n: tuple[int, ...] = (6, 8)
    exploratory_n: tuple[int, ...] = (10,)

    @property
    def hardware(self) -> bool:
        return bool(self.backends) and all(b == RBLN for b in self.backends)


@dataclass(frozen=True)
class Outcome:
    verdict: str
    ours: str
    why: str


@dataclass(frozen=True)
class Finding:
    """A finding of the paper, the paper numbers it rests on, and its stated test."""

    id: str
    claim: str
    section: str
    paper: tuple[str, ...]
    test: str
    judge: Callable[[Evidence], Outcome]
    hardware: bool = False
    selected: bool = False  # compares the search's pick, which may differ from the paper's
    search: bool = False  # judged on the search's ranking, computed once with the study's profile
    # Why "does not hold" is expected on the emulated twin, from its known truths
    # (data/emulator_truth.yaml) and a test that checks the mechanism
    # (tests/test_twin_expectations.py); empty: no known property of the twin explains one,
    # so a "does not hold" there is unexpected and the scorecard says so.
    twin: str = ""


# --- reading the tables --------------------------------------------------------------------


def rows(ev: Evidence, table: str, part: int | None = None, **match: Any) -> list[dict]:
    """Rows of a table (one part or all) whose cells equal ``match``."""
    found = ev.tables.get(table)
    if found is None:
        return []
    parts = found.parts if part is None else found.parts[part : part + 1]
    return [
        r for p in parts for r in p.rows if all(_cell_is(r.get(k), v) for k, v in match.items())
    ]


def _cell_is(got: Any, want: Any) -> bool:
    if isinstance(want, int | float) and not isinstance(want, bool):
        number = cell_number(got)
        return number is not None and number == float(want)
    return got == want


def first(ev: Evidence, table: str, part: int | None = None, **match: Any) -> dict | None:
    found = rows(ev, table, part, **match)
    return found[0] if found else None


def hits(row: dict | None) -> tuple[int, int] | None:
    return None if row is None else parse_count(row.get("reuse"))


def fixed(value: Any, digits: int = 4) -> str:
    number = cell_number(value)
    return "n/a" if number is None else f"{number:.{digits}f}"


def percent(value: Any) -> str:
    number = cell_number(value)
    return "n/a" if number is None else f"{100 * number:.2f} %"


def points(value: float) -> str:
    """A difference of two savings, in percentage points."""
    return f"{100 * value:.2f} pp"


def count_text(pair: tuple[int, int] | None) -> str:
    return "n/a" if pair is None else f"{pair[0]}/{pair[1]}"


def missing(what: str) -> Outcome:
    return Outcome(NOT_COMPARABLE, "", f"this run has no {what}")


def verdict(ok: bool, ours: str, why_yes: str, why_no: str) -> Outcome:
    return Outcome(HOLDS if ok else FAILS, ours, why_yes if ok else why_no)


def within_printed(value: float, number: PaperNumber) -> bool:
    """``value`` at or below the paper's value as printed (below its next rounding step)."""
    return value < number.number + number.half_unit


def in_printed_range(value: float, number: PaperNumber) -> bool:
    """``value`` inside the paper's stated range, each end widened to its printed
    precision ("about 7-8 minutes" admits anything that rounds to 7 or 8)."""
    low, high = number.bounds
    return low - number.half_unit <= value < high + number.half_unit


def hardware_only(ev: Evidence, ours: str) -> Outcome | None:
    """None on RBLN hardware, else "not comparable" with this run's value for reference."""
    if ev.hardware:
        return None
    used = ", ".join(ev.backends) or "no runs"
    return Outcome(
        NOT_COMPARABLE,
        ours,
        f"depends on the RBLN hardware; this run used {used} (value shown for reference only)",
    )


def hardware_wrap(judge: Callable[[Evidence], Outcome]) -> Callable[[Evidence], Outcome]:
    """``judge`` judged only on RBLN hardware (its own "not comparable" passes through)."""

    def wrapped(ev: Evidence) -> Outcome:
        out = judge(ev)
        if out.verdict == NOT_COMPARABLE:
            return out
        return hardware_only(ev, out.ours) or out

    return wrapped


def bind(
    judge: Callable[[Evidence, dict[str, PaperNumber]], Outcome], numbers: dict[str, PaperNumber]
) -> Callable[[Evidence], Outcome]:
    """A judge that reads the paper's numbers, as a judge of the evidence alone."""
    return lambda ev: judge(ev, numbers)
