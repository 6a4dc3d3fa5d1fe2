"""The figures of a study on a real vLLM server (docs/DESIGN.md §15; the report section of
``rearrival.report.vllm``), drawn from the tables its stages wrote and nothing else:

- cached tokens per request, vLLM's against the prediction, once for the registered
  prediction (planned arrivals, the vLLM tables' requests) and once for the predictor
  re-run on the run's observed arrivals (each comparison's requests table);
- per run, the re-arrivals that lost part of their prefix and the prefill recomputed
  because tool waits let blocks be evicted: registered, re-run and vLLM;
- per run, device time: registered, channel A, vLLM's logged iteration times, channel B.

Each figure names the backend whose numbers it draws; SVG output is deterministic
(``figure_model.to_svg``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from rearrival.report.figure_model import BUCKET_COLOURS, Figure, absent, pyplot, to_svg

# One colour per source of a number, the same in every figure of the section.
SOURCE_COLOURS = {
    "registered": "#4c72b0",
    "observed arrivals": "#55a868",
    "vLLM": "#dd8452",
    "channel A": "#8172b3",
    "channel B": "#937860",
}


def _colours(configurations: Sequence[str]) -> dict[str, str]:
    return {c: BUCKET_COLOURS[k % len(BUCKET_COLOURS)] for k, c in enumerate(configurations)}


def _scatter_panel(ax: Any, points: pd.DataFrame, colours: dict[str, str], label: str) -> None:
    """Predicted (x) against vLLM (y) per request; a marker's area counts the requests at
    that point, so coinciding requests are not hidden."""
    counted = points.groupby(["configuration", "predicted", "observed"]).size().reset_index()
    top = float(max(points["predicted"].max(), points["observed"].max(), 1))
    ax.plot([0, top], [0, top], color="#999", linewidth=0.8, linestyle="--", zorder=0)
    for conf, group in counted.groupby("configuration", sort=False):
        ax.scatter(
            group["predicted"],
            group["observed"],
            s=14 * np.sqrt(group[0].to_numpy()),
            color=colours[str(conf)],
            alpha=0.7,
            label=str(conf),
            edgecolors="none",
        )
    agree = int((points["predicted"] == points["observed"]).sum())
    ax.set_title(f"{label}\n{agree} of {len(points)} requests on the diagonal", fontsize=8)
    ax.set_xlabel("predicted cached tokens")


def cached_tokens_figure(
    study: str, requests: pd.DataFrame, rerun: pd.DataFrame, backend: str
) -> Figure:
    """vLLM's cached tokens per request against the registered and the re-run prediction.

    ``requests``: the vLLM tables' rows (configuration, cached_observed,
    cached_registered); ``rerun``: the comparisons' rows (configuration,
    cached_tokens_observed, cached_tokens_predicted), empty when none was produced."""
    fid, title = f"{study}_cached_tokens", f"Cached tokens per request, study {study}"
    if requests.empty:
        return absent(fid, title, f"study {study}: no complete run has a requests table yet.")
    panels = [
        (
            "registered prediction (planned arrivals)",
            requests.rename(
                columns={"cached_registered": "predicted", "cached_observed": "observed"}
            ),
        )
    ]
    if not rerun.empty:
        renamed = {"cached_tokens_predicted": "predicted", "cached_tokens_observed": "observed"}
        panels.append(("predictor on the run's observed arrivals", rerun.rename(columns=renamed)))
    colours = _colours(list(dict.fromkeys(requests["configuration"])))
    plt = pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    for ax, (label, points) in zip(axes[0], panels, strict=True):
        _scatter_panel(ax, points, colours, label)
    axes[0][0].set_ylabel("cached tokens vLLM reported")
    axes[0][-1].legend(fontsize=7, title="configuration", title_fontsize=7, loc="upper left")
    caption = (
        "One marker per request and configuration, its area growing with the number of "
        "requests at that point; on the dashed diagonal the prediction equals what vLLM "
        "reported (usage.prompt_tokens_details.cached_tokens). Left: the prediction "
        "registered before the first server started; right: the vllm rule set re-run with "
        "each run's observed arrival times (Table VA1)."
    )
    return Figure(fid, title, caption, to_svg(fig, fid), backend)


def _run_labels(runs: pd.DataFrame) -> list[str]:
    return [
        f"{c}\nr{int(r)}" for c, r in zip(runs["configuration"], runs["replicate"], strict=True)
    ]


def _grouped_bars(ax: Any, labels: list[str], series: dict[str, Sequence[float]]) -> None:
    """One group of bars per run, one bar per source, coloured by source."""
    x = np.arange(len(labels))
    width = 0.8 / max(len(series), 1)
    for k, (source, values) in enumerate(series.items()):
        ax.bar(
            x + (k - (len(series) - 1) / 2) * width,
            values,
            width,
            label=source,
            color=SOURCE_COLOURS[source],
        )
    ax.set_xticks(x, labels, fontsize=7, rotation=30, ha="right")


def lost_prefixes_figure(
    study: str, runs: pd.DataFrame, rerun: pd.DataFrame, backend: str
) -> Figure:
    """Per run: re-arrivals that lost part of their prefix, and the recomputed prefill.

    ``runs``: the vLLM tables' runs rows; ``rerun``: one row per compared run (run_id,
    lost, recomputed) from the comparisons' summaries, empty when none was produced."""
    fid, title = f"{study}_lost_prefixes", f"Re-arrivals that lost their prefix, study {study}"
    if runs.empty:
        return absent(fid, title, f"study {study}: no complete run has a runs table yet.")
    merged = runs.merge(rerun, on="run_id", how="left") if not rerun.empty else runs
    panels = (
        ("re-arrivals that lost part of their prefix", "re_arrivals_lost", "lost", "re-arrivals"),
        (
            "prefill tokens recomputed (against a never-evicting pool)",
            "recomputed_prefill",
            "recomputed",
            "tokens",
        ),
    )
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(max(6.0, 1.1 * len(runs)) * 1.4, 3.4))
    for ax, (label, column, rerun_column, unit) in zip(axes, panels, strict=True):
        series = {"registered": merged[f"{column}_registered"].tolist()}
        if rerun_column in merged:
            series["observed arrivals"] = merged[rerun_column].fillna(0).tolist()
        series["vLLM"] = merged[f"{column}_observed"].tolist()
        _grouped_bars(ax, _run_labels(merged), series)
        ax.set_title(label, fontsize=8)
        ax.set_ylabel(f"{unit} per run")
    axes[-1].legend(fontsize=7)
    caption = (
        "Per run (configuration and replicate): registered is the prediction committed "
        "before the servers started (planned arrivals), observed arrivals the vllm rule set "
        "re-run with the run's arrival times, vLLM what the server's cached tokens show. A "
        "re-arrival lost part of its prefix when it was cached fewer tokens than the round "
        "before it left cacheable; the recomputed prefill sums what it lost."
    )
    return Figure(fid, title, caption, to_svg(fig, fid), backend)


def device_time_figure(study: str, runs: pd.DataFrame, backend: str) -> Figure:
    """Per run: registered device time, channel A, logged iteration time, channel B."""
    fid, title = f"{study}_device_time", f"Device time per run, study {study}"
    if runs.empty:
        return absent(fid, title, f"study {study}: no complete run has a runs table yet.")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(runs)), 3.2))
    series = {
        "registered": runs["device_s_registered"].tolist(),
        "channel A": runs["channel_a_s"].tolist(),
        "vLLM": runs["logged_elapsed_s"].tolist(),
        "channel B": runs["channel_b_s"].tolist(),
    }
    _grouped_bars(ax, _run_labels(runs), series)
    ax.set_ylabel("seconds")
    ax.legend(fontsize=7, ncols=4, loc="upper left")
    caption = (
        "Registered: the profile's device time of the prediction committed before the runs; "
        "channel A: the same profile priced on the steps vLLM logged; vLLM: the sum of its "
        "logged iteration times; channel B: wall time. Seconds of the machine that ran them "
        "(the section names it); on a loaded machine the last two measure the load too."
    )
    return Figure(fid, title, caption, to_svg(fig, fid), backend)
