"""Tables of the three mechanisms (paper Section III; docs/DESIGN.md §13): Table III (the
slot intervention: reuse and prefill work), Table VI (the grid intervention: padding,
decode steps and reuse) and Table M (the mechanism studies' workload variants on one
configuration). Every row is a condition's replicate sums, with the run ids it sums.
"""

from __future__ import annotations

from collections.abc import Callable

from rearrival.config.study import Study
from rearrival.report.conditions import condition_rows, grid_studies, slot_studies
from rearrival.report.results import Results, study_backend
from rearrival.report.table_model import Column, Part, Table


def _study_parts(
    res: Results,
    studies: list[Study],
    notes: list[str],
    columns: Callable[[Study], tuple[Column, ...]],
) -> tuple[Part, ...]:
    """One part per study: its conditions' replicate sums under the study's columns."""
    return tuple(
        Part(
            f"{study.name}: {study.description}",
            columns(study),
            tuple(condition_rows(res, study, notes)),
        )
        for study in studies
    )


def _slot_columns(study: Study) -> tuple[Column, ...]:
    """Table III: reuse and prefill work beside their ratios to the baseline."""
    return (
        Column("n", "N", "int"),
        Column("variant", "variant"),
        Column("configuration", "configuration"),
        Column("label", "buckets/batch/slots"),
        Column("reuse", "reuse hits / re-arrivals"),
        Column("rearrival_tokens", "re-arrival computed tokens", "int"),
        Column("delta_rearrival_tokens", "change vs baseline", "int"),
        Column("total_tokens", "total computed prefill tokens", "int"),
        Column("decode_steps", "decode steps", "int"),
        Column("a_prefill_s", "A prefill (s)", "f3"),
        Column("a_decode_s", "A decode (s)", "f3"),
        Column("prefill_ratio", "prefill / baseline", "f4"),
        Column("decode_ratio", "decode / baseline", "f4"),
        Column("a_ratio", "A / baseline", "f4"),
        Column("run_ids", "runs", "ids"),
    )


def _grid_columns(study: Study) -> tuple[Column, ...]:
    """Table VI: padding, decode steps and reuse per bucket set and variant."""
    return (
        Column("n", "N", "int"),
        Column("label", "buckets/batch/slots"),
        Column("variant", "variant"),
        Column("padding_ratio", "padding ratio", "f3"),
        Column("decode_steps", "decode steps", "int"),
        Column("reuse", "reuse hits / re-arrivals"),
        Column("a_s", "A (s)", "f3"),
        Column("a_ratio", "A / baseline grid", "f4"),
        Column("a_ratio_vs_first_variant", f"A / {study.variants[0]}", "f4"),
        Column("run_ids", "runs", "ids"),
    )


def _variant_columns(study: Study) -> tuple[Column, ...]:
    """Table M: one configuration, its workload variants against the first."""
    return (
        Column("n", "N", "int"),
        Column("variant", "variant"),
        Column("padding_ratio", "padding ratio", "f3"),
        Column("decode_steps", "decode steps", "int"),
        Column("reuse", "reuse hits / re-arrivals"),
        Column("rearrival_tokens", "re-arrival computed tokens", "int"),
        Column("a_s", "A (s)", "f3"),
        Column("a_ratio_vs_first_variant", f"A / {study.variants[0]}", "f4"),
        Column("run_ids", "runs", "ids"),
    )


def table_iii(res: Results) -> Table:
    notes: list[str] = []
    studies = slot_studies(res)
    parts = _study_parts(res, studies, notes, _slot_columns)
    if not studies:
        notes.append(
            "No study in the config compares configurations with different KV slot counts."
        )
    return Table(
        "III",
        "Slot intervention: reuse and prefill work",
        "Replicate sums per condition of every study that changes the number of KV "
        "slots: re-arrival reuse, computed prefill tokens, decode steps and the "
        "prefill and decode components of channel A, with their ratios to the "
        "baseline configuration on the same plans.",
        parts,
        tuple(notes),
        study_backend(res, studies),
    )


def table_vi(res: Results) -> Table:
    notes: list[str] = []
    studies = grid_studies(res)
    parts = _study_parts(res, studies, notes, _grid_columns)
    if not studies:
        notes.append("No study in the config changes only the bucket set.")
    return Table(
        "VI",
        "Grid intervention: padding, decode steps and reuse",
        "Per bucket set, with and without tool wait: padding ratio "
        "sum(b-n)/sum(b) over the pooled decode steps of all replicates, decode "
        "steps, and re-arrival reuse (replicate sums).",
        parts,
        tuple(notes),
        study_backend(res, studies),
    )


def table_m(res: Results) -> Table:
    """Workload-variant studies on one configuration (tool wait vs control, equal waits)."""
    notes: list[str] = []
    studies = [s for s in res.studies("comparison") if len(s.configurations) == 1]
    parts = _study_parts(res, studies, notes, _variant_columns)
    return Table(
        "M",
        "Mechanism studies: workload variants on one configuration",
        "Replicate sums per N and workload variant (tool wait, control without "
        "wait, equal waits): padding ratio, decode steps, reuse and channel A.",
        parts,
        tuple(notes),
        study_backend(res, studies),
    )
