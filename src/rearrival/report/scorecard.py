"""The scorecard: does this run support each finding of the paper?

One row per finding (``rearrival.report.findings``): its claim in one line, the section, the
paper's numbers (from ``data/paper_numbers.yaml``), this run's numbers (computed from the
regenerated tables and results, never typed), and a verdict, ``holds``, ``does not
hold`` or ``not comparable``, with the reason and the stated test. The report opens
with it; it is also written as CSV and Markdown beside the tables, and ``rearrival
tables --scorecard`` prints each finding within 100 columns.

Each finding is judged twice: with the profile the study used and, in an exploratory
second evaluation, with the other profile (``rearrival.report.profiles``); a line per
finding says whether the verdict differs, so a verdict that rests on the cost constants
is visible.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rearrival.report.conditions import parse_histogram
from rearrival.report.findings import (
    FAILS,
    HOLDS,
    NOT_COMPARABLE,
    Evidence,
    Finding,
    findings,
)
from rearrival.report.paper_numbers import PaperNumber, load_paper_numbers
from rearrival.report.table_model import csv_text, wrap_markdown
from rearrival.vocabulary import RBLN


@dataclass(frozen=True)
class ScoreRow:
    id: str
    claim: str
    section: str
    paper: str
    ours: str
    verdict: str
    why: str
    test: str
    hardware: bool
    # the same finding judged with the other profile, and whether the verdict differs
    other_ours: str = ""
    other_verdict: str = ""
    profiles: str = ""
    # on the emulated twin, a "does not hold": expected (and why) or unexpected
    on_twin: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "claim": self.claim,
            "section": self.section,
            "paper": self.paper,
            "ours": self.ours,
            "verdict": self.verdict,
            "why": self.why,
            "test": self.test,
            "hardware": "yes" if self.hardware else "no",
            "other_ours": self.other_ours,
            "other_verdict": self.other_verdict,
            "profiles": self.profiles,
            "on_twin": self.on_twin,
        }


def paper_text(finding: Finding, numbers: dict[str, PaperNumber]) -> str:
    if not finding.paper:
        return "no number in the text (qualitative)"
    return "; ".join(numbers[i].display() for i in finding.paper)


def score(ev: Evidence, numbers: dict[str, PaperNumber] | None = None) -> list[ScoreRow]:
    """One row per finding, judged on this run's evidence."""
    numbers = numbers or load_paper_numbers()
    out = []
    for finding in findings(numbers):
        outcome = finding.judge(ev)
        why = outcome.why
        if finding.selected and outcome.verdict != NOT_COMPARABLE:
            why += selected_note(ev, numbers)
        out.append(
            ScoreRow(
                finding.id,
                finding.claim,
                finding.section,
                paper_text(finding, numbers),
                outcome.ours,
                outcome.verdict,
                why,
                finding.test,
                finding.hardware,
                on_twin=twin_note(finding, outcome.verdict, ev),
            )
        )
    return out


EXPECTED_ON_TWIN, UNEXPECTED_ON_TWIN = "expected", "unexpected"


def twin_note(finding: Finding, verdict: str, ev: Evidence) -> str:
    """For a "does not hold" on the emulated twin: expected, with the twin's property
    that explains it (``Finding.twin``), or unexpected; empty otherwise."""
    if verdict != FAILS or ev.hardware:
        return ""
    if finding.twin:
        return f"{EXPECTED_ON_TWIN}: {finding.twin}"
    return (
        f"{UNEXPECTED_ON_TWIN}: no known property of the twin (data/emulator_truth.yaml) "
        "explains it"
    )


def profile_line(row: ScoreRow, other: ScoreRow, names: tuple[str, str], search: bool) -> str:
    """Whether a finding's verdict differs between the two profiles, in words."""
    used, alternative = names
    if search:
        return (
            f"not re-judged: the search ran once, with the {used} profile, and its pick is "
            "what was measured"
        )
    if row.verdict == other.verdict:
        return f"same verdict with the {used} and the {alternative} profile"
    return f"DIFFERS: {row.verdict} with the {used} profile, {other.verdict} with the {alternative}"


def with_other_profile(
    rows: Sequence[ScoreRow],
    other_rows: Sequence[ScoreRow],
    names: tuple[str, str],
    numbers: dict[str, PaperNumber] | None = None,
) -> list[ScoreRow]:
    """``rows`` (the study's profile) beside ``other_rows`` (the same findings judged on
    the second evaluation); ``names`` are the two profiles' names in that order."""
    searched = {f.id for f in findings(numbers or load_paper_numbers()) if f.search}
    other_by_id = {r.id: r for r in other_rows}
    out = []
    for row in rows:
        other = other_by_id[row.id]
        out.append(
            replace(
                row,
                other_ours=other.ours,
                other_verdict=other.verdict,
                profiles=profile_line(row, other, names, row.id in searched),
            )
        )
    return out


def without_other_profile(rows: Sequence[ScoreRow], reason: str) -> list[ScoreRow]:
    """``rows`` when no second evaluation could be made, saying why on every row."""
    return [replace(row, profiles=f"not judged with another profile: {reason}") for row in rows]


def selected_note(ev: Evidence, numbers: dict[str, PaperNumber]) -> str:
    """Why a finding about 'selected' may compare different configurations."""
    pick = (ev.search or {}).get("selected", {}).get("id")
    paper = numbers["search_pick"].value
    if pick is None:
        return f" (this run's selected configuration is unknown; the paper's is {paper})"
    return (
        ""
        if pick == paper
        else (f" (this run's selected configuration {pick} is not the paper's {paper})")
    )


# --- evidence from a results tree ------------------------------------------------------------


def reproduction(res: Any, kinds: Sequence[str] = ("comparison",)) -> dict[str, Any]:
    """Base-simulator padding ratio and decode steps against every complete run of the
    mechanism studies (the analogue of the paper's check on its existing data), and the
    injection gaps."""
    padding, steps = [], []
    for study in res.studies(*kinds):
        channels, predictions = res.channels(study.name), res.predictions(study.name)
        if channels is None or predictions is None:
            continue
        base = predictions[predictions["simulator"] == "base"]
        keyed = {
            (int(r.n), int(r.replicate), r.configuration, r.variant): r for r in base.itertuples()
        }
        for run in channels[channels["status"] == "complete"].itertuples():
            pred = keyed.get((int(run.n), int(run.replicate), run.configuration, run.variant))
            if pred is None:
                continue
            hist = parse_histogram(run.histogram)
            padded = sum(b * c for (_, b), c in hist.items())
            used = sum(n * c for (n, _), c in hist.items())
            if padded and run.decode_steps:
                padding.append(abs((padded - used) / padded - pred.padding_ratio))
                steps.append(abs(pred.decode_steps - run.decode_steps) / run.decode_steps)
    out: dict[str, Any] = {"runs": len(padding)}
    if padding:
        out |= {
            "padding_mae": math.fsum(padding) / len(padding),
            "steps_mare": math.fsum(steps) / len(steps),
        }
    out["injection"] = injection_gaps(res.gaps())
    return out


def injection_gaps(gaps: Any) -> dict[int, dict[str, float]]:
    """Per injected size: the mean background gap spanning the prefill and the median of
    the surrounding gaps (paper III-C)."""
    if gaps is None or gaps.empty:
        return {}
    out = {}
    for size, group in gaps.groupby("injected_prompt_tokens"):
        at, other = group[group["relative"] == 0], group[group["relative"] != 0]
        if not at.empty and not other.empty:
            out[int(size)] = {
                "at": float(at["gap_s"].mean()),
                "typical": float(other["gap_s"].median()),
            }
    return out


def evidence(res: Any, tables: Sequence[Any]) -> Evidence:
    decision = res.cfg.decision
    return Evidence(
        tables={t.id: t for t in tables},
        search=res.search_summary(),
        backends=tuple(res.backends()),
        reproduction=reproduction(res),
        band=decision.equivalence_band,
        confirmatory_n=decision.confirmatory_n,
        exploratory_n=decision.exploratory_n,
    )


# --- rendering ------------------------------------------------------------------------------

COLUMNS = (
    "id",
    "section",
    "claim",
    "paper",
    "ours",
    "verdict",
    "why",
    "on_twin",
    "test",
    "hardware",
    "other_ours",
    "other_verdict",
    "profiles",
)
HEADERS = {
    "id": "finding",
    "section": "section",
    "claim": "claim",
    "paper": "paper",
    "ours": "this run",
    "verdict": "verdict",
    "why": "why",
    "on_twin": "on the emulated twin",
    "test": "test",
    "hardware": "needs RBLN hardware",
    "other_ours": "this run, other profile",
    "other_verdict": "verdict, other profile",
    "profiles": "does the verdict depend on the profile?",
}


@dataclass(frozen=True)
class Scorecard:
    rows: tuple[ScoreRow, ...]
    backends: tuple[str, ...] = field(default_factory=tuple)
    # the profile the study used and the other one, each described with its sha256
    profile: str = ""
    other_profile: str = ""

    def counts(self, column: str = "verdict") -> dict[str, int]:
        return {
            v: sum(getattr(r, column) == v for r in self.rows)
            for v in (HOLDS, FAILS, NOT_COMPARABLE)
        }

    def differing(self) -> list[str]:
        """Findings whose verdict differs between the two profiles."""
        return [r.id for r in self.rows if r.profiles.startswith("DIFFERS")]


def scorecard_csv(card: Scorecard) -> str:
    return csv_text(COLUMNS, ([row.as_dict()[c] for c in COLUMNS] for row in card.rows))


def scorecard_markdown(card: Scorecard) -> str:
    """One section per finding (its long claim, reason and test as wrapped list items,
    not pipe-table cells), so the file reads at 100 columns."""
    counts = card.counts()
    used = ", ".join(card.backends) or "no runs yet"
    intro = (
        f"Backend: {used}. {counts[HOLDS]} hold, {counts[FAILS]} do not hold, "
        f"{counts[NOT_COMPARABLE]} not comparable. Paper numbers from "
        "src/rearrival/data/paper_numbers.yaml; each finding states its test."
    )
    lines = ["## Scorecard: the paper's findings against this run", "", *wrap_markdown(intro)]
    expected = backend_expectation(card)
    if expected:
        lines += ["", *wrap_markdown(expected)]
    for sentence in profile_sentences(card):
        lines += ["", *wrap_markdown(sentence)]
    # only with a second profile, and for a "does not hold" on the twin
    optional = ("other_ours", "other_verdict", "profiles", "on_twin")
    for row in card.rows:
        data = row.as_dict()
        lines += ["", f"### {row.id}: {row.verdict}", ""]
        for key in COLUMNS:
            if key in ("id", "verdict") or (key in optional and not data[key]):
                continue
            lines += wrap_markdown(f"- {HEADERS[key]}: {data[key] or 'n/a'}", indent="  ")
    return "\n".join(lines) + "\n"


def backend_expectation(card: Scorecard, numbers: dict[str, PaperNumber] | None = None) -> str:
    """What tally a complete run on the card's emulated backends gives, from the finding
    registry: the findings that are properties of the RBLN device are never judged
    there (not comparable), every other one is judged; and which findings of this run
    are not comparable beyond those (their results are missing). Empty on hardware."""
    if card.backends and all(b == RBLN for b in card.backends):
        return ""
    registry = findings(numbers or load_paper_numbers())
    hardware = [f.id for f in registry if f.hardware]
    judged = len(registry) - len(hardware)
    used = ", ".join(card.backends) or "the configured backend (no runs yet)"
    beyond = [r.id for r in card.rows if r.verdict == NOT_COMPARABLE and r.id not in hardware]
    this_run = (
        f"this run has {len(beyond)} more not comparable, their results missing: "
        f"{', '.join(beyond)}"
        if beyond
        else "this run has none beyond those"
    )
    return (
        f"Expected on {used}: {len(hardware)} of the {len(registry)} findings rest on the "
        f"RBLN device and are not judged there ({', '.join(hardware)}), so a complete "
        f"emulated run shows {len(hardware)} not comparable and judges the other {judged} "
        f"(holds plus does not hold = {judged}); {this_run}. {twin_tally(card)}"
    )


def twin_tally(card: Scorecard) -> str:
    """How many of the card's "does not hold" the twin's known truths explain, by id."""
    fails = [r for r in card.rows if r.verdict == FAILS]
    expected = [r.id for r in fails if r.on_twin.startswith(EXPECTED_ON_TWIN)]
    unexpected = [r.id for r in fails if r.id not in expected]
    if not fails:
        return "No finding does not hold."

    def are(count: int) -> str:
        return f"{count} is" if count == 1 else f"{count} are"

    return (
        f"Of the {len(fails)} that do not hold, {are(len(expected))} expected on the twin "
        f"({', '.join(expected) or 'none'}: a known property of the twin explains each, "
        f"given in its row) and {are(len(unexpected))} unexpected "
        f"({', '.join(unexpected) or 'none'})."
    )


def profile_sentences(card: Scorecard) -> list[str]:
    """What the two verdict columns rest on, and which findings depend on the profile."""
    if not card.profile:
        return []
    out = [f"Verdicts with the study's profile: {card.profile}."]
    if card.other_profile:
        other = card.counts("other_verdict")
        differing = card.differing()
        out.append(
            f"Second, exploratory evaluation with {card.other_profile}: predictions, channel "
            "A and decisions made by the exploratory stages from the same plans and run "
            f"records (results/exploratory/), never registered; {other[HOLDS]} hold, "
            f"{other[FAILS]} do not hold, "
            f"{other[NOT_COMPARABLE]} not comparable. Verdicts that differ: "
            f"{', '.join(differing) or 'none'}."
        )
    return out


def read_scorecard_csv(path: Path) -> Scorecard:
    """A scorecard written by ``scorecard_csv`` (what ``rearrival tables --scorecard``
    prints from)."""
    with path.open(newline="") as handle:
        found = [
            ScoreRow(
                **{k: v for k, v in row.items() if k != "hardware"},
                hardware=row["hardware"] == "yes",
            )
            for row in csv.DictReader(handle)
        ]
    return Scorecard(tuple(found))


def summary_lines(card: Scorecard) -> list[str]:
    """One entry per finding for the terminal: verdict, id, paper vs this run on its
    first line, the reason below it, indented and wrapped so no line passes 100 columns."""
    width = max(len(v) for v in (HOLDS, FAILS, NOT_COMPARABLE))
    indent = " " * (width + 2)
    return [
        "\n".join(
            [
                *wrap_markdown(
                    f"{r.verdict:<{width}}  {r.id}: paper {r.paper} | this run {r.ours or 'n/a'}",
                    indent=indent,
                ),
                *wrap_markdown(f"{indent}({r.why})", indent=indent),
                *(wrap_markdown(f"{indent}[{r.profiles}]", indent=indent) if r.profiles else []),
                *(
                    wrap_markdown(f"{indent}[on the twin: {r.on_twin}]", indent=indent)
                    if r.on_twin
                    else []
                ),
            ]
        )
        for r in card.rows
    ]
