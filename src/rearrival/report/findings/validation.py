"""Findings on the cost validation (paper Section IV, Tables IX and XI, Supplementary S9):
the preregistered verdicts, the sign and size of the prediction errors, the channel-
agreement decisions (judged on RBLN hardware only), fixed arrivals, the dummy-block rule
and the reproduction of existing runs."""

from __future__ import annotations

import math

from rearrival.report.findings.base import (
    Evidence,
    Finding,
    Outcome,
    bind,
    fixed,
    hardware_wrap,
    missing,
    rows,
    verdict,
    within_printed,
)
from rearrival.report.paper_numbers import PaperNumber
from rearrival.report.table_model import cell_number
from rearrival.vocabulary import RULE_SETS


def _ix(ev: Evidence) -> list[dict]:
    return rows(ev, "IX")


def judge_confirmatory(ev: Evidence) -> Outcome:
    judged = [r for r in _ix(ev) if r.get("verdict") in ("pass", "fail")]
    if not judged:
        return missing("judged confirmatory comparison")
    passed = [r for r in judged if r["verdict"] == "pass"]
    errors = [
        abs(cell_number(r["error"])) for r in passed if cell_number(r.get("error")) is not None
    ]
    spread = f", |e| {min(errors):.4f}-{max(errors):.4f}" if errors else ""
    ours = f"{len(passed)} of {len(judged)} judged pass{spread}"
    return verdict(
        len(passed) == len(judged),
        ours,
        "every judged confirmatory comparison passes",
        "a judged confirmatory comparison fails",
    )


def judge_error_sign(ev: Evidence) -> Outcome:
    errors = [cell_number(r.get("error")) for r in _ix(ev)]
    errors = [e for e in errors if e is not None]
    if not errors:
        return missing("prediction error")
    positive = sum(e > 0 for e in errors)
    ours = f"{positive} of {len(errors)} errors positive"
    return verdict(
        positive == len(errors),
        ours,
        "the simulator overestimated savings in every comparison",
        "some errors are not positive",
    )


def judge_exploratory(ev: Evidence) -> Outcome:
    explored = [
        abs(cell_number(r["error"]))
        for r in _ix(ev)
        if int(r["n"]) in ev.exploratory_n and cell_number(r.get("error")) is not None
    ]
    confirmed = [
        abs(cell_number(r["error"]))
        for r in _ix(ev)
        if int(r["n"]) in ev.confirmatory_n and cell_number(r.get("error")) is not None
    ]
    if not explored or not confirmed:
        return missing("errors at both exploratory and confirmatory N")
    ours = (
        f"exploratory |e| {', '.join(f'{e:.4f}' for e in explored)}; largest "
        f"confirmatory {max(confirmed):.4f}"
    )
    return verdict(
        min(explored) > max(confirmed),
        ours,
        "every exploratory error exceeds every confirmatory one",
        "an exploratory error is no larger than a confirmatory one",
    )


def judge_initial_withheld(ev: Evidence) -> Outcome:
    found = [r for r in rows(ev, "IX", study="validation", n=6)]
    if not found:
        return missing("initial validation comparisons at N=6")
    diffs = ", ".join(fixed(r.get("channel_diff")) for r in found)
    ours = f"channel diffs {diffs}; verdicts {', '.join(str(r.get('verdict')) for r in found)}"
    return verdict(
        all(r.get("verdict") == "withheld" for r in found),
        ours,
        "withheld on channel agreement",
        "not withheld",
    )


def judge_remeasure_both_rules(ev: Evidence) -> Outcome:
    found = rows(ev, "IX", study="validation_remeasure", n=6)
    if not found:
        return missing("N=6 re-measurement comparisons")
    ours = "; ".join(
        f"{r['comparison']}: tau {fixed(r.get('tau'))}, diff "
        f"{fixed(r.get('channel_diff'))}, {r.get('verdict')}/{r.get('verdict_fixed')}"
        for r in found
    )
    ok = all(r.get("verdict") == "pass" and r.get("verdict_fixed") == "pass" for r in found)
    return verdict(
        ok, ours, "passes under the amended and the initial rule", "does not pass under both rules"
    )


def judge_fixed_arrival(ev: Evidence) -> Outcome:
    judged = [r for r in rows(ev, "XI") if r.get("closer")]
    if not judged:
        return missing("full vs fixed-arrival comparison (Table XI)")
    full = sum(r["closer"] == "full" for r in judged)
    mae = [
        math.fsum(abs(cell_number(r[k])) for r in judged) / len(judged)
        for k in ("error_full", "error_fixed")
    ]
    ours = f"full closer in {full} of {len(judged)}; MAE {mae[0]:.4f} (full), {mae[1]:.4f} (fixed)"
    return verdict(
        2 * full <= len(judged),
        ours,
        "recomputing re-arrivals is closer in at most half the comparisons",
        "the full simulator is closer in a majority of comparisons",
    )


def judge_dummy_block(ev: Evidence) -> Outcome:
    judged = [
        r
        for r in rows(ev, "S9", 0)
        if cell_number(r.get("error_base")) is not None
        and cell_number(r.get("error_dummy")) is not None
    ]
    if not judged:
        return missing("base vs dummy-block simulator comparison (S9)")
    worse = sum(abs(r["error_dummy"]) > abs(r["error_base"]) for r in judged)
    better = sum(abs(r["error_dummy"]) < abs(r["error_base"]) for r in judged)
    release, rule = RULE_SETS["dummy"]
    ours = f"dummy ({release} + {rule}) worse in {worse}, better in {better} of {len(judged)}"
    return verdict(
        worse > better,
        ours,
        "adding the rule worsened more predictions than it improved",
        "adding the rule did not worsen more predictions than it improved",
    )


def judge_reproduction(ev: Evidence, numbers: dict[str, PaperNumber]) -> Outcome:
    rep = ev.reproduction
    if not rep or not rep.get("runs"):
        return missing("mechanism-study runs with base-simulator predictions")
    ours = (
        f"padding MAE {rep['padding_mae']:.4f}, decode-step MARE "
        f"{100 * rep['steps_mare']:.2f} % over {rep['runs']} runs (this run's mechanism "
        "studies, not the authors' 80 runs)"
    )
    ok = within_printed(rep["padding_mae"], numbers["existing_padding_mae"]) and within_printed(
        rep["steps_mare"], numbers["existing_steps_mare"]
    )
    return verdict(
        ok,
        ours,
        "at or below the paper's level at its printed precision",
        "worse than the paper's level at its printed precision",
    )


def findings(numbers: dict[str, PaperNumber]) -> tuple[Finding, ...]:
    """The findings of Section IV and Supplementary S9."""
    return (
        Finding(
            "confirmatory_pass",
            "Confirmatory cost predictions pass the preregistered criteria",
            "IV, Table IX",
            ("val_confirmatory_errors",),
            "every judged (not withheld) confirmatory comparison has verdict pass",
            judge_confirmatory,
        ),
        Finding(
            "error_sign",
            "The simulator overestimates savings: every prediction error is positive",
            "IV, Table IX",
            ("val_error_sign",),
            "every R_obs - R_pred > 0 (replicate sums)",
            judge_error_sign,
        ),
        Finding(
            "exploratory_errors",
            "Prediction errors grow at the exploratory N",
            "IV, Table IX",
            ("val_n10_errors", "val_confirmatory_errors"),
            "smallest exploratory |e| > largest confirmatory |e|",
            judge_exploratory,
        ),
        Finding(
            "initial_withheld",
            "The initial N=6 decisions are withheld because the "
            "channels disagree beyond the fixed tolerance",
            "IV, Table IX",
            ("val_n6_initial_channel_diffs",),
            "every initial N=6 comparison withheld",
            hardware_wrap(judge_initial_withheld),
            hardware=True,
        ),
        Finding(
            "remeasure_both_rules",
            "The N=6 re-measurement passes under both the amended and the initial tolerance",
            "IV, Table IX",
            ("rem_n6_tau", "rem_n6_channel_diffs"),
            "every re-measurement comparison passes under the registered and the fixed rule",
            hardware_wrap(judge_remeasure_both_rules),
            hardware=True,
        ),
        Finding(
            "fixed_arrival",
            "Recomputing re-arrival times does not predict better than fixed arrivals",
            "IV, Table XI",
            ("fixed_closer_full", "fixed_mae_full", "fixed_mae_fixed"),
            "the full simulator is closer in at most half of the comparisons",
            judge_fixed_arrival,
        ),
        Finding(
            "dummy_block",
            "Adding the observed dummy-block rule worsens predictions",
            "IV, S9",
            ("dummy_worse", "dummy_better"),
            "the dummy-block simulator has the larger |error| in more comparisons than the smaller",
            judge_dummy_block,
        ),
        Finding(
            "reproduction",
            "The simulator reproduces the padding ratio and decode steps of existing runs closely",
            "IV",
            ("existing_padding_mae", "existing_steps_mare"),
            "padding MAE and decode-step MARE at or below the paper's values at their "
            "printed precision",
            bind(judge_reproduction, numbers),
        ),
    )
