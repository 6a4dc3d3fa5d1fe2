"""Findings on costs and memory (paper Section V-C, Tables XIII-XV) and on the channel
difference (Section II-D, Table X): slot saturation, KV memory, compile time and the
baseline r, the last two judged on RBLN hardware only."""

from __future__ import annotations

import math

from rearrival.report.findings.base import (
    NOT_COMPARABLE,
    Evidence,
    Finding,
    Outcome,
    bind,
    first,
    fixed,
    hardware_only,
    in_printed_range,
    missing,
    rows,
    verdict,
)
from rearrival.report.paper_numbers import PaperNumber
from rearrival.report.table_model import cell_number


def judge_saturation(ev: Evidence) -> Outcome:
    pairs = {r["comparison"]: r for r in rows(ev, "XIII", 1, study="saturation")}
    wanted = ("sat24 vs sat16", "sat32 vs sat24")
    if any(w not in pairs for w in wanted):
        return missing("saturation pairs 16->24 and 24->32")
    ours = "; ".join(
        f"{w}: median {fixed(pairs[w].get('median'))}, {pairs[w].get('verdict')}" for w in wanted
    )
    return verdict(
        all(pairs[w].get("verdict") == "saturated" for w in wanted),
        ours,
        "both steps classified saturated by the registered rule",
        "a step is not classified saturated",
    )


def judge_n10_slots(ev: Evidence) -> Outcome:
    r16 = first(ev, "XIII", 0, study="saturation", n=10, configuration="sat16")
    r24 = first(ev, "XIII", 0, study="saturation", n=10, configuration="sat24")
    if (
        r16 is None
        or r24 is None
        or None in (cell_number(r16.get("a_ratio")), cell_number(r24.get("a_ratio")))
    ):
        return missing("saturation ratios at N=10 for 16 and 24 slots")
    a, b = cell_number(r16["a_ratio"]), cell_number(r24["a_ratio"])
    ours = f"{a:.4f} -> {b:.4f} (reuse {r16.get('reuse')} -> {r24.get('reuse')})"
    return verdict(
        b < a,
        ours,
        "24 slots cost less than 16 at N=10",
        "24 slots did not cost less than 16 at N=10",
    )


def judge_kv(ev: Evidence, numbers: dict[str, PaperNumber]) -> Outcome:
    """Table XV's rows for the paper's 4 devices against the paper's arithmetic."""
    wanted = {
        "KV per token": "kv_kib_per_token",
        "KV per slot": "kv_gib_per_slot",
        "KV per slot per device (4 devices)": "kv_gib_per_slot_device",
    }
    got = {q: cell_number((first(ev, "XV", 0, quantity=q) or {}).get("value")) for q in wanted}
    if any(v is None for v in got.values()):
        return missing("KV rows of Table XV for 4 devices")
    ours = ", ".join(f"{v:g}" for v in got.values())
    ok = all(math.isclose(got[q], numbers[i].number, rel_tol=1e-9) for q, i in wanted.items())
    return verdict(
        ok,
        ours,
        "equal (exact arithmetic from the model dimensions)",
        "differs from the paper's arithmetic",
    )


def judge_compile(ev: Evidence, numbers: dict[str, PaperNumber]) -> Outcome:
    table = ev.tables.get("XIV")
    measured = [r for r in rows(ev, "XIV") if str(r.get("source", "")).startswith("measured")]
    if table is None:
        return missing("Table XIV")
    if not measured:
        return Outcome(
            NOT_COMPARABLE,
            "model only (no compile measured)",
            "depends on the RBLN hardware; no compile was measured in this run",
        )
    minutes = [float(r["compile_s"]) / 60 for r in measured]
    ours = ", ".join(f"{m:.1f}" for m in minutes) + " min"
    return verdict(
        all(in_printed_range(m, numbers["compile_minutes"]) for m in minutes),
        ours,
        "every measured compile rounds into the paper's range",
        "a measured compile is outside the paper's range",
    )


def judge_channel_r(ev: Evidence, numbers: dict[str, PaperNumber]) -> Outcome:
    found = [cell_number(r.get("r_s")) for r in rows(ev, "X", study="validation", variant="wait")]
    found = [r for r in found if r is not None]
    if not found:
        return missing("baseline channel sums of the validation study")
    ours = ", ".join(f"{r:.2f}" for r in found) + " s"
    return hardware_only(ev, ours) or verdict(
        all(in_printed_range(r, numbers["chan_r_baseline"]) for r in found),
        ours,
        "every baseline r rounds into the paper's range",
        "a baseline r is outside the paper's range",
    )


def findings(numbers: dict[str, PaperNumber]) -> tuple[Finding, ...]:
    """The findings of Sections V-C and II-D."""
    return (
        Finding(
            "saturation",
            "Added slots saturate beyond 16 (both larger steps)",
            "V-C, Table XIII",
            ("sat_median_16_24", "sat_median_24_32"),
            "both adjacent pairs classified saturated by the registered bootstrap rule",
            judge_saturation,
        ),
        Finding(
            "n10_more_slots",
            "At N=10 the next slot step still lowers cost",
            "V-C, Table XIII",
            ("sat_n10_ratio_16", "sat_n10_ratio_24"),
            "ratio(24 slots) < ratio(16 slots) at N=10",
            judge_n10_slots,
        ),
        Finding(
            "kv_memory",
            "KV memory per token, per slot and per slot and device",
            "V-C, Table XV",
            ("kv_kib_per_token", "kv_gib_per_slot", "kv_gib_per_slot_device"),
            "equal to 1e-9 relative",
            bind(judge_kv, numbers),
        ),
        Finding(
            "compile_time",
            "One compilation takes minutes, within the paper's range",
            "V-C, Table XIV",
            ("compile_minutes",),
            "every measured compile inside the paper's range at its printed precision",
            bind(judge_compile, numbers),
            hardware=True,
        ),
        Finding(
            "channel_r",
            "The channel difference r = B - A of the baseline lies in the paper's range",
            "II-D, Table X",
            ("chan_r_baseline",),
            "every validation baseline r inside the paper's range at its printed precision",
            bind(judge_channel_r, numbers),
            hardware=True,
        ),
    )
