"""The report section of a study on a real vLLM server (docs/DESIGN.md §15; README "A study
on a real vLLM server"), as Markdown: rendered from the files its rule declares (the
decision table, the preregistration record, the vLLM tables stage's requests, runs and
rounds tables against the registered predictions, and each run's comparison with the
predictor re-run on its observed arrivals, Tables VA1-VA3 of
``rearrival.report.tables.vllm_agreement``); it computes nothing but shares of the
columns it shows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rearrival.report.table_model import markdown_pipe_table, table_markdown, wrap_markdown
from rearrival.report.tables.vllm_agreement import VLLM_AGREEMENT_TABLE_BUILDERS, load_agreements

Cell = Callable[[Any], str]


@dataclass(frozen=True)
class VllmSection:
    """One vLLM study's inputs to its section: what the stages wrote."""

    study: str
    prereg: dict[str, Any]
    decisions: pd.DataFrame
    runs: pd.DataFrame
    rounds: pd.DataFrame
    requests: pd.DataFrame
    agreements: Sequence[Path]  # one comparison directory per run (vllm_agreement)


def _text(value: Any) -> str:
    return "" if value is None or (isinstance(value, float) and pd.isna(value)) else str(value)


def _fixed(digits: int) -> Cell:
    return lambda v: "" if v is None or pd.isna(v) else f"{float(v):.{digits}f}"


def _table(frame: pd.DataFrame, columns: Sequence[tuple[str, str, Cell]]) -> list[str]:
    """A pipe table of ``(column, header, format)``; "(no rows)" when empty."""
    if frame.empty:
        return ["(no rows)"]
    cells = [[fmt(row[c]) for c, _, fmt in columns] for _, row in frame.iterrows()]
    return markdown_pipe_table([h for _, h, _ in columns], cells)


def _share(part: pd.Series, whole: pd.Series) -> pd.Series:
    return (part / whole.where(whole > 0)).astype("float64")


def _registration_lines(section: VllmSection) -> list[str]:
    record = section.prereg
    profile = next(
        (sha for path, sha in record.get("files", {}).items() if path.endswith("profile.yaml")),
        "none",
    )
    return wrap_markdown(
        f"Predictions of the vllm rule set and the decision criteria were committed in "
        f"{str(record.get('commit', ''))[:12]} at {record.get('committed_at', '?')}, before "
        f"the first server started (`rearrival audit` checks it); the profile they were "
        f"priced with is committed beside them (profile.yaml, sha256 {profile[:12]}). Every "
        "run started its own vLLM server; cached tokens are what each response reported in "
        "usage.prompt_tokens_details, checked against the server's "
        "vllm:prompt_tokens_cached_total delta (a mismatch fails the run)."
    )


DECISION_COLUMNS = (
    ("comparison", "comparison", _text),
    ("replicates", "reps", _text),
    ("ratio_pred", "predicted", _fixed(4)),
    ("ratio_obs_a", "channel A", _fixed(4)),
    ("ratio_obs_b", "channel B", _fixed(4)),
    ("error", "error", _fixed(4)),
    ("verdict", "verdict", _text),
)
CACHED_COLUMNS = (
    ("configuration", "configuration", _text),
    ("replicate", "rep", _text),
    ("requests", "requests", _text),
    ("agree_registered", "agree (registered)", _text),
    ("cached_observed", "cached (vLLM)", _text),
    ("cached_metrics_delta", "/metrics delta", _fixed(0)),
    ("cached_registered", "cached (registered)", _text),
)
DEVICE_COLUMNS = (
    ("configuration", "configuration", _text),
    ("replicate", "rep", _text),
    ("device_s_registered", "predicted s (registered)", _fixed(3)),
    ("channel_a_s", "channel A s (profile on logged steps)", _fixed(3)),
    ("logged_elapsed_s", "logged iteration s", _fixed(3)),
    ("channel_b_s", "channel B s", _fixed(3)),
)
RECOMPUTED_COLUMNS = (
    ("configuration", "configuration", _text),
    ("replicate", "rep", _text),
    ("re_arrivals", "re-arrivals", _text),
    ("re_arrivals_lost_observed", "lost part of their prefix (vLLM)", _text),
    ("re_arrivals_lost_registered", "(registered)", _text),
    ("recomputed_prefill_observed", "recomputed tokens (vLLM)", _text),
    ("recomputed_prefill_registered", "recomputed tokens (registered)", _text),
)
ROUND_COLUMNS = (
    ("configuration", "configuration", _text),
    ("round", "round", _text),
    ("requests", "requests", _text),
    ("hit_observed", "hit share (vLLM)", _fixed(3)),
    ("hit_registered", "hit share (registered)", _fixed(3)),
    ("hit_cacheable", "never-evicting pool", _fixed(3)),
)


def _rounds(rounds: pd.DataFrame) -> pd.DataFrame:
    out = rounds.copy()
    for source in ("observed", "registered"):
        out[f"hit_{source}"] = _share(out[f"cached_{source}"], out["prompt_tokens"])
    out["hit_cacheable"] = _share(out["cacheable"], out["prompt_tokens"])
    return out


def section_markdown(section: VllmSection) -> str:
    """The section of one vLLM study (module docstring)."""
    runs = section.runs
    agree = int(runs["agree_registered"].sum()) if not runs.empty else 0
    total = int(runs["requests"].sum()) if not runs.empty else 0
    lines = [
        f"## A study on a real vLLM server: {section.study}",
        "",
        *_registration_lines(section),
        "",
        "### Decisions (validation rules, as on RBLN)",
        "",
        *_table(section.decisions, DECISION_COLUMNS),
        "",
        "### Cached tokens per run: vLLM vs the registered prediction",
        "",
        *wrap_markdown(
            f"Requests whose cached tokens equal the registered prediction (planned "
            f"arrivals): {agree} of {total}. Table VA1 below re-runs the predictor with each "
            "run's observed arrival times."
        ),
        "",
        *_table(runs, CACHED_COLUMNS),
        "",
        "### Reuse by round (cached / prompt tokens, summed over runs)",
        "",
        *_table(_rounds(section.rounds), ROUND_COLUMNS),
        "",
        "### Device time: predicted vs logged",
        "",
        *_table(runs, DEVICE_COLUMNS),
        "",
        "### Prefill recomputed because tool waits let blocks be evicted",
        "",
        *wrap_markdown(
            "Against the same request on a pool that never evicts (what the round before "
            "it left cacheable)."
        ),
        "",
        *_table(runs, RECOMPUTED_COLUMNS),
        "",
    ]
    for build in VLLM_AGREEMENT_TABLE_BUILDERS.values():
        lines += ["#" + table_markdown(build(section.agreements)), ""]
    return "\n".join(lines)


def served_engines(sections: Sequence[VllmSection]) -> list[str]:
    """What served the runs, as the comparisons' records say (each from its run's
    manifest): vLLM version, device, model, weights and scheduling, one text each."""
    notes: list[str] = []
    found = {
        f"vLLM {run['vllm_version']} on {run['device']} serving {run['model']} with "
        f"{run['weights']} weights, {run['scheduling']} scheduling"
        for section in sections
        for _, summary, _ in load_agreements(section.agreements, notes)
        for run in [summary["run"]]
    }
    return sorted(found)


def report_markdown(sections: Sequence[VllmSection]) -> str:
    """Every vLLM study's section, one after another, under a header saying what served
    the runs (from their manifests, never a literal)."""
    engines = served_engines(sections)
    devices = {e.split(" on ", 1)[1].split(" ", 1)[0] for e in engines}
    served = "; ".join(engines) if engines else "no run has been compared yet"
    seconds = (
        f"times are {' and '.join(sorted(d.upper() for d in devices))} seconds of the machine "
        "that ran them"
        if devices
        else "times are the seconds of the machine that ran them"
    )
    head = [
        "# rearrival: studies on a real vLLM server",
        "",
        *wrap_markdown(
            f"{served}: {seconds}; the predictor models synchronous scheduling "
            "(docs/DESIGN.md §15)."
        ),
        "",
    ]
    return "\n".join(head) + "\n" + "\n".join(section_markdown(s) for s in sections)
