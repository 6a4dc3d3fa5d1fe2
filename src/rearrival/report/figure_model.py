"""What every report figure is and how it becomes SVG (docs/DESIGN.md §13).

Shared by the figure families (``figures``, ``calibration``) so neither imports the
other's internals. Output is deterministic: a fixed ``svg.hashsalt`` per figure
(clip-path ids are hashes) and no creation date, so the same results give the same bytes.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import Any

BUCKET_COLOURS = (
    "#4c72b0",
    "#dd8452",
    "#55a868",
    "#c44e52",
    "#8172b3",
    "#937860",
    "#da8bc3",
    "#8c8c8c",
    "#ccb974",
    "#64b5cd",
)


def round_spans(r: dict[str, Any]) -> list[tuple[str, float, float]]:
    """Queue, prefill and decode of one observed round on the client clock, the prefill
    placed before the first token by the server's ``prefill_s`` (none when unknown, NaN),
    so the session timelines of the mechanism and the agent sections draw the same spans."""
    prefill = r["prefill_s"] if r["prefill_s"] == r["prefill_s"] else 0.0
    start_prefill = max(r["send_s"], r["first_token_s"] - prefill)
    return [
        ("queue", r["send_s"], start_prefill),
        ("prefill", start_prefill, r["first_token_s"]),
        ("decode", r["first_token_s"], r["complete_s"]),
    ]


@dataclass(frozen=True)
class Figure:
    """One report figure: inline SVG (None when its inputs are absent) and the backend
    that produced the numbers it draws."""

    id: str
    title: str
    caption: str
    svg: str | None
    backend: str
    note: str | None = None


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend; imported on first use because pyplot
    takes 0.5 s to import (measured after this module) and most CLI verbs draw nothing."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def to_svg(fig: Any, salt: str) -> str:
    """Inline SVG (no XML prolog) with deterministic ids and no timestamp."""
    plt = pyplot()
    with plt.rc_context({"svg.hashsalt": f"rearrival-{salt}", "svg.fonttype": "none"}):
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None}, bbox_inches="tight")
    plt.close(fig)
    text = buffer.getvalue()
    text = re.sub(r"^<\?xml[^>]*>\s*", "", text)
    return re.sub(r"<!DOCTYPE[^>]*>\s*", "", text).strip()


def absent(fid: str, title: str, note: str) -> Figure:
    """A figure whose inputs are not produced: no SVG, and a note saying what is missing."""
    return Figure(fid, title, note, None, "none", note)
