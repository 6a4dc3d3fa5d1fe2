"""Supplementary tables (paper supplementary S1 and S9; docs/DESIGN.md §13): Table S1 (no-
treatment repeats and the sensitivity of the verdicts to the tolerance tau) and Table S9
(the dummy-block rule in the simulator: each simulator's ratio errors and predicted
reuse beside the observation).
"""

from __future__ import annotations

import pandas as pd

from rearrival.report.analysis import closer, predicted_reuse, simulator_error_rows
from rearrival.report.conditions import condition_rows, condition_sums, ids, paired, ratio
from rearrival.report.results import Results, decision_records, study_backend, study_note
from rearrival.report.table_model import Column, Part, Table
from rearrival.vocabulary import RULE_SETS

# Tolerances of the S1 sensitivity analysis: the default 0.02 and its neighbours.
TAU_GRID = tuple(k / 100 for k in range(1, 6))
SIMULATOR_ORDER = ("base", "dummy", "stack")

# What each dummy-block rule of the simulator does (paper Supplementary S9; the rules are
# defined with rearrival.model.simulator.rbln.config.SimConfig), for the S9 note naming the one
# in use.
DUMMY_BLOCK_RULES = {
    "reserved": (
        "while 0 < running < batch_size one slot counts as held by the padding block at "
        "every admission, the rule the paper's S9 simulator added"
    ),
    "pre-evict": (
        "before a decode step with 0 < running < batch_size and no free slot, the oldest "
        "evictable slot is evicted and left free as the padding block; under deferred "
        "release the slot it frees is the one the next admission would have evicted, so "
        "this rule cannot change a deferred-release prediction"
    ),
    "off": "no padding block",
}


def dummy_rule_note() -> str:
    """Which dummy-block rule S9's 'dummy' simulator uses, and what the emulated engine
    does instead (the rule of the measured stack, kept as the 'stack' column)."""
    release, rule = RULE_SETS["dummy"]
    stack_release, stack_rule = RULE_SETS["stack"]
    return (
        f"Dummy-block rule of the 'dummy' simulator: {release} release + {rule!r} "
        f"({DUMMY_BLOCK_RULES[rule]}). The emulated engine stays {stack_release} release + "
        f"{stack_rule!r}, which is what the real stack does (the 'stack' column simulates it)."
    )


def table_s1(res: Results) -> Table:
    notes: list[str] = []
    studies = res.studies("repeats")
    per_rep, summed = [], []
    for study in studies:
        channels = res.channels(study.name)
        if channels is None:
            notes += study_note(res, study, "Repeats")
            continue
        for conf in study.configurations:
            for variant in study.variants:
                labels = [f"{conf}-{variant}-{k}" for k in range(study.repeats)]
                for n in study.n:
                    first = condition_sums(
                        channels, n, conf, variant, res.cfg.replicates, labels[0]
                    )
                    for label in labels[1:]:
                        again = condition_sums(
                            channels, n, conf, variant, res.cfg.replicates, label
                        )
                        if first is None or again is None:
                            notes.append(f"{study.name} N={n} {label}: no complete runs.")
                            continue
                        for k in sorted(set(first.per_replicate) & set(again.per_replicate)):
                            a, b = first.per_replicate[k], again.per_replicate[k]
                            ra, rb = b["a_s"] / a["a_s"], b["b_s"] / a["b_s"]
                            per_rep.append(
                                {
                                    "study": study.name,
                                    "n": n,
                                    "comparison": f"{label} vs {labels[0]}",
                                    "replicate": k,
                                    "ratio_a": ra,
                                    "ratio_b": rb,
                                    "channel_diff": abs(ra - rb),
                                    "a_deviation": abs(ra - 1),
                                    "run_ids": f"{a['run_id']} {b['run_id']}",
                                }
                            )
                        if paired(first, again):
                            ra, rb = ratio(again.a_s, first.a_s), ratio(again.b_s, first.b_s)
                            summed.append(
                                {
                                    "study": study.name,
                                    "n": n,
                                    "comparison": f"{label} vs {labels[0]}",
                                    "replicate": "sum",
                                    "ratio_a": ra,
                                    "ratio_b": rb,
                                    "channel_diff": abs(ra - rb),
                                    "a_deviation": abs(ra - 1),
                                    "run_ids": ids(first.run_ids, again.run_ids),
                                }
                            )
    validation = [
        r
        for s in res.studies("validation")
        for r in decision_records(res, s, notes)
        if r.get("channel_diff") is not None
    ]
    sensitivity = []
    repeats = per_rep + summed
    for tau in TAU_GRID:
        within = [r for r in repeats if r["channel_diff"] <= tau]
        stable = [r for r in repeats if r["a_deviation"] <= tau]
        proceeding = [r for r in validation if r["channel_diff"] <= tau]
        sensitivity.append(
            {
                "tau": tau,
                "repeat_diffs_within": f"{len(within)}/{len(repeats)}",
                "share_within": len(within) / len(repeats) if repeats else None,
                "repeat_a_within": f"{len(stable)}/{len(repeats)}",
                "validation_proceeding": f"{len(proceeding)}/{len(validation)}",
                "run_ids": " ".join(
                    dict.fromkeys(
                        i for r in repeats + validation for i in (r.get("run_ids") or "").split()
                    )
                ),
            }
        )
    comparison_columns = (
        Column("study", "study"),
        Column("n", "N", "int"),
        Column("comparison", "comparison"),
        Column("replicate", "replicate"),
        Column("ratio_a", "ratio A", "f4"),
        Column("ratio_b", "ratio B", "f4"),
        Column("channel_diff", "channel diff", "f4"),
        Column("a_deviation", "|ratio A - 1|", "f4"),
        Column("run_ids", "runs", "ids"),
    )
    return Table(
        "S1",
        "No-treatment repeats and tolerance sensitivity",
        "The same plan and configuration run again: per-replicate and replicate-"
        "summed ratios on both channels (1 would be no variation), then for each "
        "tolerance tau the share of repeat channel differences within tau, the "
        "share of repeat channel-A ratios within tau of 1, and how many validation "
        "comparisons would pass the channel-agreement gate.",
        (
            Part("repeats", comparison_columns, tuple(per_rep + summed)),
            Part(
                "tolerance sensitivity",
                (
                    Column("tau", "tau", "f2"),
                    Column("repeat_diffs_within", "repeat channel diffs <= tau"),
                    Column("share_within", "share", "f2"),
                    Column("repeat_a_within", "repeat |ratio A - 1| <= tau"),
                    Column("validation_proceeding", "validation comparisons gated through"),
                    Column("run_ids", "runs", "ids"),
                ),
                tuple(sensitivity),
            ),
        ),
        tuple(notes),
        study_backend(res, studies),
    )


def table_s9(res: Results) -> Table:
    notes: list[str] = [dummy_rule_note()]
    studies = res.studies("validation")
    errors, reuse = [], []
    for study in studies:
        records = decision_records(res, study, notes)
        predictions = res.predictions(study.name)
        if not records or predictions is None:
            continue
        simulators = [s for s in SIMULATOR_ORDER if s in set(predictions["simulator"])]
        errors += simulator_error_rows(
            decisions=pd.DataFrame(records), predictions=predictions, simulators=simulators
        )
        for row in condition_rows(res, study, notes):
            entry = {
                "study": study.name,
                "n": row["n"],
                "configuration": row["configuration"],
                "observed": row["reuse"],
                "run_ids": row["run_ids"],
            }
            for simulator in simulators:
                got = predicted_reuse(
                    predictions, row["n"], row["configuration"], row["variant"], simulator
                )
                entry[simulator] = None if got is None else f"{got[0]}/{got[1]}"
            reuse.append(entry)
    judged = [
        r for r in errors if r.get("error_dummy") is not None and r.get("error_base") is not None
    ]
    if judged:
        worse = sum(closer(r["error_base"], r["error_dummy"], "dummy") == "full" for r in judged)
        better = sum(closer(r["error_base"], r["error_dummy"], "dummy") == "dummy" for r in judged)
        notes.append(
            f"The dummy-block simulator had a larger absolute error than the base "
            f"simulator in {worse}, a smaller one in {better} and the same in "
            f"{len(judged) - worse - better} of {len(judged)} comparisons."
        )
    release, rule = RULE_SETS["dummy"]
    stack_release, stack_rule = RULE_SETS["stack"]
    return Table(
        "S9",
        "Dummy-block rule in the simulator",
        "Replicate-summed predicted channel-A ratios and errors against observation "
        f"for the base simulator (deferred release, no dummy block), the dummy-block "
        f"simulator ({release} release + {rule}) and the measured stack's rules "
        f"({stack_release} release + {stack_rule}); then each simulator's predicted "
        "reuse beside the observed reuse.",
        (
            Part(
                "ratio errors",
                (
                    Column("study", "study"),
                    Column("n", "N", "int"),
                    Column("comparison", "comparison"),
                    Column("ratio_obs_a", "observed A", "f4"),
                    Column("ratio_base", "base", "f4"),
                    Column("error_base", "error base", "f4"),
                    Column("ratio_dummy", "dummy", "f4"),
                    Column("error_dummy", "error dummy", "f4"),
                    Column("ratio_stack", "stack", "f4"),
                    Column("error_stack", "error stack", "f4"),
                    Column("run_ids", "runs", "ids"),
                ),
                tuple(errors),
            ),
            Part(
                "reuse hits / re-arrivals",
                (
                    Column("study", "study"),
                    Column("n", "N", "int"),
                    Column("configuration", "configuration"),
                    Column("observed", "observed"),
                    *(Column(s, s) for s in SIMULATOR_ORDER),
                    Column("run_ids", "runs", "ids"),
                ),
                tuple(reuse),
            ),
        ),
        tuple(notes),
        study_backend(res, studies),
    )
