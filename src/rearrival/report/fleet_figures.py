"""The fleet study's figures (docs/DESIGN.md §18; README "A study on a real fleet"), drawn
with matplotlib (Agg) as the report's others are and kept as inline SVG
(``rearrival.report.figure_model``), one panel per condition:

* ``fleet_cached_tokens``: each request's cached tokens as vLLM reported them against
  the fleet predictor's on the observed placement and arrivals; agreeing requests lie on
  the diagonal, timing-dependent ones (``rearrival.judge.fleet_agreement``) are
  marked apart, a predictor error in red;
* ``fleet_ttft``: time to first token over the run, per replica, observed (filled)
  and predicted (hollow): exploratory, a loaded machine blurs it.

Self-contained (frames in, ``Figure`` out): the section writes each as
``reports/fleet/figures/<id>.svg`` for the Markdown twin and inlines it in report.html.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from rearrival.judge.fleet_agreement import AGREE, PREDICTOR_ERROR, TIMING
from rearrival.report.figure_model import Figure, pyplot, to_svg

CACHED_FIGURE, TTFT_FIGURE = "fleet_cached_tokens", "fleet_ttft"
VERDICT_STYLE = {
    AGREE: ("tab:blue", "o"),
    TIMING: ("tab:orange", "s"),
    PREDICTOR_ERROR: ("red", "x"),
}
REPLICA_COLOURS = ("tab:blue", "tab:green", "tab:purple", "tab:brown")


def _grid(count: int) -> tuple[Any, list[Any]]:
    plt = pyplot()
    columns = min(2, count)
    rows = math.ceil(count / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 4.0 * rows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[count:]:
        ax.set_visible(False)
    return fig, flat


def _figure(fig: Any, fid: str, title: str, caption: str, backend: str) -> Figure:
    """The drawn figure as inline SVG (deterministic: ``to_svg``)."""
    fig.tight_layout()  # panel titles clear of the labels above
    return Figure(fid, title, caption, to_svg(fig, fid), backend)


def cached_tokens_figure(frames: Mapping[str, pd.DataFrame], backend: str) -> Figure:
    """Per-request cached tokens, predicted (x) against observed (y), per condition."""
    fig, axes = _grid(len(frames))
    for ax, (label, frame) in zip(axes, frames.items(), strict=False):
        top = max(1, int(frame[["cached_tokens_observed", "cached_tokens_predicted"]].max().max()))
        ax.plot([0, top], [0, top], color="grey", lw=0.8, zorder=0)
        for verdict, (colour, marker) in VERDICT_STYLE.items():
            part = frame[frame["verdict"] == verdict]
            if len(part):
                ax.scatter(
                    part["cached_tokens_predicted"],
                    part["cached_tokens_observed"],
                    c=colour,
                    marker=marker,
                    s=22,
                    label=f"{verdict} ({len(part)})",
                )
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("cached tokens, predicted (observed placement)")
        ax.set_ylabel("cached tokens, vLLM")
        ax.legend(fontsize=8, loc="upper left")
    title = "Per-request cached tokens: the fleet predictor against vLLM"
    caption = (
        "One marker per request, one panel per run: the fleet rule set on the run's observed "
        "placement and arrivals (x) against what vLLM reported (y, "
        "usage.prompt_tokens_details.cached_tokens). On the grey diagonal they agree; "
        "timing-dependent requests (their replica's predicted pool had evicted before "
        "admitting them, or its neighbours' order differed) are squares, a predictor error "
        "a red cross."
    )
    return _figure(fig, CACHED_FIGURE, title, caption, backend)


def ttft_figure(frames: Mapping[str, pd.DataFrame], backend: str) -> Figure:
    """Time to first token against send time, per replica, observed and predicted."""
    fig, axes = _grid(len(frames))
    for ax, (label, frame) in zip(axes, frames.items(), strict=False):
        for replica, part in frame.groupby("replica"):
            colour = REPLICA_COLOURS[int(replica) % len(REPLICA_COLOURS)]
            ax.scatter(
                part["send_s"],
                part["ttft_s_observed"] * 1e3,
                c=colour,
                s=16,
                label=f"replica {replica}, vLLM",
            )
            ax.scatter(
                part["send_s"],
                part["ttft_s_predicted"] * 1e3,
                facecolors="none",
                edgecolors=colour,
                s=16,
                label=f"replica {replica}, predicted",
            )
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("send time in the run (s)")
        ax.set_ylabel("time to first token (ms)")
        ax.legend(fontsize=7, loc="upper right")
    title = "Time to first token over the run per replica (exploratory)"
    caption = (
        "Each request's time to first token against its send time, per replica: observed "
        "(filled) and predicted on the observed arrivals (hollow). Registered as "
        "exploratory: the predictor's step costs are the calibration's, and a loaded "
        "machine adds queueing in bursts that no decision reads."
    )
    return _figure(fig, TTFT_FIGURE, title, caption, backend)
