"""Study-level decision tables: the rules of ``rearrival.judge.decide`` applied to a study's
channel table and predictions (paper II-D, IV, V-C; docs/DESIGN.md §9).

One CSV per study with one row per comparison. Validation studies get the preregistered
verdicts (pass / fail / withheld / exploratory) under the criteria read back from the
committed preregistration; saturation studies the bootstrap classification; mechanism
studies and repeats descriptive ratios on both channels. A comparison with a missing or
incomplete replicate is never judged: its row says which run is missing and why.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import pandas as pd

from rearrival.config.decision import DecisionCriteria
from rearrival.config.study import Condition, Study
from rearrival.judge.decide import judge_rows, saturation, summed_ratio, table_csv
from rearrival.vocabulary import PREDICTION

COLUMNS = (
    "study",
    "kind",
    "comparison",
    "n",
    "variant",
    "reference",
    "changed",
    "replicates",
    "ratio_pred",
    "ratio_obs_a",
    "ratio_obs_b",
    "rule",
    "r_base_s",
    "b_base_s",
    "tau",
    "channel_diff",
    "error",
    "verdict",
    "ci_low",
    "ci_high",
    "note",
    "run_ids",
)


@dataclass(frozen=True)
class Side:
    """The complete runs of one condition at one N, by replicate, plus what is missing."""

    runs: pd.DataFrame
    missing: str | None


def condition_runs(
    channels: pd.DataFrame,
    n: int,
    configuration: str,
    variant: str,
    replicates: int,
    condition: str | None = None,
) -> Side:
    """Complete runs of a condition at N, one per replicate. This is the one pairing of
    replicates (a comparison sums its sides over the same replicates): a replicate with
    no run, an incomplete run or more than one run withholds the comparison, and
    ``missing`` says which run and why."""
    chosen = channels[
        (channels["n"] == n)
        & (channels["configuration"] == configuration)
        & (channels["variant"] == variant)
    ]
    if condition is not None:
        chosen = chosen[chosen["condition"] == condition]
    complete = chosen[chosen["status"] == "complete"].sort_values("replicate")
    problems = []
    for replicate in range(replicates):
        rows = chosen[chosen["replicate"] == replicate]
        if rows.empty:
            problems.append(f"replicate {replicate} of {configuration}-{variant} has no run")
        elif (rows["status"] != "complete").any():
            bad = rows[rows["status"] != "complete"].iloc[0]
            problems.append(f"run {bad['run_id']} is {bad['status']} ({bad['reason']})")
        elif len(rows) > 1:
            problems.append(
                f"replicate {replicate} of {configuration}-{variant} has {len(rows)} runs "
                f"({' '.join(rows['run_id'])}); keep one"
            )
    return Side(complete, "; ".join(problems) or None)


def _run_ids(*sides: Side) -> str:
    return " ".join(run_id for side in sides for run_id in side.runs["run_id"])


def _base_row(
    study: Study, comparison: str, n: int, variant: str, reference: str, changed: str
) -> dict[str, Any]:
    return {
        "study": study.name,
        "kind": study.kind,
        "comparison": comparison,
        "n": n,
        "variant": variant,
        "reference": reference,
        "changed": changed,
    }


def observed_ratios(reference: Side, changed: Side) -> dict[str, Any]:
    """Replicate-summed channel ratios and the baseline's r and B (sums, never means)."""
    return {
        "replicates": len(reference.runs),
        "ratio_obs_a": summed_ratio(list(changed.runs["a_s"]), list(reference.runs["a_s"])),
        "ratio_obs_b": summed_ratio(list(changed.runs["b_s"]), list(reference.runs["b_s"])),
        "r_base_s": math.fsum(reference.runs["r_s"]),
        "b_base_s": math.fsum(reference.runs["b_s"]),
        "run_ids": _run_ids(reference, changed),
    }


def withheld(row: dict[str, Any], *problems: str | None) -> dict[str, Any] | None:
    """The row marked withheld when a side lacks a complete replicate, else None."""
    found = [p for p in problems if p]
    if not found:
        return None
    return row | {"verdict": "withheld", "note": "not judged: " + "; ".join(found)}


def described(row: dict[str, Any], reference: Side, changed: Side) -> dict[str, Any]:
    """A descriptive paired comparison on both channels, or withheld if incomplete."""
    missing = withheld(row, reference.missing, changed.missing)
    if missing is not None:
        return missing
    observed = observed_ratios(reference, changed)
    extra = (
        {"error": observed["ratio_obs_a"] - row["ratio_pred"]}
        if row.get("ratio_pred") is not None
        else {}
    )
    return (
        row
        | observed
        | extra
        | {
            "channel_diff": abs(observed["ratio_obs_a"] - observed["ratio_obs_b"]),
            "verdict": "descriptive",
        }
    )


def predicted_ratio(
    predictions: pd.DataFrame,
    n: int,
    reference: str,
    changed: str,
    variant: str,
    reference_variant: str | None = None,
    simulator: str = PREDICTION,
) -> float:
    """Replicate-summed predicted device time ratio of two conditions (paper IV)."""
    chosen = predictions[(predictions["n"] == n) & (predictions["simulator"] == simulator)]

    def total(configuration: str, which: str) -> list[float]:
        rows = chosen[(chosen["configuration"] == configuration) & (chosen["variant"] == which)]
        return list(rows.sort_values("replicate")["device_s"])

    return summed_ratio(total(changed, variant), total(reference, reference_variant or variant))


def validation_rows(
    replicates: int,
    study: Study,
    channels: pd.DataFrame,
    predictions: pd.DataFrame,
    criteria: DecisionCriteria,
    rule_set: str = PREDICTION,
) -> list[dict]:
    """Preregistered cost validation (Table IX): each changed configuration vs baseline,
    the prediction that of the registered ``rule_set`` (``vllm`` on vLLM)."""
    rows, pending = [], []
    for n in study.n:
        for changed in study.configurations[1:]:
            for variant in study.variants:
                row = _base_row(
                    study, f"{changed} vs {study.baseline}", n, variant, study.baseline, changed
                )
                reference = condition_runs(channels, n, study.baseline, variant, replicates)
                other = condition_runs(channels, n, changed, variant, replicates)
                row["ratio_pred"] = predicted_ratio(
                    predictions, n, study.baseline, changed, variant, simulator=rule_set
                )
                row["rule"] = study.rule
                missing = withheld(row, reference.missing, other.missing)
                if missing is not None:
                    rows.append(missing)
                    continue
                pending.append(row | observed_ratios(reference, other))
    judged = judge_rows(pending, criteria=criteria, source=f"study {study.name}")
    return rows + judged


def comparison_pairs(study: Study) -> list[tuple[Condition, Condition]]:
    """(reference, changed) pairs of a mechanism study: each configuration against the
    baseline under the same workload (interventions), and each workload variant against
    the first listed one under the same configuration (tool wait vs control)."""
    pairs = []
    for variant in study.variants:
        for configuration in study.configurations[1:]:
            pairs.append((Condition(study.baseline, variant), Condition(configuration, variant)))
    for configuration in study.configurations:
        for variant in study.variants[1:]:
            pairs.append(
                (Condition(configuration, study.variants[0]), Condition(configuration, variant))
            )
    return pairs


def comparison_rows(
    replicates: int,
    study: Study,
    channels: pd.DataFrame,
    predictions: pd.DataFrame,
    rule_set: str = PREDICTION,
) -> list[dict]:
    """Mechanism studies: paired comparisons on both channels with the simulator's
    prediction beside them (descriptive: these studies carry no verdict)."""
    rows = []
    for n in study.n:
        for first, condition in comparison_pairs(study):
            row = _base_row(
                study,
                f"{condition.label} vs {first.label}",
                n,
                condition.variant,
                first.label,
                condition.label,
            )
            reference = condition_runs(channels, n, first.configuration, first.variant, replicates)
            other = condition_runs(
                channels, n, condition.configuration, condition.variant, replicates
            )
            row["ratio_pred"] = predicted_ratio(
                predictions,
                n,
                first.configuration,
                condition.configuration,
                condition.variant,
                first.variant,
                rule_set,
            )
            rows.append(described(row, reference, other))
    return rows


def saturation_rows(
    replicates: int,
    study: Study,
    channels: pd.DataFrame,
    criteria: DecisionCriteria,
    n_boot: int,
    seed: int,
) -> list[dict]:
    """Adjacent enlarged configurations (Table XIII): the bootstrap CI of the median
    channel-A ratio over the N x replicate comparisons classifies each step."""
    rows = []
    variant = study.variants[0]
    names = list(study.configurations)
    for smaller, larger in pairwise(names):
        ratios, sides, missing = [], [], []
        for n in study.n:
            a = condition_runs(channels, n, smaller, variant, replicates)
            b = condition_runs(channels, n, larger, variant, replicates)
            missing += [m for m in (a.missing, b.missing) if m]
            sides += [a, b]
            pairs = a.runs.merge(b.runs, on="replicate", suffixes=("_a", "_b"))
            ratios += list(pairs["a_s_b"] / pairs["a_s_a"])
        row = _base_row(study, f"{larger} vs {smaller}", 0, variant, smaller, larger)
        if missing:
            rows.append(withheld(row, *missing))
            continue
        result = saturation(
            ratios,
            n_boot=n_boot,
            seed=seed,
            width=criteria.saturation_width,
            confidence=criteria.saturation_confidence,
        )
        rows.append(
            row
            | {
                "replicates": len(ratios),
                "ratio_obs_a": result.median,
                "ci_low": result.ci_low,
                "ci_high": result.ci_high,
                "verdict": "saturated" if result.saturated else "not saturated",
                "note": "ratios " + json.dumps([round(r, 6) for r in ratios]),
                "run_ids": _run_ids(*sides),
            }
        )
    return rows


def repeat_rows(replicates: int, study: Study, channels: pd.DataFrame) -> list[dict]:
    """No-treatment repeats (S1): the same plan and configuration run again; the channel
    ratios show run-to-run variation against the tolerance tau."""
    rows = []
    for condition in study.conditions():
        labels = [f"{condition.label}-{k}" for k in range(study.repeats)]
        for n in study.n:
            first = condition_runs(
                channels, n, condition.configuration, condition.variant, replicates, labels[0]
            )
            for label in labels[1:]:
                again = condition_runs(
                    channels, n, condition.configuration, condition.variant, replicates, label
                )
                row = _base_row(
                    study, f"{label} vs {labels[0]}", n, condition.variant, labels[0], label
                )
                rows.append(described(row, first, again))
    return rows


def decision_table(
    study: Study,
    replicates: int,
    study_seed: int,
    channels: pd.DataFrame,
    predictions: pd.DataFrame,
    criteria: DecisionCriteria,
    rule_set: str = PREDICTION,
) -> tuple[str, pd.DataFrame]:
    """A study's decision table as CSV text (and frame): the decide stage writes it, the
    audit recomputes it from the registration and the run records and compares.
    ``rule_set`` names the predictions judged (the registered one: ``base`` on RBLN,
    ``vllm`` on vLLM)."""
    if study.kind == "validation":
        rows = validation_rows(replicates, study, channels, predictions, criteria, rule_set)
    elif study.kind == "saturation":
        rows = saturation_rows(
            replicates, study, channels, criteria, criteria.bootstrap_resamples, study_seed
        )
    elif study.kind == "repeats":
        rows = repeat_rows(replicates, study, channels)
    else:
        rows = comparison_rows(replicates, study, channels, predictions, rule_set)
    ordered = [{column: row.get(column) for column in COLUMNS} for row in rows]
    text = table_csv(ordered) if ordered else ",".join(COLUMNS) + "\n"
    return text, pd.DataFrame(ordered, columns=list(COLUMNS))
