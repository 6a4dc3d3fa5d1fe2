"""The paper's findings and how each is tested against a run (the scorecard's rows).

One module per part of the paper holds its findings and their judges: ``mechanisms``
(Section III), ``evaluation`` (V-B), ``validation`` (IV, S9), ``search`` (V-A, S8) and
``costs`` (V-C, II-D); ``base`` holds what they share (the evidence, the outcome and the
reading of the tables). ``ORDER`` is the registry: the one sequence, in the paper's order,
in which the scorecard lists them.
"""

from __future__ import annotations

from rearrival.report.findings import costs, evaluation, mechanisms, search, validation
from rearrival.report.findings.base import (
    FAILS,
    HOLDS,
    NOT_COMPARABLE,
    Evidence,
    Finding,
    Outcome,
)
from rearrival.report.paper_numbers import PaperNumber

__all__ = [
    "FAILS",
    "HOLDS",
    "NOT_COMPARABLE",
    "ORDER",
    "SECTIONS",
    "Evidence",
    "Finding",
    "Outcome",
    "findings",
]

SECTIONS = (mechanisms, evaluation, validation, search, costs)

ORDER = (
    "wait_tradeoff",
    "grid6_removes_advantage",
    "grid_steps_feedback",
    "wait_reuse_n8",
    "equal_waits",
    "slots_restore_reuse",
    "savings_n8",
    "prefill_path",
    "remeasure_small_gain",
    "remeasure_grid_exceeds",
    "confirmatory_pass",
    "error_sign",
    "exploratory_errors",
    "initial_withheld",
    "remeasure_both_rules",
    "fixed_arrival",
    "dummy_block",
    "reproduction",
    "search_pick",
    "search_top",
    "search_n_sets",
    "search_mean_ratio",
    "saturation",
    "n10_more_slots",
    "kv_memory",
    "compile_time",
    "channel_r",
    "injection",
)


def findings(numbers: dict[str, PaperNumber]) -> tuple[Finding, ...]:
    """The paper's findings with their tests, in ``ORDER``. Claims hold no numbers: the
    paper's come from the data file, this run's from the results."""
    by_id = {f.id: f for section in SECTIONS for f in section.findings(numbers)}
    return tuple(by_id[i] for i in ORDER)
