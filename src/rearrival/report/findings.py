"""The paper's findings and how each is tested against a run (the scorecard's rows).

A finding is a claim of the paper in one line, the section it comes from, the ids of the
published numbers it rests on (``data/paper_numbers.yaml``) and a test stated as a
sentence. Each test is the comparison the claim itself makes: a direction (the same sign
of a difference), an order (A above B), a classification under the preregistered rule,
the same pick, or a published value at the precision it is printed with. None has a
tolerance chosen after seeing results; thresholds come from the registration or from the
paper's printed numbers, never from code.

A judge returns "not comparable" when the run lacks what the finding needs (the study,
the configuration, the paper's candidate set) or when the finding is a property of the
RBLN device or stack itself (compile time, channel-B overhead and the channel-agreement
decisions resting on it) and the run did not use that hardware; this run's value is
still shown.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rearrival.model.sim import SIMULATORS
from rearrival.report.paper_numbers import PaperNumber, parse_count

HOLDS, FAILS, NOT_COMPARABLE = "holds", "does not hold", "not comparable"
HARDWARE = "rbln"


@dataclass(frozen=True)
class Evidence:
    """What the findings are judged on: the regenerated tables by id, the search summary,
    the simulator's reproduction of this run's mechanism runs, and the backends used."""

    tables: dict[str, Any]
    search: dict[str, Any] | None
    backends: tuple[str, ...]
    reproduction: dict[str, Any] | None = None
    band: tuple[float, float] = (0.98, 1.02)
    confirmatory_n: tuple[int, ...] = (6, 8)
    exploratory_n: tuple[int, ...] = (10,)

    @property
    def hardware(self) -> bool:
        return bool(self.backends) and all(b == HARDWARE for b in self.backends)


@dataclass(frozen=True)
class Outcome:
    verdict: str
    ours: str
    why: str


@dataclass(frozen=True)
class Finding:
    """A finding of the paper, the paper numbers it rests on, and its stated test."""

    id: str
    claim: str
    section: str
    paper: tuple[str, ...]
    test: str
    judge: Callable[[Evidence], Outcome]
    hardware: bool = False
    selected: bool = False  # compares the search's pick, which may differ from the paper's
    search: bool = False  # judged on the search's ranking, computed once with the study's profile


# --- reading the tables --------------------------------------------------------------------


def rows(ev: Evidence, table: str, part: int | None = None, **match: Any) -> list[dict]:
    """Rows of a table (one part or all) whose cells equal ``match``."""
    found = ev.tables.get(table)
    if found is None:
        return []
    parts = found.parts if part is None else found.parts[part : part + 1]
    return [
        r for p in parts for r in p.rows if all(_cell_is(r.get(k), v) for k, v in match.items())
    ]


def _cell_is(got: Any, want: Any) -> bool:
    if isinstance(want, int | float) and not isinstance(want, bool):
        number = _num(got)
        return number is not None and number == float(want)
    return got == want


def _num(value: Any) -> float | None:
    if value is None or isinstance(value, bool | str):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def first(ev: Evidence, table: str, part: int | None = None, **match: Any) -> dict | None:
    found = rows(ev, table, part, **match)
    return found[0] if found else None


def hits(row: dict | None) -> tuple[int, int] | None:
    return None if row is None else parse_count(row.get("reuse"))


def _f(value: Any, digits: int = 4) -> str:
    number = _num(value)
    return "n/a" if number is None else f"{number:.{digits}f}"


def _pct(value: Any) -> str:
    number = _num(value)
    return "n/a" if number is None else f"{100 * number:.2f} %"


def _pp(value: float) -> str:
    """A difference of two savings, in percentage points."""
    return f"{100 * value:.2f} pp"


def _count(pair: tuple[int, int] | None) -> str:
    return "n/a" if pair is None else f"{pair[0]}/{pair[1]}"


def missing(what: str) -> Outcome:
    return Outcome(NOT_COMPARABLE, "", f"this run has no {what}")


def verdict(ok: bool, ours: str, why_yes: str, why_no: str) -> Outcome:
    return Outcome(HOLDS if ok else FAILS, ours, why_yes if ok else why_no)


# --- findings: mechanisms (III) --------------------------------------------------------------


def _grid_pair(ev: Evidence, configuration: str) -> tuple[dict, dict] | None:
    control = first(ev, "VI", study="grid", n=6, configuration=configuration, variant="control")
    wait = first(ev, "VI", study="grid", n=6, configuration=configuration, variant="wait")
    return None if control is None or wait is None else (control, wait)


def judge_wait_tradeoff(ev: Evidence) -> Outcome:
    pair = _grid_pair(ev, "baseline")
    if pair is None:
        return missing("grid study at N=6 with wait and control on the baseline")
    control, wait = pair
    pc, pw, hc, hw = (
        _num(control.get("padding_ratio")),
        _num(wait.get("padding_ratio")),
        hits(control),
        hits(wait),
    )
    if None in (pc, pw, hc, hw):
        return missing("padding ratio or reuse for both variants")
    ours = f"padding {pc:.3f} -> {pw:.3f}; reuse {_count(hc)} -> {_count(hw)} (control -> wait)"
    return verdict(
        pw < pc and hw[0] < hc[0],
        ours,
        "padding falls and reuse falls with tool waiting, as in the paper",
        "padding and reuse did not both fall with tool waiting",
    )


def judge_grid6_advantage(ev: Evidence) -> Outcome:
    pair = _grid_pair(ev, "grid6")
    if pair is None:
        return missing("grid study at N=6 on {1,2,4,6,8}")
    pc, pw = _num(pair[0].get("padding_ratio")), _num(pair[1].get("padding_ratio"))
    if pc is None or pw is None:
        return missing("padding ratio on {1,2,4,6,8}")
    return verdict(
        pw >= pc,
        f"padding {pc:.3f} (control), {pw:.3f} (wait)",
        "with bucket 6 tool waiting no longer lowers padding",
        "tool waiting still lowers padding with bucket 6",
    )


def judge_grid_steps(ev: Evidence) -> Outcome:
    base, grid = _grid_pair(ev, "baseline"), _grid_pair(ev, "grid6")
    if base is None or grid is None:
        return missing("grid study at N=6 on both grids")
    steps = [int(r["decode_steps"]) for r in (*base, *grid)]
    ours = (
        f"control {steps[0]:,} vs {steps[2]:,}; wait {steps[1]:,} vs {steps[3]:,} "
        "(baseline vs {1,2,4,6,8})"
    )
    return verdict(
        steps[0] == steps[2] and steps[1] != steps[3],
        ours,
        "the grid changes the step count only when tool waiting feeds back",
        "control step counts differ or wait step counts agree across grids",
    )


def _variant_reuse(
    ev: Evidence, study: str, table: str, first_variant: str, second: str
) -> tuple[tuple[int, int], tuple[int, int]] | None:
    a = hits(first(ev, table, study=study, n=8, variant=first_variant))
    b = hits(first(ev, table, study=study, n=8, variant=second))
    return None if a is None or b is None else (a, b)


def judge_wait_reuse_n8(ev: Evidence) -> Outcome:
    pair = _variant_reuse(ev, "mechanisms", "M", "wait", "control")
    if pair is None:
        return missing("mechanisms study at N=8 with wait and control")
    wait, control = pair
    return verdict(
        wait[0] > control[0],
        f"wait {_count(wait)}, control {_count(control)}",
        "tool waiting reused more at N=8",
        "tool waiting did not reuse more at N=8",
    )


def judge_equal_waits(ev: Evidence) -> Outcome:
    pair = _variant_reuse(ev, "equal_waits", "M", "wait", "equal")
    if pair is None:
        return missing("equal_waits study at N=8")
    wait, equal = pair
    return verdict(
        wait[0] > equal[0],
        f"session-specific {_count(wait)}, equal {_count(equal)}",
        "session-specific waits reused more than equal waits",
        "session-specific waits did not reuse more than equal waits",
    )


# --- findings: measured evaluation (V-B) -------------------------------------------------------


def judge_slots_restore(ev: Evidence) -> Outcome:
    base = first(ev, "III", study="validation", n=8, configuration="baseline")
    more = first(ev, "III", study="validation", n=8, configuration="slots16")
    if base is None or more is None or hits(base) is None or hits(more) is None:
        return missing("validation study at N=8 with baseline and slots16")
    delta = _num(more.get("delta_rearrival_tokens"))
    ours = (
        f"reuse {_count(hits(base))} -> {_count(hits(more))}; re-arrival prefill "
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
        or None in (_num(slots.get("saving_a")), _num(chosen.get("saving_a")))
    ):
        return None
    return slots, chosen


def judge_savings_n8(ev: Evidence) -> Outcome:
    pair = _savings(ev, "validation", 8)
    if pair is None:
        return missing("channel-A savings of slots16 and selected at N=8 (validation)")
    s, c = (_num(r["saving_a"]) for r in pair)
    ours = f"{_pct(s)} and {_pct(c)} (extra {_pp(c - s)})"
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
        r is None or _num(r.get("prefill_ratio")) is None or _num(r.get("decode_ratio")) is None
        for r in found
    ):
        return missing("prefill and decode ratios of both changed configurations at N=8")
    pairs = [(_num(r["prefill_ratio"]), _num(r["decode_ratio"])) for r in found]
    ours = "; ".join(
        f"{name}: prefill {_pct(p)}, decode {_pct(d)}"
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
    if row is None or _num(row.get("ratio_obs_a")) is None:
        return missing("observed ratio of slots16 in the N=6 re-measurement")
    observed = _num(row["ratio_obs_a"])
    low, high = ev.band
    ours = f"ratio {observed:.4f}; baseline reuse {_count(base)}"
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
    s, c = (_num(r["saving_a"]) for r in pair)
    ours = f"slots {_pct(s)}, grid extra {_pp(c - s)}"
    return verdict(
        c - s > s,
        ours,
        "the grid change adds more than the slots did",
        "the grid change adds no more than the slots did",
    )


# --- findings: cost validation (IV) ------------------------------------------------------------


def _ix(ev: Evidence) -> list[dict]:
    return rows(ev, "IX")


def judge_confirmatory(ev: Evidence) -> Outcome:
    judged = [r for r in _ix(ev) if r.get("verdict") in ("pass", "fail")]
    if not judged:
        return missing("judged confirmatory comparison")
    passed = [r for r in judged if r["verdict"] == "pass"]
    errors = [abs(_num(r["error"])) for r in passed if _num(r.get("error")) is not None]
    spread = f", |e| {min(errors):.4f}-{max(errors):.4f}" if errors else ""
    ours = f"{len(passed)} of {len(judged)} judged pass{spread}"
    return verdict(
        len(passed) == len(judged),
        ours,
        "every judged confirmatory comparison passes",
        "a judged confirmatory comparison fails",
    )


def judge_error_sign(ev: Evidence) -> Outcome:
    errors = [_num(r.get("error")) for r in _ix(ev)]
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
        abs(_num(r["error"]))
        for r in _ix(ev)
        if int(r["n"]) in ev.exploratory_n and _num(r.get("error")) is not None
    ]
    confirmed = [
        abs(_num(r["error"]))
        for r in _ix(ev)
        if int(r["n"]) in ev.confirmatory_n and _num(r.get("error")) is not None
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
    diffs = ", ".join(_f(r.get("channel_diff")) for r in found)
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
        f"{r['comparison']}: tau {_f(r.get('tau'))}, diff "
        f"{_f(r.get('channel_diff'))}, {r.get('verdict')}/{r.get('verdict_fixed')}"
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
        math.fsum(abs(_num(r[k])) for r in judged) / len(judged)
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
        if _num(r.get("error_base")) is not None and _num(r.get("error_dummy")) is not None
    ]
    if not judged:
        return missing("base vs dummy-block simulator comparison (S9)")
    worse = sum(abs(r["error_dummy"]) > abs(r["error_base"]) for r in judged)
    better = sum(abs(r["error_dummy"]) < abs(r["error_base"]) for r in judged)
    release, rule = SIMULATORS["dummy"]
    ours = f"dummy ({release} + {rule}) worse in {worse}, better in {better} of {len(judged)}"
    return verdict(
        worse > better,
        ours,
        "adding the rule worsened more predictions than it improved",
        "adding the rule did not worsen more predictions than it improved",
    )


def within_printed(value: float, number: PaperNumber) -> bool:
    """``value`` at or below the paper's value as printed (below its next rounding step)."""
    return value < number.number + number.half_unit


def in_printed_range(value: float, number: PaperNumber) -> bool:
    """``value`` inside the paper's stated range, each end widened to its printed
    precision ("about 7-8 minutes" admits anything that rounds to 7 or 8)."""
    low, high = number.bounds
    return low - number.half_unit <= value < high + number.half_unit


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


# --- findings: search (V-A, S8) -------------------------------------------------------------


def _search(ev: Evidence, numbers: dict[str, PaperNumber]) -> tuple[dict | None, str]:
    """The search summary when it searched the paper's candidate set, else why not."""
    if ev.search is None:
        return None, "this run has no search summary"
    searched = ev.search.get("candidates", {}).get("searched")
    paper = int(numbers["search_candidates"].value)
    if searched != paper:
        return None, (
            f"this run searched {searched} candidates, the paper {paper:,}; picks "
            "from different candidate sets are not comparable"
        )
    return ev.search, ""


def judge_search_pick(ev: Evidence, numbers: dict[str, PaperNumber]) -> Outcome:
    summary, why = _search(ev, numbers)
    if summary is None:
        return Outcome(NOT_COMPARABLE, "", why)
    pick = summary["selected"]["id"]
    ours = f"{pick}, evaluation ratio {_f(summary.get('evaluation_score'))}"
    return verdict(pick == numbers["search_pick"].value, ours, "same pick", "a different pick")


def judge_search_top(ev: Evidence, numbers: dict[str, PaperNumber]) -> Outcome:
    summary, why = _search(ev, numbers)
    if summary is None:
        return Outcome(NOT_COMPARABLE, "", why)
    size, batch = int(numbers["search_top_size"].value), int(numbers["search_top_batch"].value)
    sizes, spread = summary.get("top_batch_sizes", []), summary.get("top_score_spread_pp")
    top = len(summary.get("top", []))
    ours = f"top-{top} batch sizes {sizes}, spread {_f(spread, 2)} pp"
    if top != size or spread is None:
        return Outcome(
            NOT_COMPARABLE, ours, f"this run lists the top {top}, the paper the top {size}"
        )
    ok = sizes == [batch] and spread / 100 <= numbers["search_top20_spread"].number
    return verdict(
        ok,
        ours,
        "the same batch size throughout, within the paper's spread",
        "other batch sizes in the top, or a wider spread",
    )


def judge_search_n_sets(ev: Evidence, numbers: dict[str, PaperNumber]) -> Outcome:
    summary, why = _search(ev, numbers)
    if summary is None:
        return Outcome(NOT_COMPARABLE, "", why)
    restricted = summary.get("restricted", {})
    if "6,8" not in restricted or "8,10" not in restricted:
        return missing("restricted searches on N {6,8} and {8,10}")
    full = summary["selected"]["id"]
    a, b = restricted["6,8"], restricted["8,10"]
    ours = (
        f"{{6,8}} picks {a['selected']} (full pick ranks {a.get('full_pick_rank')}, "
        f"top-20 overlap {a.get('top_overlap_with_full')}); {{8,10}} picks {b['selected']}"
    )
    return verdict(
        a["selected"] != full and b["selected"] == full,
        ours,
        "leaving out N=10 changes the pick, leaving out N=6 does not",
        "the dependence on the N set differs",
    )


def judge_mean_ratio(ev: Evidence, numbers: dict[str, PaperNumber]) -> Outcome:
    summary, why = _search(ev, numbers)
    if summary is None:
        return Outcome(NOT_COMPARABLE, "", why)
    changes = [bool(summary.get("mean_ratio_changes_selection"))] + [
        bool(p.get("mean_ratio_changes_selection")) for p in summary.get("restricted", {}).values()
    ]
    ours = f"changes the pick in {sum(changes)} of {len(changes)} N sets"
    return verdict(
        not any(changes), ours, "the pick never changes", "the pick changes for some N set"
    )


# --- findings: saturation, memory, compile, channels (V-C, II-D) ------------------------------


def judge_saturation(ev: Evidence) -> Outcome:
    pairs = {r["comparison"]: r for r in rows(ev, "XIII", 1, study="saturation")}
    wanted = ("sat24 vs sat16", "sat32 vs sat24")
    if any(w not in pairs for w in wanted):
        return missing("saturation pairs 16->24 and 24->32")
    ours = "; ".join(
        f"{w}: median {_f(pairs[w].get('median'))}, {pairs[w].get('verdict')}" for w in wanted
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
    if r16 is None or r24 is None or None in (_num(r16.get("a_ratio")), _num(r24.get("a_ratio"))):
        return missing("saturation ratios at N=10 for 16 and 24 slots")
    a, b = _num(r16["a_ratio"]), _num(r24["a_ratio"])
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
    got = {q: _num((first(ev, "XV", 0, quantity=q) or {}).get("value")) for q in wanted}
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


def _hardware_only(ev: Evidence, ours: str) -> Outcome | None:
    if ev.hardware:
        return None
    used = ", ".join(ev.backends) or "no runs"
    return Outcome(
        NOT_COMPARABLE,
        ours,
        f"depends on the RBLN hardware; this run used {used} (value shown for reference only)",
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
    found = [_num(r.get("r_s")) for r in rows(ev, "X", study="validation", variant="wait")]
    found = [r for r in found if r is not None]
    if not found:
        return missing("baseline channel sums of the validation study")
    ours = ", ".join(f"{r:.2f}" for r in found) + " s"
    return _hardware_only(ev, ours) or verdict(
        all(in_printed_range(r, numbers["chan_r_baseline"]) for r in found),
        ours,
        "every baseline r rounds into the paper's range",
        "a baseline r is outside the paper's range",
    )


def _hardware_wrap(judge: Callable[[Evidence], Outcome]) -> Callable[[Evidence], Outcome]:
    def wrapped(ev: Evidence) -> Outcome:
        out = judge(ev)
        if out.verdict == NOT_COMPARABLE:
            return out
        return _hardware_only(ev, out.ours) or out

    return wrapped


def judge_injection(ev: Evidence) -> Outcome:
    gaps = ev.reproduction.get("injection") if ev.reproduction else None
    if not gaps:
        return missing("prefill-injection gaps")
    ours = "; ".join(
        f"{size} tokens: {g['at']:.4f} s vs {g['typical']:.4f} s"
        for size, g in sorted(gaps.items())
    )
    return verdict(
        all(g["at"] > g["typical"] for g in gaps.values()),
        ours,
        "the gap spanning every injected prefill is longer than the usual gap",
        "some injected prefill did not lengthen the background gap",
    )


# --- the list -------------------------------------------------------------------------------


def findings(numbers: dict[str, PaperNumber]) -> tuple[Finding, ...]:
    """The paper's findings with their tests, in the paper's order. Claims hold no
    numbers: the paper's come from the data file, this run's from the results."""

    def bind(judge: Callable[[Evidence, dict[str, PaperNumber]], Outcome]):
        return lambda ev: judge(ev, numbers)

    return (
        Finding(
            "wait_tradeoff",
            "On the baseline grid tool waiting lowers padding but worsens KV reuse",
            "III-D, Table VI",
            (
                "grid_n6_padding_baseline_control",
                "grid_n6_padding_baseline_wait",
                "grid_n6_reuse_baseline_control",
                "grid_n6_reuse_baseline_wait",
            ),
            "padding(wait) < padding(control) and reuse hits(wait) < hits(control), "
            "grid study at N=6, replicate sums (the paper's two signs)",
            judge_wait_tradeoff,
        ),
        Finding(
            "grid6_removes_advantage",
            "With bucket 6 added, tool waiting no longer lowers padding",
            "III-D, Table VI",
            ("grid_n6_padding_grid6_control", "grid_n6_padding_grid6_wait"),
            "padding(wait) >= padding(control) on {1,2,4,6,8} at N=6",
            judge_grid6_advantage,
        ),
        Finding(
            "grid_steps_feedback",
            "Without waiting the grid change leaves the decode "
            "step count unchanged; with waiting it changes (feedback through "
            "re-arrival)",
            "III-D, Table VI",
            ("grid_n6_steps_control", "grid_n6_steps_baseline_wait", "grid_n6_steps_grid6_wait"),
            "control step counts equal on both grids and wait step counts differ",
            judge_grid_steps,
        ),
        Finding(
            "wait_reuse_n8",
            "At N=8 on the baseline, tool waiting reuses more KV than no waiting",
            "III-D",
            ("mech_n8_reuse_wait", "mech_n8_reuse_control"),
            "reuse hits(wait) > hits(control), mechanisms study at N=8",
            judge_wait_reuse_n8,
        ),
        Finding(
            "equal_waits",
            "Session-specific waits reuse more than equal waits of the "
            "same total (suggestive only in the paper)",
            "III-D",
            ("equal_n8_reuse_equal", "equal_n8_reuse_wait"),
            "reuse hits(session-specific) > hits(equal) at N=8",
            judge_equal_waits,
        ),
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
            _hardware_wrap(judge_initial_withheld),
            hardware=True,
        ),
        Finding(
            "remeasure_both_rules",
            "The N=6 re-measurement passes under both the amended and the initial tolerance",
            "IV, Table IX",
            ("rem_n6_tau", "rem_n6_channel_diffs"),
            "every re-measurement comparison passes under the registered and the fixed rule",
            _hardware_wrap(judge_remeasure_both_rules),
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
            bind(judge_reproduction),
        ),
        Finding(
            "search_pick",
            "The search picks the paper's configuration",
            "V-A",
            ("search_candidates", "search_pick", "search_evaluation_score"),
            "same pick over the same candidate set",
            bind(judge_search_pick),
            search=True,
        ),
        Finding(
            "search_top",
            "The top candidates share one batch size and lie within a fraction of a point",
            "V-A",
            ("search_top_size", "search_top_batch", "search_top20_spread"),
            "every top candidate has the paper's batch size and the score spread is at "
            "most the paper's",
            bind(judge_search_top),
            search=True,
        ),
        Finding(
            "search_n_sets",
            "The pick depends on the N set: leaving out N=10 changes it, leaving out N=6 does not",
            "V-A, S8",
            (
                "search_restricted_68_pick",
                "search_restricted_68_rank",
                "search_restricted_68_overlap",
                "search_restricted_810_same",
            ),
            "pick({6,8}) != full pick and pick({8,10}) == full pick",
            bind(judge_search_n_sets),
            search=True,
        ),
        Finding(
            "search_mean_ratio",
            "Scoring by the mean of per-N ratios does not change the pick",
            "V-A, S8",
            ("search_mean_ratio_same",),
            "no N set's pick changes under the mean-of-ratios score",
            bind(judge_mean_ratio),
            search=True,
        ),
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
            bind(judge_kv),
        ),
        Finding(
            "compile_time",
            "One compilation takes minutes, within the paper's range",
            "V-C, Table XIV",
            ("compile_minutes",),
            "every measured compile inside the paper's range at its printed precision",
            bind(judge_compile),
            hardware=True,
        ),
        Finding(
            "channel_r",
            "The channel difference r = B - A of the baseline lies in the paper's range",
            "II-D, Table X",
            ("chan_r_baseline",),
            "every validation baseline r inside the paper's range at its printed precision",
            bind(judge_channel_r),
            hardware=True,
        ),
        Finding(
            "injection",
            "An injected prefill stalls the sessions that are decoding (exclusive execution)",
            "III-C",
            (),
            "the background gap spanning each injected prefill > the median of the "
            "surrounding gaps",
            judge_injection,
        ),
    )
