"""The report section of the studies on a real vLLM server (docs/DESIGN.md §15; README "A
study on a real vLLM server"), built once as a ``rearrival.report.sections.Section`` and
rendered as Markdown (``reports/vllm.md``) and into the HTML report.

It is built from the files its rule declares only: the decision table, the
preregistration record, the vLLM tables stage's requests, runs and rounds tables against
the registered predictions, and each run's comparison with the predictor re-run on its
observed arrivals (Tables VA1-VA3 of ``rearrival.report.tables.vllm_agreement``). It
computes nothing but shares of the columns it shows, and joins a run's comparison to its
row by run id. What served the runs (backend, vLLM version, device, model) and the
profile that priced the predictions are read from the comparisons, each from its run's
manifest, never written as literals.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rearrival.report.sections import Block, Heading, Prose, Section, section_markdown
from rearrival.report.table_model import Column, Part, Table
from rearrival.report.tables.vllm_agreement import VLLM_AGREEMENT_TABLE_BUILDERS, load_agreements
from rearrival.report.vllm_figures import (
    cached_tokens_figure,
    device_time_figure,
    lost_prefixes_figure,
)

SECTION_ID = "vllm"
SECTION_TITLE = "Studies on a real vLLM server"


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


@dataclass(frozen=True)
class Compared:
    """A study's comparisons as the section shows them: per request (with the run's
    configuration name) and per run (agreeing requests, losses, recomputed prefill)."""

    requests: pd.DataFrame
    runs: pd.DataFrame
    summaries: tuple[dict[str, Any], ...]


def compared(section: VllmSection) -> Compared:
    """The comparisons of one study, each joined to its runs row by run id."""
    runs_named = (
        section.runs
        if "run_id" in section.runs
        else pd.DataFrame(columns=["run_id", "configuration"])
    )
    names = dict(zip(runs_named["run_id"], runs_named["configuration"], strict=True))
    requests, runs, summaries = [], [], []
    for _, summary, frame in load_agreements(section.agreements, []):
        run_id = summary["run"]["run_id"]
        name = names.get(run_id, summary["run"]["configuration"]["id"])
        requests.append(frame.assign(configuration=name, run_id=run_id))
        runs.append(
            {
                "run_id": run_id,
                "agreeing": summary["agreeing"],
                "lost": summary["re_arrivals_lost_predicted"],
                "recomputed": summary["recomputed_prefill_tokens_predicted"],
            }
        )
        summaries.append(summary)
    return Compared(
        pd.concat(requests, ignore_index=True) if requests else pd.DataFrame(),
        pd.DataFrame(runs),
        tuple(summaries),
    )


def _share(part: pd.Series, whole: pd.Series) -> pd.Series:
    return (part / whole.where(whole > 0)).astype("float64")


def _table(frame: pd.DataFrame, columns: Sequence[Column], caption: str, backend: str) -> Table:
    """An unnumbered table of the section: the columns' keys into the frame's rows."""
    rows = tuple(frame.to_dict("records")) if not frame.empty else ()
    return Table("", "", caption, (Part("rows", tuple(columns), rows),), backend=backend)


DECISION_COLUMNS = (
    Column("comparison", "comparison"),
    Column("replicates", "reps"),
    Column("ratio_pred", "predicted", "f4"),
    Column("ratio_obs_a", "channel A", "f4"),
    Column("ratio_obs_b", "channel B", "f4"),
    Column("error", "error", "f4"),
    Column("channel_diff", "channel diff", "f4"),
    Column("tau", "tau", "f4"),
    Column("verdict", "verdict"),
)
CACHED_COLUMNS = (
    Column("configuration", "configuration"),
    Column("replicate", "rep"),
    Column("requests", "requests"),
    Column("agree_registered", "agree (registered)"),
    Column("agreeing", "agree (observed arrivals)"),
    Column("cached_observed", "cached (vLLM)"),
    Column("cached_metrics_delta", "/metrics delta", "f0"),
    Column("cached_registered", "cached (registered)"),
)
DEVICE_COLUMNS = (
    Column("configuration", "configuration"),
    Column("replicate", "rep"),
    Column("device_s_registered", "predicted s (registered)", "f3"),
    Column("channel_a_s", "channel A s (profile on logged steps)", "f3"),
    Column("logged_elapsed_s", "logged iteration s", "f3"),
    Column("channel_b_s", "channel B s", "f3"),
)
RECOMPUTED_COLUMNS = (
    Column("configuration", "configuration"),
    Column("replicate", "rep"),
    Column("re_arrivals", "re-arrivals"),
    Column("re_arrivals_lost_observed", "lost part of their prefix (vLLM)"),
    Column("re_arrivals_lost_registered", "(registered)"),
    Column("lost", "(observed arrivals)"),
    Column("recomputed_prefill_observed", "recomputed tokens (vLLM)"),
    Column("recomputed_prefill_registered", "(registered)"),
    Column("recomputed", "(observed arrivals)"),
)
ROUND_COLUMNS = (
    Column("configuration", "configuration"),
    Column("round", "round"),
    Column("requests", "requests"),
    Column("hit_observed", "hit share (vLLM)", "f3"),
    Column("hit_registered", "hit share (registered)", "f3"),
    Column("hit_cacheable", "never-evicting pool", "f3"),
)


def _rounds(rounds: pd.DataFrame) -> pd.DataFrame:
    if rounds.empty:
        return rounds
    out = rounds.copy()
    for source in ("observed", "registered"):
        out[f"hit_{source}"] = _share(out[f"cached_{source}"], out["prompt_tokens"])
    out["hit_cacheable"] = _share(out["cacheable"], out["prompt_tokens"])
    return out


def _registration(section: VllmSection, summaries: Sequence[dict[str, Any]]) -> str:
    record = section.prereg
    registered = next(
        (sha for path, sha in record.get("files", {}).items() if path.endswith("profile.yaml")),
        "none",
    )
    profiles = {
        f"{p['name']} ({p['version']}, device {p['device']}, model {p['model_id']}, sha256 "
        f"{p['sha256'][:12]}; {p['seconds']})"
        for p in (s["profile"] for s in summaries)
    }
    priced = "; ".join(sorted(profiles)) or "no comparison produced yet"
    return (
        f"Predictions of the vllm rule set and the decision criteria were committed in "
        f"{str(record.get('commit', ''))[:12]} at {record.get('committed_at', '?')}, before "
        f"the first server started (`rearrival audit` checks it); the profile they were "
        f"priced with is committed beside them (profile.yaml, sha256 {registered[:12]}); "
        f"the comparisons name it: {priced}. Every run started its own vLLM server; cached "
        "tokens are what each response reported in usage.prompt_tokens_details, checked "
        "against the server's vllm:prompt_tokens_cached_total delta (a mismatch fails the run)."
    )


def withheld_reasons(decisions: pd.DataFrame) -> list[str]:
    """Why each withheld decision is withheld, from its own row (its note, or the two
    channels' difference against its tau)."""
    if decisions.empty or "verdict" not in decisions:
        return []
    out = []
    for row in decisions[decisions["verdict"] == "withheld"].to_dict("records"):
        note = row.get("note")
        if isinstance(note, str) and note:
            why = note
        else:
            why = (
                f"channels A and B disagree on the ratio by {row['channel_diff']:.4f}, more "
                f"than tau = {row['tau']:.4f}: channel B (wall time) measured something the "
                "profile's step costs on the logged steps (channel A) do not"
            )
        out.append(f"{row['comparison']} is withheld: {why}.")
    return out


def _decision_blocks(section: VllmSection, backend: str) -> list[Block]:
    verdicts = section.decisions.get("verdict", pd.Series(dtype=str)).value_counts()
    counts = ", ".join(f"{count} {verdict}" for verdict, count in sorted(verdicts.items()))
    return [
        Heading("Decisions (validation rules, as on RBLN)"),
        _table(
            section.decisions,
            DECISION_COLUMNS,
            "Each registered comparison's predicted and observed ratio to the baseline "
            f"(device time), judged as the RBLN validation is: {counts or 'no decision yet'}.",
            backend,
        ),
        *[Prose(text) for text in withheld_reasons(section.decisions)],
    ]


def _cached_blocks(
    section: VllmSection, seen: Compared, runs: pd.DataFrame, backend: str
) -> list[Block]:
    agree = int(runs["agree_registered"].sum()) if not runs.empty else 0
    total = int(runs["requests"].sum()) if not runs.empty else 0
    rerun = int(seen.runs["agreeing"].sum()) if not seen.runs.empty else 0
    return [
        Heading("Cached tokens per request: vLLM vs the prediction"),
        Prose(
            f"Requests whose cached tokens equal the registered prediction (planned "
            f"arrivals): {agree} of {total}; with each run's observed arrival times: {rerun} of "
            f"{sum(s['requests'] for s in seen.summaries)} (Tables VA1 and VA3 below)."
        ),
        cached_tokens_figure(section.study, section.requests, seen.requests, backend),
        _table(runs, CACHED_COLUMNS, "Per run: cached tokens summed over its requests.", backend),
        Heading("Reuse by round (cached / prompt tokens, summed over runs)"),
        _table(_rounds(section.rounds), ROUND_COLUMNS, "", backend),
    ]


def study_blocks(section: VllmSection, backend: str) -> list[Block]:
    """One study's part of the section (module docstring)."""
    seen = compared(section)
    runs = (
        section.runs.merge(seen.runs, on="run_id", how="left")
        if not (section.runs.empty or seen.runs.empty)
        else section.runs.assign(agreeing=None, lost=None, recomputed=None)
    )
    blocks: list[Block] = [
        Heading(f"A study on a real vLLM server: {section.study}", 2),
        Prose(_registration(section, seen.summaries)),
        *_decision_blocks(section, backend),
        *_cached_blocks(section, seen, runs, backend),
        Heading("Re-arrivals that lost their prefix, and the prefill recomputed"),
        Prose(
            "Against the same request on a pool that never evicts (what the round before "
            "it left cacheable): registered, with the run's observed arrivals, and vLLM."
        ),
        lost_prefixes_figure(section.study, section.runs, seen.runs, backend),
        _table(runs, RECOMPUTED_COLUMNS, "", backend),
        Heading("Device time: predicted vs channel A vs logged"),
        device_time_figure(section.study, section.runs, backend),
        _table(runs, DEVICE_COLUMNS, "", backend),
    ]
    blocks += [build(section.agreements) for build in VLLM_AGREEMENT_TABLE_BUILDERS.values()]
    return blocks


def served_engines(sections: Sequence[VllmSection]) -> list[str]:
    """What served the runs, as the comparisons' records say (each from its run's
    manifest): vLLM version, device, model, weights and scheduling, one text each."""
    notes: list[str] = []
    found = {
        f"vLLM {run['vllm_version']} on {run['device']} serving "
        f"{run['model']} with {run['weights']} weights, {run['scheduling']} scheduling"
        for section in sections
        for _, summary, _ in load_agreements(section.agreements, notes)
        for run in [summary["run"]]
    }
    return sorted(found)


def backend_label(sections: Sequence[VllmSection]) -> str:
    """The backend and device every number of the section comes from, as each run's
    comparison names them (the comparisons refuse a run of any backend but vllm)."""
    found = {
        f"{summary['run']['backend']} ({summary['run']['device']})"
        for section in sections
        for _, summary, _ in load_agreements(section.agreements, [])
    }
    return ", ".join(sorted(found)) or "vllm (no run compared yet)"


def _lead(engines: Sequence[str]) -> str:
    devices = {e.split(" on ", 1)[1].split(" ", 1)[0] for e in engines}
    served = "; ".join(engines) if engines else "no run has been compared yet"
    seconds = (
        f"times are {' and '.join(sorted(d.upper() for d in devices))} seconds of the machine "
        "that ran them"
        if devices
        else "times are the seconds of the machine that ran them"
    )
    return f"{served}: {seconds}; the predictor models synchronous scheduling (docs/DESIGN.md §15)."


def vllm_section(sections: Sequence[VllmSection]) -> Section:
    """Every vLLM study's part under one lead saying what served the runs."""
    engines = served_engines(sections)
    backend = backend_label(sections)
    blocks = tuple(b for s in sections for b in study_blocks(s, backend))
    return Section(SECTION_ID, SECTION_TITLE, backend, blocks, (_lead(engines),))


def study_markdown(section: VllmSection) -> str:
    """One study's part as Markdown (its figures linked under ``figures/``)."""
    backend = backend_label([section])
    return section_markdown(
        Section(SECTION_ID, section.study, backend, tuple(study_blocks(section, backend)))
    )


def report_markdown(sections: Sequence[VllmSection], figure_dir: str = "figures") -> str:
    """The whole section as ``reports/vllm.md``: its figures linked into ``figure_dir``."""
    return section_markdown(vllm_section(sections), figure_dir, level=1)
