"""The fleet study's figures (docs/DESIGN.md §18; README "A study on a real fleet"), PNG
files drawn with matplotlib (Agg) as the report's others are
(``rearrival.report.figure_model``), one panel per condition:

* ``fleet_cached_tokens.png``: each request's cached tokens as vLLM reported them against
  the fleet predictor's on the observed placement and arrivals; agreeing requests lie on
  the diagonal, timing-dependent ones (their replica's predicted pool had evicted) are
  marked apart, a predictor error in red;
* ``fleet_ttft.png``: time to first token over the run, per replica, observed (filled)
  and predicted (hollow): exploratory, a loaded machine blurs it.

Self-contained (frames in, files out), so any report, Markdown or HTML, can embed them.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from rearrival.atomic import atomic_write_bytes
from rearrival.judge.fleet_agreement import AGREE, PREDICTOR_ERROR, TIMING
from rearrival.report.figure_model import pyplot

CACHED_FIGURE, TTFT_FIGURE = "fleet_cached_tokens.png", "fleet_ttft.png"
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


def _save(fig: Any, path: Path) -> Path:
    """The figure as PNG at ``path``, written atomically, with no software stamp."""
    fig.tight_layout(rect=(0, 0, 1, 0.95))  # panel titles clear of the labels above
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    pyplot().close(fig)
    atomic_write_bytes(path, buffer.getvalue())
    return path


def cached_tokens_figure(frames: Mapping[str, pd.DataFrame], path: Path) -> Path:
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
    fig.suptitle("Per-request cached tokens: the fleet predictor against vLLM", fontsize=11)
    return _save(fig, path)


def ttft_figure(frames: Mapping[str, pd.DataFrame], path: Path) -> Path:
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
    fig.suptitle("Time to first token over the run per replica (exploratory)", fontsize=11)
    return _save(fig, path)
