"""Tables of the three mechanisms (paper Section III; docs/DESIGN.md §13): Table III (the
slot intervention: reuse and prefill work), Table VI (the grid intervention: padding,
decode steps and reuse) and Table M (the mechanism studies' workload variants on one
configuration). Every row is a condition's replicate sums, with the run ids it sums.
"""

from __future__ import annotations

from rearrival.report.conditions import condition_rows, grid_studies, slot_studies
from rearrival.report.results import Results, study_backend
from rearrival.report.table_model import Column, Part, Table


def table_iii(res: Results) -> Table:
    notes: list[str] = []
    studies = slot_studies(res)
    parts = []
    for study in studies:
        rows = condition_rows(res, study, notes)
        parts.append(
            Part(
                f"{study.name}: {study.description}",
                (
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
                ),
                tuple(rows),
            )
        )
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
        tuple(parts),
        tuple(notes),
        study_backend(res, studies),
    )


def table_vi(res: Results) -> Table:
    notes: list[str] = []
    studies = grid_studies(res)
    parts = []
    for study in studies:
        rows = condition_rows(res, study, notes)
        parts.append(
            Part(
                f"{study.name}: {study.description}",
                (
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
                ),
                tuple(rows),
            )
        )
    if not studies:
        notes.append("No study in the config changes only the bucket set.")
    return Table(
        "VI",
        "Grid intervention: padding, decode steps and reuse",
        "Per bucket set, with and without tool wait: padding ratio "
        "sum(b-n)/sum(b) over the pooled decode steps of all replicates, decode "
        "steps, and re-arrival reuse (replicate sums).",
        tuple(parts),
        tuple(notes),
        study_backend(res, studies),
    )


def table_m(res: Results) -> Table:
    """Workload-variant studies on one configuration (tool wait vs control, equal waits)."""
    notes: list[str] = []
    studies = [s for s in res.studies("comparison") if len(s.configurations) == 1]
    parts = []
    for study in studies:
        rows = condition_rows(res, study, notes)
        parts.append(
            Part(
                f"{study.name}: {study.description}",
                (
                    Column("n", "N", "int"),
                    Column("variant", "variant"),
                    Column("padding_ratio", "padding ratio", "f3"),
                    Column("decode_steps", "decode steps", "int"),
                    Column("reuse", "reuse hits / re-arrivals"),
                    Column("rearrival_tokens", "re-arrival computed tokens", "int"),
                    Column("a_s", "A (s)", "f3"),
                    Column("a_ratio_vs_first_variant", f"A / {study.variants[0]}", "f4"),
                    Column("run_ids", "runs", "ids"),
                ),
                tuple(rows),
            )
        )
    return Table(
        "M",
        "Mechanism studies: workload variants on one configuration",
        "Replicate sums per N and workload variant (tool wait, control without "
        "wait, equal waits): padding ratio, decode steps, reuse and channel A.",
        tuple(parts),
        tuple(notes),
        study_backend(res, studies),
    )
