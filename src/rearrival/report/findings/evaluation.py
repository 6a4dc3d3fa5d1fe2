"""Findings of the measured evaluation (paper Section V-B, Table III, Table XII): more KV
slots restore re-arrival reuse at N=8, the channel-A savings of the changed configurations
and where they come from, and the N=6 re-measurement."""

from __future__ import annotations

from rearrival.report.findings.base import (
    Evidence,
    Finding,
    Outcome,
    count_text,
    first,
    hits,
    missing,
    percent,
    points,
    verdict,
)
from rearrival.report.paper_numbers import PaperNumber
from rearrival.report.table_model import cell_number


def judge_slots_restore(ev: Evidence) -> Outcome:
    base = first(ev, "III", study="validation", n=8, configuration="baseline")
    more = first(ev, "III", study="validation", n=8, configuration="slots16")
    if base is None or more is None or hits(base) is None or hits(more) is None:
        return missing("validation study at N=8 with baseline and slots16")
    delta = cell_number(more.get("delta_rearrival_tokens"))
    ours = (
        f"reuse {count_text(hits(base))} -> {count_text(hits(more))}; re-arrival prefill "
        f"{'n/a' if delta is None else f'{delta:+,.0f}'} tokens"
    )
    b, m = hits(base), hits(more)
    ok = b[0] < b[1] and m[0] == m[1] and delta is not None and delta < 0
    return verdict(
        ok,
        ours,
        "the baseline loses reuse, 16 slots reuse every re-arrival and re-arrival prefill falls",
        "not all of: baseline misses, complete reuse with 16 slots, less prefill",
    )


def _savings(ev: Evidence, study: str, n: int) -> tuple[dict, dict] | None:
    slots = first(ev, "XII", study=study, n=n, comparison="slots16 vs baseline")
    chosen = first(ev, "XII", study=study, n=n, comparison="selected vs baseline")
    if (
        slots is None
        or chosen is None
        or None in (cell_number(slots.get("saving_a")), cell_number(chosen.get("saving_a")))
    ):
        return None
    return slots, chosen


def judge_savings_n8(ev: Evidence) -> Outcome:
    pair = _savings(ev, "validation", 8)
    if pair is None:
        return missing("channel-A savings of slots16 and selected at N=8 (validation)")
    s, c = (cell_number(r["saving_a"]) for r in pair)
    ours = f"{percent(s)} and {percent(c)} (extra {points(c - s)})"
    return verdict(
        s > 0 and c > s,
        ours,
        "both save and the grid change adds to the saving",
        "a configuration did not save, or the grid change added nothing",
    )


def judge_prefill_path(ev: Evidence) -> Outcome:
    found = [
        first(ev, "III", study="validation", n=8, configuration=c) for c in ("slots16", "selected")
    ]
    if any(
        r is None
        or cell_number(r.get("prefill_ratio")) is None
        or cell_number(r.get("decode_ratio")) is None
        for r in found
    ):
        return missing("prefill and decode ratios of both changed configurations at N=8")
    pairs = [(cell_number(r["prefill_ratio"]), cell_number(r["decode_ratio"])) for r in found]
    ours = "; ".join(
        f"{name}: prefill {percent(p)}, decode {percent(d)}"
        for name, (p, d) in zip(("slots16", "selected"), pairs, strict=True)
    )
    ok = all(p < 1 and abs(1 - p) > abs(1 - d) for p, d in pairs)
    return verdict(
        ok,
        ours,
        "the prefill component falls more than decode moves",
        "the decode change is as large as the prefill reduction (or prefill rose)",
    )


def judge_remeasure_small(ev: Evidence) -> Outcome:
    row = first(ev, "IX", study="validation_remeasure", n=6, comparison="slots16 vs baseline")
    base = hits(first(ev, "III", study="validation_remeasure", n=6, configuration="baseline"))
    if row is None or cell_number(row.get("ratio_obs_a")) is None:
        return missing("observed ratio of slots16 in the N=6 re-measurement")
    observed = cell_number(row["ratio_obs_a"])
    low, high = ev.band
    ours = f"ratio {observed:.4f}; baseline reuse {count_text(base)}"
    return verdict(
        low <= observed <= high,
        ours,
        f"inside the registered band [{low}, {high}]",
        f"outside the registered band [{low}, {high}]",
    )


def judge_remeasure_grid(ev: Evidence) -> Outcome:
    pair = _savings(ev, "validation_remeasure", 6)
    if pair is None:
        return missing("channel-A savings of slots16 and selected in the N=6 re-measurement")
    s, c = (cell_number(r["saving_a"]) for r in pair)
    ours = f"slots {percent(s)}, grid extra {points(c - s)}"
    return verdict(
        c - s > s,
        ours,
        "the grid change adds more than the slots did",
        "the grid change adds no more than the slots did",
    )


def findings(numbers: dict[str, PaperNumber]) -> tuple[Finding, ...]:
    """The findings of Section V-B."""
    return (
        Finding(
            "slots_restore_reuse",
            "More KV slots restore re-arrival reuse at N=8 and cut re-arrival prefill",
            "III-B, V-B, Table III",
            ("slot_n8_reuse_baseline", "slot_n8_reuse_slots16", "slot_n8_rearrival_tokens_change"),
            "baseline misses some re-arrivals, 16 slots reuse all, re-arrival prefill "
            "tokens fall (validation study, N=8)",
            judge_slots_restore,
        ),
        Finding(
            "savings_n8",
            "At N=8 more slots save on channel A and changing the grid as well saves more",
            "V-B, Table XII",
            ("val_n8_saving_slots16", "val_n8_saving_selected", "val_n8_grid_extra"),
            "saving(slots16) > 0 and saving(selected) > saving(slots16)",
            judge_savings_n8,
            selected=True,
        ),
        Finding(
            "prefill_path",
            "The N=8 savings come from less prefill (restored reuse), not from decode",
            "V-B",
            (
                "slot_n8_prefill_ratio",
                "slot_n8_decode_ratio_slots16",
                "slot_n8_decode_ratio_selected",
            ),
            "for both changed configurations: prefill ratio < 1 and |1 - prefill ratio| "
            "> |1 - decode ratio|",
            judge_prefill_path,
            selected=True,
        ),
        Finding(
            "remeasure_small_gain",
            "Where the baseline already reuses almost all "
            "(N=6 re-measurement), more slots gain little",
            "IV, V-B, Table IX",
            ("rem_n6_reuse_baseline", "rem_n6_ratio_slots16", "rem_n6_saving_slots16"),
            "observed channel-A ratio of slots16 inside the registered equivalence band",
            judge_remeasure_small,
        ),
        Finding(
            "remeasure_grid_exceeds",
            "In the N=6 re-measurement the grid change adds more than the slots",
            "V-B, Table XII",
            ("rem_n6_saving_slots16", "rem_n6_saving_selected", "rem_n6_grid_extra"),
            "saving(selected) - saving(slots16) > saving(slots16)",
            judge_remeasure_grid,
            selected=True,
        ),
    )
