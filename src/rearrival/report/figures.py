"""The report's figures (docs/DESIGN.md §13), drawn from results with matplotlib (Agg).

Each figure is returned as inline SVG text so the HTML report is one self-contained
file. Output is deterministic: a fixed ``svg.hashsalt`` per figure (clip-path ids are
hashes) and no creation date, so the same results give the same bytes. A figure whose
inputs are absent comes back with ``svg=None`` and a note saying what is missing.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from rearrival.config.study import Study
from rearrival.measure.records import read_run
from rearrival.measure.records.contract import ROUND_COLUMN
from rearrival.report.calibration import step_time_figure
from rearrival.report.conditions import condition_sums, grid_studies, slot_studies
from rearrival.report.figure_model import (
    BUCKET_COLOURS,
    Figure,
    absent,
    pyplot,
    round_spans,
    to_svg,
)
from rearrival.report.results import Results, decision_records, study_backend

VERDICT_COLOURS = {
    "pass": "#2a9d4b",
    "fail": "#c0392b",
    "withheld": "#e69f00",
    "exploratory": "#4c72b0",
    "descriptive": "#9a9a9a",
}


# --- h(n) by bucket -----------------------------------------------------------------------


def histogram_figure(res: Results, study: Study) -> Figure:
    """Decode steps per running count n, coloured by the bucket b(n), per condition."""
    fid, title = f"hist-{study.name}", f"h(n) by bucket, study {study.name}"
    channels = res.channels(study.name)
    if channels is None:
        return absent(fid, title, f"results/channels/{study.name}.parquet not produced.")
    n = study.n[0]
    panels = []
    for conf in study.configurations:
        for variant in study.variants:
            sums = condition_sums(channels, n, conf, variant, res.cfg.replicates)
            if sums is not None:
                panels.append((f"{conf}-{variant}", sums))
    if not panels:
        return absent(fid, title, f"study {study.name}: no complete runs at N={n}.")
    plt = pyplot()
    fig, axes = plt.subplots(
        1, len(panels), figsize=(3.2 * len(panels), 2.8), sharey=True, squeeze=False
    )
    buckets = sorted({b for _, s in panels for (_, b) in s.histogram})
    # one colour per bucket size across every figure, so b=8 looks the same everywhere
    every = sorted({b for c in res.cfg.configurations.values() for b in c.buckets} | set(buckets))
    colour = {b: BUCKET_COLOURS[every.index(b) % len(BUCKET_COLOURS)] for b in buckets}
    for ax, (label, sums) in zip(axes[0], panels, strict=True):
        for b in buckets:
            points = [(k, c) for (k, bb), c in sums.histogram.items() if bb == b]
            if points:
                ax.bar([p[0] for p in points], [p[1] for p in points], color=colour[b], width=0.8)
        ax.set_title(
            f"{label}\n{sums.decode_steps} steps, padding {sums.padding_ratio or 0:.3f}", fontsize=8
        )
        ax.set_xlabel("running requests n")
    axes[0][0].set_ylabel("decode steps (sum over replicates)")
    # Lazy like pyplot (figure_model.pyplot): matplotlib at the top would add 0.18 s
    # (measured) to every importer of this module.
    from matplotlib.patches import Patch

    fig.legend(
        handles=[Patch(color=colour[b], label=f"b={b}") for b in buckets],
        fontsize=7,
        title="bucket",
        title_fontsize=7,
        loc="center left",
        bbox_to_anchor=(1.0, 0.5),
    )
    backend = study_backend(res, [study])
    return Figure(
        fid,
        title,
        f"Decode-step histogram h(n) at N={n} for every condition of study "
        f"{study.name}, pooled over the replicates; colour is the compiled bucket "
        f"b(n) each step ran in. Backend: {backend}.",
        to_svg(fig, fid),
        backend,
    )


# --- session timeline -------------------------------------------------------------------


def _timeline_run(res: Results) -> tuple[Study, dict[str, Any]] | None:
    """The run the timeline shows: the first study's baseline, first N, replicate 0."""
    for study in [*slot_studies(res), *grid_studies(res), *res.studies()]:
        channels = res.channels(study.name)
        if channels is None:
            continue
        chosen = channels[
            (channels["status"] == "complete")
            & (channels["configuration"] == study.baseline)
            & (channels["n"] == study.n[0])
        ].sort_values(["replicate", "condition"])
        wait = chosen[chosen["variant"] == "wait"]
        chosen = wait if not wait.empty else chosen
        if not chosen.empty:
            return study, chosen.iloc[0].to_dict()
    return None


EVICT_LINE = re.compile(
    r"t=(?P<t>[0-9.]+).*\bevict slot=(?P<slot>\d+) session=(?P<session>\d+)"
    r".*reason=(?P<reason>\S+)"
)


def log_evictions(server_log: str | None) -> list[tuple[float, int, str]]:
    """(server time, session, reason) of every eviction line a server log holds; the
    emulated server logs them, a real server's log may not (then none are shown)."""
    if not server_log:
        return []
    return [
        (float(m["t"]), int(m["session"]), m["reason"])
        for m in map(EVICT_LINE.search, server_log.splitlines())
        if m
    ]


def _draw_sessions(
    ax: Any, rows: list[dict[str, Any]], evictions: list[tuple[float, int, str]], title: str
) -> None:
    colours = {
        "queue": "#bdbdbd",
        "prefill": "#c44e52",
        "decode": "#4c72b0",
        "tool wait": "#f2c14e",
    }
    used = set()
    for r in rows:
        y = r["session"]
        for kind, start, end in r["spans"]:
            if end > start:
                ax.broken_barh(
                    [(start, end - start)],
                    (y - 0.35, 0.7),
                    color=colours[kind],
                    label=None if kind in used else kind,
                )
                used.add(kind)
        if r.get("rearrival_s") is not None:
            hit = r["hit"]
            ax.plot(
                r["rearrival_s"],
                y + 0.45,
                marker="v" if hit else "x",
                color="#2a9d4b" if hit else "#c0392b",
                markersize=6,
                label=None
                if ("hit" if hit else "miss") in used
                else ("reuse hit" if hit else "reuse miss"),
            )
            used.add("hit" if hit else "miss")
    for t, session, _cause in evictions:
        ax.plot(
            t,
            session - 0.45,
            marker="^",
            color="black",
            markersize=5,
            label=None if "evict" in used else "eviction",
        )
        used.add("evict")
    ax.set_title(title, fontsize=9)
    ax.set_ylabel("session")
    ax.legend(fontsize=7, loc="upper right", ncol=3)


def observed_session_rows(requests: Any) -> list[dict[str, Any]]:
    """Queue, prefill, decode and tool wait per session from a run's requests table
    (client clock; prefill placed before the first token using the server's prefill_s)."""
    rows = []
    for session, group in requests.groupby("session"):
        spans = []
        by_round = {int(r[ROUND_COLUMN]): r for r in group.to_dict("records")}
        for index in sorted(by_round):
            spans += round_spans(by_round[index])
        row: dict[str, Any] = {"session": int(session), "spans": spans, "rearrival_s": None}
        if 0 in by_round and 1 in by_round:
            spans.append(("tool wait", by_round[0]["complete_s"], by_round[1]["send_s"]))
            cached = by_round[1]["cached_tokens"]
            row.update(
                rearrival_s=by_round[1]["send_s"],
                hit=bool(cached == cached and cached is not None and cached > 0),
            )
        rows.append(row)
    return rows


def predicted_session_rows(requests: Any) -> list[dict[str, Any]]:
    """The same per session from the predict stage's request records of one plan and
    condition (simulator clock; its round index is in the run records' column too)."""
    rows: dict[int, dict[str, Any]] = {}
    records = requests.sort_values(["session", ROUND_COLUMN]).to_dict("records")
    completed = {(r["session"], r[ROUND_COLUMN]): r["complete_s"] for r in records}
    for r in records:
        session = int(r["session"])
        row = rows.setdefault(session, {"session": session, "spans": [], "rearrival_s": None})
        row["spans"] += [
            ("queue", r["arrival_s"], r["admit_s"]),
            ("prefill", r["admit_s"], r["first_token_s"]),
            ("decode", r["first_token_s"], r["complete_s"]),
        ]
        if r[ROUND_COLUMN] == 1:
            row["spans"].append(("tool wait", completed[(r["session"], 0)], r["arrival_s"]))
            row.update(rearrival_s=r["arrival_s"], hit=bool(r["cached_tokens"] > 0))
    return [rows[k] for k in sorted(rows)]


def _predicted_run(res: Results, study: Study, run: dict[str, Any]) -> tuple[Any, Any] | None:
    """The base simulator's request records and evictions for the plan and condition of
    ``run``, as the predict stage wrote them (None when not produced)."""
    requests, evictions = res.predicted_requests(study.name), res.predicted_evictions(study.name)
    if requests is None or evictions is None:
        return None

    def chosen(frame: Any) -> Any:
        return frame[
            (frame["n"] == int(run["n"]))
            & (frame["replicate"] == int(run["replicate"]))
            & (frame["configuration"] == study.baseline)
            & (frame["variant"] == run["variant"])
        ]

    picked = chosen(requests)
    return (picked, chosen(evictions)) if not picked.empty else None


def timeline_figure(res: Results) -> Figure:
    fid, title = "timeline", "Session timeline of one run"
    picked = _timeline_run(res)
    if picked is None:
        return absent(fid, title, "No complete run to draw (no channel table produced).")
    study, run = picked
    record = read_run(res.run_path(run["run_dir"]))
    plt = pyplot()
    predicted = _predicted_run(res, study, run)
    fig, axes = plt.subplots(
        2 if predicted is not None else 1, 1, figsize=(10, 7), sharex=True, squeeze=False
    )
    backend = record.manifest["backend"]
    _draw_sessions(
        axes[0][0],
        observed_session_rows(record.requests),
        log_evictions(record.server_log),
        f"observed run {run['run_id']} ({backend} backend; evictions from the "
        "server log, server clock)",
    )
    caption_tail = ""
    if predicted is not None:
        requests, evictions = predicted
        _draw_sessions(
            axes[1][0],
            predicted_session_rows(requests),
            list(zip(evictions["time_s"], evictions["session"], evictions["cause"], strict=True)),
            "base simulator on the same plan and configuration (predicted)",
        )
        caption_tail = (
            " The lower panel is the base simulator's prediction for the same "
            "plan (the predict stage's, with the study's profile), with every eviction "
            "it makes."
        )
    axes[-1][0].set_xlabel("seconds from the run's first send")
    return Figure(
        fid,
        title,
        f"Per session of run {run['run_id']} (study {study.name}, N={run['n']}, "
        f"{run['condition']}): queue, prefill, decode and tool wait; re-arrivals "
        f"marked as reuse hit or miss; black marks are KV evictions of that "
        f"session's slot. Backend: {backend}.{caption_tail}",
        to_svg(fig, fid),
        backend,
    )


# --- predicted vs observed --------------------------------------------------------------


def configuration_change(row: dict[str, Any]) -> bool:
    """A comparison of two configurations under one workload variant (the kind the
    validation judges), not a tool-wait vs control contrast on one configuration."""
    if row.get("kind") == "validation":
        return True
    variant = f"-{row.get('variant')}"
    reference, changed = str(row.get("reference")), str(row.get("changed"))
    return reference.endswith(variant) and changed.endswith(variant) and reference != changed


def prediction_figure(res: Results) -> Figure:
    fid, title = "pred-vs-obs", "Predicted vs observed cost ratios"
    points = []
    for study in res.studies("validation", "comparison"):
        notes: list[str] = []
        for row in decision_records(res, study, notes):
            if not configuration_change(row):
                continue
            if row.get("ratio_obs_a") is not None and row.get("ratio_pred") is not None:
                points.append(
                    (
                        row["ratio_pred"],
                        row["ratio_obs_a"],
                        row.get("verdict"),
                        f"{study.name} N={row['n']} {row['comparison']}",
                    )
                )
    if not points:
        return absent(fid, title, "No decision table with observed ratios produced yet.")
    decision = res.cfg.decision
    tolerance = decision.error_tolerance
    low, high = decision.equivalence_band
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 5.5))
    values = [v for p in points for v in p[:2]] + [low, high]
    lo, hi = min(values) - 0.02, max(values) + 0.02
    ax.fill_between(
        [lo, hi],
        [lo - tolerance, hi - tolerance],
        [lo + tolerance, hi + tolerance],
        color="#dddddd",
        label=f"|error| <= {tolerance:g}",
    )
    ax.plot([lo, hi], [lo, hi], color="black", linewidth=0.8)
    ax.add_patch(
        plt.Rectangle(
            (low, low),
            high - low,
            high - low,
            fill=False,
            edgecolor="#555555",
            linestyle="--",
            label=f"equivalence band [{low:g}, {high:g}]",
        )
    )
    seen = set()
    for pred, obs, verdict, _label in points:
        key = verdict or "none"
        ax.scatter(
            pred,
            obs,
            color=VERDICT_COLOURS.get(key, "#333333"),
            s=28,
            zorder=3,
            label=None if key in seen else key,
        )
        seen.add(key)
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("predicted ratio (base simulator)")
    ax.set_ylabel("observed ratio (channel A)")
    ax.legend(fontsize=7)
    backend = study_backend(res, res.studies("validation", "comparison"))
    return Figure(
        fid,
        title,
        f"Replicate-summed cost ratios, prediction against channel-A observation, "
        f"for every configuration comparison with runs ({len(points)} points; colour "
        f"= verdict, grey = descriptive intervention studies). Grey band: "
        f"prediction error within {tolerance:g}; dashed box: both inside "
        f"[{low:g}, {high:g}]. "
        f"Backend: {backend}.",
        to_svg(fig, fid),
        backend,
    )


# --- search landscape -------------------------------------------------------------------


def search_figure(res: Results) -> Figure:
    """Score distribution per batch size (density view) beside the top candidates, so the
    figure stays readable and small at 32,000 candidates as at 2,077."""
    fid, title = "search", "Search landscape"
    scores = res.search_scores()
    if scores is None:
        return absent(fid, title, "results/search/scores.parquet not produced.")
    plt = pyplot()
    fig, (dens, best) = plt.subplots(1, 2, figsize=(10, 3.6), gridspec_kw={"width_ratios": [3, 2]})
    batches = sorted(scores["batch_size"].unique())
    colours = {batch: BUCKET_COLOURS[i % len(BUCKET_COLOURS)] for i, batch in enumerate(batches)}

    low, high = float(scores["score"].min()), float(scores["score"].max())
    edges = np.linspace(low, max(high, low + 1e-9), 61)
    for batch in batches:
        group = scores[scores["batch_size"] == batch]["score"]
        dens.hist(
            group,
            bins=edges,
            histtype="step",
            color=colours[batch],
            label=f"batch {batch} ({len(group):,})",
        )
    dens.axvline(1.0, color="#555555", linewidth=0.8, linestyle="--")
    dens.set_xlabel("score (sum D / sum D baseline)")
    dens.set_ylabel("candidates")
    dens.legend(fontsize=7)
    top = scores.sort_values("rank").head(max(20, res.cfg.search.top))
    for batch, group in top.groupby("batch_size"):
        best.scatter(
            group["rank"], group["score"], s=14, color=colours[batch], label=f"batch {batch}"
        )
    first = top.iloc[0]
    best.scatter(
        [first["rank"]],
        [first["score"]],
        marker="*",
        s=120,
        color="black",
        label=f"selected {first['id']}",
        zorder=3,
    )
    best.set_xlabel(f"rank (top {len(top)})")
    best.set_ylabel("score")
    best.legend(fontsize=7, markerscale=1.5)
    return Figure(
        fid,
        title,
        f"Left: distribution of the predicted score of all {len(scores):,} "
        "searched candidates on the search inputs (base simulator), one outline "
        "per batch size; dashed line: the baseline. Right: the top "
        f"{len(top)} candidates by rank. Simulator predictions, not measurements.",
        to_svg(fig, fid),
        "simulator",
    )


# --- saturation -------------------------------------------------------------------------


def saturation_figure(res: Results) -> Figure:
    fid, title = "saturation", "Saturation with bootstrap CIs"
    rows = []
    for study in res.studies("saturation"):
        notes: list[str] = []
        rows += [r for r in decision_records(res, study, notes) if r.get("ci_low") is not None]
    if not rows:
        return absent(fid, title, "No saturation decision with a bootstrap CI produced yet.")
    width = res.cfg.decision.saturation_width
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    for i, row in enumerate(rows):
        median, low, high = row["ratio_obs_a"], row["ci_low"], row["ci_high"]
        ax.errorbar(
            [i],
            [median],
            yerr=[[median - low], [high - median]],
            fmt="o",
            color=VERDICT_COLOURS["pass" if row["verdict"] == "saturated" else "fail"],
            capsize=4,
        )
        match = re.search(r"ratios (\[.*\])", row.get("note") or "")
        if match:
            ratios = json.loads(match.group(1))
            ax.scatter([i + 0.15] * len(ratios), ratios, s=8, color="#888888", zorder=2)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhspan(
        1 - width / 2,
        1 + width / 2,
        color="#eeeeee",
        zorder=0,
        label=f"a CI of width {width:g} centred on 1",
    )
    ax.set_xticks(range(len(rows)), [r["comparison"] for r in rows], fontsize=8)
    ax.set_ylabel("channel-A ratio (median, 95% CI)")
    ax.legend(fontsize=7)
    backend = study_backend(res, res.studies("saturation"))
    return Figure(
        fid,
        title,
        "Median channel-A ratio of each adjacent pair of configurations over the "
        "(N x replicate) comparisons with its percentile-bootstrap 95% CI (green: "
        "classified saturated, red: not); grey dots are the individual ratios. "
        f"Backend: {backend}.",
        to_svg(fig, fid),
        backend,
    )


# --- injection --------------------------------------------------------------------------


def injection_figure(res: Results) -> Figure:
    fid, title = "injection", "Prefill injection: background inter-token gaps"
    gaps = res.gaps()
    if gaps is None or gaps.empty:
        return absent(fid, title, "results/injection/gaps.parquet not produced.")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    at = gaps[gaps["relative"] == 0]
    other = gaps[gaps["relative"] != 0]
    ax.scatter(
        at["injected_prompt_tokens"],
        at["gap_s"],
        s=14,
        color="#c44e52",
        label="gap spanning the injected prefill",
    )
    typical = other.groupby("injected_prompt_tokens")["gap_s"].median()
    ax.plot(
        typical.index,
        typical.values,
        marker="o",
        color="#4c72b0",
        label="median of the surrounding gaps",
    )
    prefill = gaps.groupby("injected_prompt_tokens")["injected_prefill_s"].first()
    ax.plot(
        prefill.index,
        prefill.values,
        linestyle="--",
        color="#555555",
        label="injected prefill time",
    )
    ax.set_xlabel("injected prompt tokens")
    ax.set_ylabel("seconds")
    ax.legend(fontsize=7)
    backend = ", ".join(sorted(set(gaps["backend"]))) if "backend" in gaps else "unknown"
    return Figure(
        fid,
        title,
        "Inter-token gaps of the streaming background sessions: the gap that "
        "contains the injected prefill against the injected prompt size, the "
        "median of the neighbouring gaps, and the injected prefill's own time. "
        f"Backend: {backend}.",
        to_svg(fig, fid),
        backend,
    )


def build_figures(res: Results) -> list[Figure]:
    studies = list(dict.fromkeys([*grid_studies(res), *slot_studies(res)]))
    comparison = [s for s in studies if s.kind == "comparison"]
    figures = [histogram_figure(res, s) for s in comparison]
    figures += [
        timeline_figure(res),
        prediction_figure(res),
        search_figure(res),
        saturation_figure(res),
        injection_figure(res),
    ]
    return [*figures, step_time_figure(res)]
