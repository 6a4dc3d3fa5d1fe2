"""The scorecard of the paper's findings (rearrival.report.scorecard) on small synthetic results:
each verdict (holds, does not hold, not comparable) is reached by the stated test."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from rearrival.report.findings import (
    FAILS,
    HOLDS,
    NOT_COMPARABLE,
    ORDER,
    SECTIONS,
    Evidence,
    findings,
)
from rearrival.report.findings.base import in_printed_range, within_printed
from rearrival.report.paper_numbers import load_paper_numbers
from rearrival.report.scorecard import (
    Scorecard,
    backend_expectation,
    read_scorecard_csv,
    score,
    scorecard_csv,
    scorecard_markdown,
    summary_lines,
    twin_note,
    with_other_profile,
    without_other_profile,
)
from rearrival.report.table_model import Column, Part, Table

NUMBERS = load_paper_numbers()
PAPER_PICK = str(NUMBERS["search_pick"].value)


def table(table_id: str, *parts: list[dict[str, Any]]) -> Table:
    return Table(
        table_id,
        table_id,
        "",
        tuple(Part(f"p{i}", (Column("x", "x"),), tuple(rows)) for i, rows in enumerate(parts)),
    )


def evidence(
    *tables: Table,
    backends: tuple[str, ...] = ("emulated",),
    search: dict | None = None,
    reproduction: dict | None = None,
) -> Evidence:
    return Evidence({t.id: t for t in tables}, search, backends, reproduction)


def verdict_of(ev: Evidence, finding: str) -> tuple[str, str, str]:
    row = {r.id: r for r in score(ev, NUMBERS)}[finding]
    return row.verdict, row.ours, row.why


def grid(control_pad: float, wait_pad: float, control_reuse: str, wait_reuse: str) -> Table:
    base = {"study": "grid", "n": 6, "configuration": "baseline"}
    return table(
        "VI",
        [
            base
            | {
                "variant": "control",
                "padding_ratio": control_pad,
                "reuse": control_reuse,
                "decode_steps": 1288,
            },
            base
            | {
                "variant": "wait",
                "padding_ratio": wait_pad,
                "reuse": wait_reuse,
                "decode_steps": 2001,
            },
        ],
    )


def test_findings_are_well_formed_and_claims_hold_no_paper_numbers() -> None:
    found = findings(NUMBERS)
    assert len({f.id for f in found}) == len(found) >= 25
    for finding in found:
        assert finding.claim and finding.section and finding.test
        for number_id in finding.paper:
            number = NUMBERS[number_id]
            if any(ch.isdigit() for ch in number.text):
                assert number.text not in finding.claim, (finding.id, number.text)


def test_the_registry_lists_every_section_finding_once_in_the_paper_order() -> None:
    """ORDER is the one sequence the scorecard reads: every finding a section module
    defines appears in it exactly once, and nothing else does."""
    defined = [f.id for section in SECTIONS for f in section.findings(NUMBERS)]
    assert sorted(defined) == sorted(ORDER)
    assert len(set(ORDER)) == len(ORDER)
    assert [f.id for f in findings(NUMBERS)] == list(ORDER)


def test_hardware_findings_are_those_resting_on_hardware_numbers() -> None:
    """The data file's hardware flag and the findings' agree: a finding is judged only on
    RBLN runs exactly when one of its paper numbers is a property of that hardware."""
    for finding in findings(NUMBERS):
        assert finding.hardware == any(NUMBERS[i].hardware for i in finding.paper), finding.id


def test_no_results_means_nothing_is_comparable() -> None:
    rows = score(evidence(), NUMBERS)
    assert {r.verdict for r in rows} == {NOT_COMPARABLE}
    assert all(r.why for r in rows)


def test_direction_finding_holds_and_fails() -> None:
    assert verdict_of(evidence(grid(0.23, 0.17, "18/18", "14/18")), "wait_tradeoff")[0] == HOLDS
    got, ours, _ = verdict_of(evidence(grid(0.23, 0.17, "14/18", "18/18")), "wait_tradeoff")
    assert got == FAILS and "14/18 -> 18/18" in ours
    # padding rising with the wait breaks it just as well
    assert verdict_of(evidence(grid(0.17, 0.23, "18/18", "14/18")), "wait_tradeoff")[0] == FAILS


def test_savings_order() -> None:
    def xii(slots: float, chosen: float) -> Table:
        row = {"study": "validation", "n": 8}
        return table(
            "XII",
            [
                row | {"comparison": "slots16 vs baseline", "saving_a": slots},
                row | {"comparison": "selected vs baseline", "saving_a": chosen},
            ],
        )

    assert verdict_of(evidence(xii(0.08, 0.09)), "savings_n8")[0] == HOLDS
    # a different pick is judged but said so
    other = evidence(xii(0.08, 0.09), search={"selected": {"id": "12:1,2,4,8,12"}})
    got, _, why = verdict_of(other, "savings_n8")
    assert got == HOLDS and "12:1,2,4,8,12 is not the paper's" in why
    same = evidence(xii(0.08, 0.09), search={"selected": {"id": PAPER_PICK}})
    assert "not the paper's" not in verdict_of(same, "savings_n8")[2]
    assert verdict_of(evidence(xii(0.09, 0.08)), "savings_n8")[0] == FAILS
    assert verdict_of(evidence(xii(-0.01, 0.02)), "savings_n8")[0] == FAILS
    assert verdict_of(evidence(table("XII", [])), "savings_n8")[0] == NOT_COMPARABLE


def test_equivalence_band_comes_from_the_registration() -> None:
    ix = table(
        "IX",
        [
            {
                "study": "validation_remeasure",
                "n": 6,
                "comparison": "slots16 vs baseline",
                "ratio_obs_a": 0.979,
            }
        ],
    )
    assert verdict_of(evidence(ix), "remeasure_small_gain")[0] == FAILS
    wide = Evidence({"IX": ix}, None, ("emulated",), band=(0.97, 1.03))
    assert {r.id: r for r in score(wide, NUMBERS)}["remeasure_small_gain"].verdict == HOLDS


def test_hardware_findings_are_not_judged_on_the_emulator() -> None:
    x = table(
        "X",
        [
            {"study": "validation", "variant": "wait", "n": 6, "r_s": 1.2},
            {"study": "validation", "variant": "wait", "n": 8, "r_s": 1.6},
        ],
    )
    got, ours, why = verdict_of(evidence(x), "channel_r")
    assert got == NOT_COMPARABLE and "1.20" in ours and "RBLN hardware" in why
    assert verdict_of(evidence(x, backends=("rbln",)), "channel_r")[0] == HOLDS
    far = table("X", [{"study": "validation", "variant": "wait", "n": 6, "r_s": 3.0}])
    assert verdict_of(evidence(far, backends=("rbln",)), "channel_r")[0] == FAILS
    # a mixed run is not a hardware run
    assert verdict_of(evidence(x, backends=("emulated", "rbln")), "channel_r")[0] == NOT_COMPARABLE


def test_compile_time_needs_a_measured_compile() -> None:
    model = table("XIV", [{"compile_s": 471.6, "source": "model: authors' fit"}])
    got, _, why = verdict_of(evidence(model, backends=("rbln",)), "compile_time")
    assert got == NOT_COMPARABLE and "no compile was measured" in why
    measured = table("XIV", [{"compile_s": 455.0, "source": "measured (x.json)"}])
    assert verdict_of(evidence(measured, backends=("rbln",)), "compile_time")[0] == HOLDS
    slow = table("XIV", [{"compile_s": 1200.0, "source": "measured (x.json)"}])
    assert verdict_of(evidence(slow, backends=("rbln",)), "compile_time")[0] == FAILS


def test_printed_precision_bounds() -> None:
    minutes, r = NUMBERS["compile_minutes"], NUMBERS["chan_r_baseline"]
    assert in_printed_range(6.5, minutes) and in_printed_range(8.49, minutes)
    assert not in_printed_range(8.5, minutes) and not in_printed_range(6.4, minutes)
    assert in_printed_range(0.95, r) and not in_printed_range(1.75, r)
    mae = NUMBERS["existing_padding_mae"]
    assert within_printed(0.0074, mae) and not within_printed(0.0075, mae)


def _summary(pick: str, searched: int = 2077, **extra: Any) -> dict[str, Any]:
    return {
        "candidates": {"searched": searched},
        "selected": {"id": pick},
        "evaluation_score": 0.91,
        "top": [{"id": str(i)} for i in range(20)],
        "top_batch_sizes": [16],
        "top_score_spread_pp": 0.4,
        "mean_ratio_changes_selection": False,
        "restricted": {
            "6,8": {
                "selected": "16:1,2,4,6,8,16",
                "full_pick_rank": 15,
                "mean_ratio_changes_selection": False,
            },
            "8,10": {"selected": pick, "mean_ratio_changes_selection": True},
        },
    } | extra


def test_search_findings() -> None:
    same = evidence(search=_summary(PAPER_PICK))
    assert verdict_of(same, "search_pick")[0] == HOLDS
    assert verdict_of(same, "search_top")[0] == HOLDS
    assert verdict_of(same, "search_n_sets")[0] == HOLDS
    assert verdict_of(same, "search_mean_ratio")[0] == FAILS  # {8,10} changes it
    other = evidence(search=_summary("12:1,2,4,8,12"))
    assert verdict_of(other, "search_pick")[0] == FAILS
    wide = evidence(search=_summary(PAPER_PICK, top_score_spread_pp=0.8))
    assert verdict_of(wide, "search_top")[0] == FAILS
    small = evidence(search=_summary(PAPER_PICK, searched=57))
    got, _, why = verdict_of(small, "search_pick")
    assert got == NOT_COMPARABLE and "57" in why


def test_counts_of_closer_simulators() -> None:
    xi = table(
        "XI",
        [
            {"closer": c, "error_full": 0.01, "error_fixed": 0.02}
            for c in ("full", "fixed", "full", "fixed")
        ],
    )
    assert verdict_of(evidence(xi), "fixed_arrival")[0] == HOLDS
    xi = table("XI", [{"closer": "full", "error_full": 0.01, "error_fixed": 0.02}] * 3)
    assert verdict_of(evidence(xi), "fixed_arrival")[0] == FAILS
    same = table("S9", [{"error_base": 0.01, "error_dummy": 0.01}] * 4)
    got, ours, _ = verdict_of(evidence(same), "dummy_block")
    assert got == FAILS and "worse in 0, better in 0 of 4" in ours
    worse = table("S9", [{"error_base": 0.01, "error_dummy": 0.02}] * 4)
    assert verdict_of(evidence(worse), "dummy_block")[0] == HOLDS


def test_saturation_needs_both_steps() -> None:
    one = table(
        "XIII",
        [],
        [
            {
                "study": "saturation",
                "comparison": "sat24 vs sat16",
                "median": 1.0,
                "verdict": "saturated",
            }
        ],
    )
    assert verdict_of(evidence(one), "saturation")[0] == NOT_COMPARABLE
    both = table(
        "XIII",
        [],
        [
            {"study": "saturation", "comparison": "sat24 vs sat16", "verdict": "saturated"},
            {"study": "saturation", "comparison": "sat32 vs sat24", "verdict": "not saturated"},
        ],
    )
    assert verdict_of(evidence(both), "saturation")[0] == FAILS


def test_error_findings() -> None:
    rows = [
        {"study": "validation", "n": n, "comparison": c, "error": e, "verdict": v}
        for n, c, e, v in (
            (8, "a", 0.006, "pass"),
            (8, "b", 0.007, "pass"),
            (10, "a", 0.034, "exploratory"),
            (10, "b", 0.036, "exploratory"),
        )
    ]
    ev = evidence(table("IX", rows))
    assert verdict_of(ev, "error_sign")[0] == HOLDS
    assert verdict_of(ev, "exploratory_errors")[0] == HOLDS
    assert verdict_of(ev, "confirmatory_pass")[0] == HOLDS
    rows[1] |= {"error": -0.04, "verdict": "fail"}
    ev = evidence(table("IX", rows))
    assert verdict_of(ev, "error_sign")[0] == FAILS
    assert verdict_of(ev, "exploratory_errors")[0] == FAILS
    assert verdict_of(ev, "confirmatory_pass")[0] == FAILS


def test_reproduction_and_injection() -> None:
    good = {
        "runs": 10,
        "padding_mae": 0.006,
        "steps_mare": 0.01,
        "injection": {256: {"at": 0.05, "typical": 0.01}},
    }
    assert verdict_of(evidence(reproduction=good), "reproduction")[0] == HOLDS
    assert verdict_of(evidence(reproduction=good), "injection")[0] == HOLDS
    bad = good | {"steps_mare": 0.035, "injection": {256: {"at": 0.01, "typical": 0.01}}}
    assert verdict_of(evidence(reproduction=bad), "reproduction")[0] == FAILS
    assert verdict_of(evidence(reproduction=bad), "injection")[0] == FAILS
    assert verdict_of(evidence(reproduction={"runs": 0}), "reproduction")[0] == NOT_COMPARABLE


def test_renderings_agree(tmp_path) -> None:
    card = Scorecard(
        tuple(score(evidence(grid(0.23, 0.17, "18/18", "14/18")), NUMBERS)), ("emulated",)
    )
    path = tmp_path / "scorecard.csv"
    path.write_text(scorecard_csv(card))
    again = read_scorecard_csv(path)
    assert again.rows == card.rows
    lines = summary_lines(card)
    assert len(lines) == len(card.rows)
    assert lines[0].startswith("holds") and "wait_tradeoff" in lines[0]
    markdown = scorecard_markdown(card)
    assert markdown.count("\n### ") == len(card.rows)  # one section per finding
    assert "1 hold," in markdown


def test_a_verdict_that_rests_on_the_profile_is_named_on_its_line(tmp_path) -> None:
    """Judged on two evaluations that differ only in the grid study's padding, exactly
    wait_tradeoff differs; search findings are never re-judged; every rendering says so."""
    calibrated = score(evidence(grid(0.23, 0.17, "18/18", "14/18")), NUMBERS)
    published = score(evidence(grid(0.23, 0.25, "18/18", "14/18")), NUMBERS)
    rows = with_other_profile(calibrated, published, ("calibrated", "published"), NUMBERS)
    by_id = {r.id: r for r in rows}
    assert by_id["wait_tradeoff"].verdict == HOLDS
    assert by_id["wait_tradeoff"].other_verdict == FAILS
    assert by_id["wait_tradeoff"].profiles == (
        "DIFFERS: holds with the calibrated profile, does not hold with the published"
    )
    searched = {f.id for f in findings(NUMBERS) if f.search}
    assert searched == {"search_pick", "search_top", "search_n_sets", "search_mean_ratio"}
    for row in rows:
        if row.id in searched:
            assert row.profiles.startswith(
                "not re-judged: the search ran once, with the calibrated"
            )
        elif row.id != "wait_tradeoff":
            assert row.profiles == "same verdict with the calibrated and the published profile"
    card = Scorecard(tuple(rows), ("emulated",), "calibrated, sha256 a", "published, sha256 b")
    assert card.differing() == ["wait_tradeoff"]
    path = tmp_path / "scorecard.csv"
    path.write_text(scorecard_csv(card))
    assert read_scorecard_csv(path).rows == card.rows
    assert "[DIFFERS: holds with the calibrated" in summary_lines(card)[0]
    markdown = scorecard_markdown(card)
    assert "Verdicts with the study's profile: calibrated, sha256 a." in markdown
    assert "Second, exploratory evaluation with published, sha256 b" in markdown
    assert "Verdicts that differ: wait_tradeoff." in markdown


def test_without_a_second_evaluation_every_row_says_why() -> None:
    rows = without_other_profile(score(evidence(), NUMBERS), "no calibrated profile yet")
    assert {r.profiles for r in rows} == {
        "not judged with another profile: no calibrated profile yet"
    }
    assert Scorecard(tuple(rows)).differing() == []


@pytest.mark.parametrize("finding", ["initial_withheld", "remeasure_both_rules"])
def test_channel_agreement_findings_are_hardware_findings(finding) -> None:
    rows = [
        {
            "study": s,
            "n": 6,
            "comparison": "slots16 vs baseline",
            "channel_diff": 0.021,
            "tau": 0.02,
            "verdict": v,
            "verdict_fixed": v,
        }
        for s, v in (("validation", "withheld"), ("validation_remeasure", "pass"))
    ]
    ix = table("IX", rows)
    assert verdict_of(evidence(ix), finding)[0] == NOT_COMPARABLE
    assert verdict_of(evidence(ix, backends=("rbln",)), finding)[0] == HOLDS


def test_the_emulated_tally_to_expect_comes_from_the_registry() -> None:
    """The scorecard did not say which tally to expect on the emulated backend (issue
    29): the findings resting on the RBLN device are named, and the count a complete
    emulated run shows as not comparable and as judged, computed from the registry."""
    registry = findings(NUMBERS)
    device = [f.id for f in registry if f.hardware]
    assert device and len(device) < len(registry)
    nothing = Scorecard(tuple(score(evidence(), NUMBERS)), ("emulated",))
    text = backend_expectation(nothing, NUMBERS)
    assert f"{len(device)} of the {len(registry)} findings rest on the RBLN device" in text
    assert f"({', '.join(device)})" in text
    assert f"shows {len(device)} not comparable and judges the other " in text
    assert f"judges the other {len(registry) - len(device)} " in text
    missing = [r.id for r in nothing.rows if r.verdict == NOT_COMPARABLE and r.id not in device]
    assert missing and f"this run has {len(missing)} more not comparable" in text
    assert ", ".join(missing) in text
    # a run where only the device findings are not comparable has nothing missing
    judged = tuple(r if r.id in device else replace(r, verdict=HOLDS) for r in nothing.rows)
    assert "this run has none beyond those." in backend_expectation(
        Scorecard(judged, ("emulated-http",)), NUMBERS
    )
    assert "Expected on emulated-http" in backend_expectation(
        Scorecard(judged, ("emulated-http",)), NUMBERS
    )
    assert backend_expectation(Scorecard(judged, ("rbln",)), NUMBERS) == ""
    assert " ".join(text.split()) in " ".join(scorecard_markdown(nothing).split())


def test_each_does_not_hold_on_the_twin_is_marked_expected_or_unexpected() -> None:
    """The scorecard said 8 do not hold on the emulated twin without saying which are
    expected there (issue 36 item 9): each such row says expected (the twin's property
    that explains it, ``Finding.twin``) or unexpected, and the tally counts both."""
    registry = {f.id: f for f in findings(NUMBERS)}
    explained = [i for i, f in registry.items() if f.twin]
    assert "grid_steps_feedback" in explained and len(explained) < len(registry)
    rows = tuple(
        replace(r, verdict=FAILS) if r.id in ("grid_steps_feedback", "error_sign") else r
        for r in score(evidence(), NUMBERS)
    )
    rows = tuple(replace(r, on_twin=twin_note(registry[r.id], r.verdict, evidence())) for r in rows)
    card = Scorecard(rows, ("emulated",))
    by_id = {r.id: r for r in card.rows}
    assert by_id["grid_steps_feedback"].on_twin.startswith("expected: the twin's HTTP")
    assert by_id["error_sign"].on_twin.startswith("unexpected: ")
    assert all(not r.on_twin for r in card.rows if r.verdict != FAILS)
    text = backend_expectation(card, NUMBERS)
    assert "Of the 2 that do not hold, 1 is expected on the twin (grid_steps_feedback" in text
    assert "1 is unexpected (error_sign)" in text
    assert "on the emulated twin: expected: the twin's HTTP" in scorecard_markdown(card)
    assert twin_note(registry["grid_steps_feedback"], FAILS, evidence(backends=("rbln",))) == ""
