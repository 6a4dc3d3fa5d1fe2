"""Tables of the predictor against the real vLLM server (docs/DESIGN.md §15 "Agreement"),
one row per run: what `rearrival compare` wrote, rendered and never recomputed.

Each builder takes the comparison directories (``rearrival compare --out``; each holds
``requests.parquet`` and ``summary.json`` of ``rearrival.judge.vllm_agreement``) and
reads only those files. Table VA1 gives each run's agreement on cached tokens (all
requests, and those the predicted pool admitted before evicting anything, which must
agree exactly), the re-arrivals that lost part of their prefix, the prefill recomputed
because tool waits let blocks be evicted, and device time from the profile against
vLLM's logged iteration times; VA2 reuse by round index; VA3 every disagreeing request
with its reason. Every row carries its run id, and every table names the backend, the
device and the profile whose seconds it shows (a CPU profile's are CPU seconds).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from rearrival.judge.vllm_agreement import REQUESTS_FILE, SUMMARY_FILE
from rearrival.report.table_model import Column, Part, Table

Loaded = list[tuple[Path, dict[str, Any], pd.DataFrame]]


def load_agreements(directories: Sequence[Path], notes: list[str]) -> Loaded:
    """Each directory's summary and per-request table; an absent one is noted as not
    produced (the report is useful while the study still runs)."""
    loaded = []
    for directory in directories:
        summary, requests = Path(directory) / SUMMARY_FILE, Path(directory) / REQUESTS_FILE
        if not (summary.is_file() and requests.is_file()):
            notes.append(
                f"Comparison not produced: {directory} lacks {SUMMARY_FILE} or "
                f"{REQUESTS_FILE} (run `rearrival compare --run RUN_DIR --profile PROFILE "
                f"--out {directory}`)."
            )
            continue
        loaded.append((Path(directory), json.loads(summary.read_text()), pd.read_parquet(requests)))
    return loaded


def _backend(loaded: Loaded) -> str:
    found = sorted({f"{s['run']['backend']} ({s['run']['device']})" for _, s, _ in loaded})
    return ", ".join(found) or "unknown"


def _profile_notes(loaded: Loaded) -> list[str]:
    """One note per profile: which one priced the predicted device time, and whose
    seconds they are."""
    seen: dict[str, dict[str, str]] = {}
    for _, summary, _ in loaded:
        seen.setdefault(summary["profile"]["sha256"], summary["profile"])
    return [
        f"Predicted device time priced by vLLM profile {p['name']} ({p['version']}, device "
        f"{p['device']}, model {p['model_id']}, sha256 {p['sha256'][:12]}): {p['seconds']}."
        for p in seen.values()
    ]


def table_va1(directories: Sequence[Path]) -> Table:
    """Table VA1: each run's agreement, losses, recomputed prefill and device time."""
    notes: list[str] = []
    loaded = load_agreements(directories, notes)
    rows = []
    for _, s, _ in loaded:
        rows.append(
            {
                "run": s["run"]["run_id"],
                "replicate": s["run"]["replicate"],
                "configuration": s["run"]["configuration"]["id"],
                "requests": s["requests"],
                "agreeing": s["agreeing"],
                "share": s["agreeing_share"],
                "clean": f"{s['no_eviction_agreeing']}/{s['no_eviction_requests']}",
                "lost": f"{s['re_arrivals_lost_observed']}/{s['re_arrivals_lost_predicted']}"
                f" of {s['re_arrivals']}",
                "recomputed_obs": s["recomputed_prefill_tokens_observed"],
                "recomputed_pred": s["recomputed_prefill_tokens_predicted"],
                "bound": s["prefill_tokens_never_evicting"],
                "device_pred": s["device_s_predicted"],
                "device_obs": s["device_s_observed"],
                "device_err": s["device_s_relative_error"],
            }
        )
        if not s["exact_where_no_eviction"]:
            notes.append(
                f"PREDICTOR BUG in run {s['run']['run_id']}: requests the predicted pool had "
                f"not evicted before admitting disagree with vLLM: "
                f"{', '.join(s['no_eviction_disagreements'])}."
            )
    notes += _profile_notes(loaded)
    columns = (
        Column("run", "run"),
        Column("replicate", "replicate", "int"),
        Column("configuration", "configuration"),
        Column("requests", "requests", "int"),
        Column("agreeing", "agreeing", "int"),
        Column("share", "agreeing share", "pct2"),
        Column("clean", "agreeing / admitted before any eviction"),
        Column("lost", "re-arrivals lost obs/pred"),
        Column("recomputed_obs", "recomputed prefill obs", "int"),
        Column("recomputed_pred", "recomputed prefill pred", "int"),
        Column("bound", "prefill, never-evicting pool", "int"),
        Column("device_pred", "device s pred", "f4"),
        Column("device_obs", "device s logged", "f4"),
        Column("device_err", "device rel. error", "pct2"),
    )
    return Table(
        id="VA1",
        title="The predictor against the real vLLM server, per run",
        caption="Cached tokens vLLM reported per request (prompt_tokens_details) against "
        "the vLLM rules re-run with the run's observed arrivals; recomputed prefill is "
        "prompt minus cached tokens beyond what a pool that never evicts computes; device "
        "time predicted from the profile against the sum of vLLM's logged iteration times.",
        parts=(Part("runs", columns, tuple(rows)),),
        notes=tuple(notes),
        backend=_backend(loaded),
    )


def table_va2(directories: Sequence[Path]) -> Table:
    """Table VA2: reuse (cached over prompt tokens) by round index, per run."""
    notes: list[str] = []
    loaded = load_agreements(directories, notes)
    rows = [
        {
            "run": s["run"]["run_id"],
            "replicate": s["run"]["replicate"],
            "round": entry["round"],
            "requests": entry["requests"],
            "prompt": entry["prompt_tokens"],
            "observed": entry["reuse_observed"],
            "predicted": entry["reuse_predicted"],
            "never_evicting": entry["reuse_never_evicting"],
        }
        for _, s, _ in loaded
        for entry in s["reuse_by_round"]
    ]
    columns = (
        Column("run", "run"),
        Column("replicate", "replicate", "int"),
        Column("round", "round", "int"),
        Column("requests", "requests", "int"),
        Column("prompt", "prompt tokens", "int"),
        Column("observed", "reuse observed", "pct2"),
        Column("predicted", "reuse predicted", "pct2"),
        Column("never_evicting", "reuse, never-evicting pool", "pct2"),
    )
    return Table(
        id="VA2",
        title="Prefix reuse by round on the real vLLM server",
        caption="Cached over prompt tokens at each round index: observed (vLLM), predicted "
        "(the vLLM rules with the run's arrivals) and the structural bound of a pool that "
        "never evicts (every re-arrival hits the full blocks of the round before it).",
        parts=(Part("rounds", columns, tuple(rows)),),
        notes=tuple(notes),
        backend=_backend(loaded),
    )


def table_va3(directories: Sequence[Path]) -> Table:
    """Table VA3: every request whose cached tokens disagree, with its reason."""
    notes: list[str] = []
    loaded = load_agreements(directories, notes)
    rows = []
    for _, s, requests in loaded:
        for r in requests[~requests["agree"]].to_dict("records"):
            rows.append(
                {
                    "run": s["run"]["run_id"],
                    "replicate": s["run"]["replicate"],
                    "request": f"s{r['session']}r{r['round']}",
                    "observed": r["cached_tokens_observed"],
                    "predicted": r["cached_tokens_predicted"],
                    "cacheable": r["cacheable_tokens"],
                    "evictions": r["evictions_before"],
                    "reason": r["reason"],
                }
            )
    if loaded and not rows:
        notes.append("Every request of every run agrees.")
    columns = (
        Column("run", "run"),
        Column("replicate", "replicate", "int"),
        Column("request", "request"),
        Column("observed", "cached obs", "int"),
        Column("predicted", "cached pred", "int"),
        Column("cacheable", "cacheable", "int"),
        Column("evictions", "evicted blocks before admission (pred)", "int"),
        Column("reason", "why, as far as the records tell"),
    )
    return Table(
        id="VA3",
        title="Requests whose cached tokens disagree, and why",
        caption="Each disagreeing request of each run: vLLM's hit, the predicted one, what "
        "the round before left cacheable, the cached blocks the predicted pool had evicted "
        "before admitting it, and the reason the records give.",
        parts=(Part("disagreements", columns, tuple(rows)),),
        notes=tuple(notes),
        backend=_backend(loaded),
    )


VLLM_AGREEMENT_TABLE_BUILDERS: dict[str, Callable[[Sequence[Path]], Table]] = {
    "VA1": table_va1,
    "VA2": table_va2,
    "VA3": table_va3,
}
