"""The capacity pictures (docs/DESIGN.md §17 "Capacity"), PNG files in the output folder,
drawn with matplotlib (Agg) as the report's figures are (``rearrival.report.figure_model``):

* ``attainment_vs_rate.png``: SLO attainment against the session rate for each fleet,
  the required share as a line and each goodput marked, so the knee is visible;
* ``goodput_per_replica.png``: goodput per replica by configuration, one bar per fleet
  size and router: what a replica holds, and what adding one buys;
* ``device_s_vs_rate.png``: device-seconds per session against the rate, each fleet's
  cost curve up to and past its goodput.

A search of hundreds of fleets would draw an unreadable tangle, so the curves show the
``MAX_CURVES`` fleets of highest goodput and the bars the ``MAX_BARS`` best configurations;
the title says when fleets were left out (all of them are in the CSV files).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rearrival.atomic import atomic_write_bytes
from rearrival.report.figure_model import pyplot
from rearrival.search.capacity.evaluate import FleetCapacity
from rearrival.search.vllm.defaults import short_id

MAX_CURVES = 12
MAX_BARS = 16


def _label(c: FleetCapacity) -> str:
    cid = c.fleet.configuration
    name = short_id(cid) if cid.substrate == "vllm" else cid.id
    return f"{name} x{c.fleet.replicas} {c.fleet.router}"


def _best(capacities: Sequence[FleetCapacity], most: int) -> tuple[list[FleetCapacity], str]:
    ranked = sorted(capacities, key=lambda c: -c.goodput_rate)[:most]
    left = len(capacities) - len(ranked)
    return ranked, "" if left <= 0 else f" (the {most} of highest goodput; {left} more in the CSV)"


def _rate_axis(ax: Any) -> None:
    """A log rate axis labelled 0.02, 0.05, 0.1 ... (plain numbers, no minor labels)."""
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("session arrival rate (sessions/s)")


def _save(fig: Any, path: Path) -> None:
    """The figure as PNG at ``path``, written atomically, with no software stamp."""
    plt = pyplot()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())


def attainment_figure(capacities: Sequence[FleetCapacity], required: float, path: Path) -> None:
    plt = pyplot()
    shown, note = _best(capacities, MAX_CURVES)
    fig, ax = plt.subplots(figsize=(8, 4.8))
    for c in shown:
        rates = [p.rate for p in c.points]
        (line,) = ax.plot(rates, [p.attainment for p in c.points], marker=".", label=_label(c))
        if c.at_goodput is not None:
            ax.plot([c.goodput_rate], [c.at_goodput.attainment], "o", color=line.get_color())
            ax.axvline(c.goodput_rate, color=line.get_color(), lw=0.6, ls=":")
    ax.axhline(required, color="black", lw=1, ls="--", label=f"required {required:g}")
    _rate_axis(ax)
    ax.set_ylabel("SLO attainment over the measured window")
    ax.set_title("Attainment against rate; o = goodput" + note, fontsize=9)
    ax.legend(fontsize=7, loc="lower left")
    _save(fig, path)


def goodput_figure(capacities: Sequence[FleetCapacity], path: Path) -> None:
    plt = pyplot()
    by_config: dict[str, list[FleetCapacity]] = {}
    for c in sorted(capacities, key=lambda c: -c.goodput_rate / c.fleet.replicas):
        by_config.setdefault(c.fleet.configuration.id, []).append(c)
    configs = list(by_config)[:MAX_BARS]
    series = sorted({(c.fleet.replicas, c.fleet.router) for c in capacities})
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(configs) + 3), 4.8))
    width = 0.8 / max(1, len(series))
    for k, (replicas, router) in enumerate(series):
        heights = []
        for cid in configs:
            match = [
                c
                for c in by_config[cid]
                if (c.fleet.replicas, c.fleet.router) == (replicas, router)
            ]
            heights.append(match[0].goodput_rate / replicas if match else 0.0)
        xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(configs))]
        ax.bar(xs, heights, width, label=f"x{replicas} {router}")
    names = [
        short_id(by_config[c][0].fleet.configuration)
        if by_config[c][0].fleet.configuration.substrate == "vllm"
        else c
        for c in configs
    ]
    ax.set_xticks(range(len(configs)), names, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("goodput per replica (sessions/s)")
    left = len(by_config) - len(configs)
    ax.set_title(
        "Goodput per replica by configuration"
        + (f" (best {len(configs)}; {left} more in the CSV)" if left > 0 else ""),
        fontsize=9,
    )
    ax.legend(fontsize=7)
    _save(fig, path)


def cost_figure(capacities: Sequence[FleetCapacity], path: Path) -> None:
    plt = pyplot()
    shown, note = _best(capacities, MAX_CURVES)
    fig, ax = plt.subplots(figsize=(8, 4.8))
    for c in shown:
        (line,) = ax.plot(
            [p.rate for p in c.points],
            [p.device_s_per_session for p in c.points],
            marker=".",
            label=_label(c),
        )
        if c.at_goodput is not None:
            ax.plot(
                [c.goodput_rate], [c.at_goodput.device_s_per_session], "o", color=line.get_color()
            )
    _rate_axis(ax)
    ax.set_ylabel("device-seconds per session")
    ax.set_title("Cost against rate; o = goodput" + note, fontsize=9)
    ax.legend(fontsize=7)
    _save(fig, path)


def write_figures(capacities: Sequence[FleetCapacity], required: float, out: Path) -> list[str]:
    """The three pictures into ``out``; returns their file names."""
    names = ["attainment_vs_rate.png", "goodput_per_replica.png", "device_s_vs_rate.png"]
    attainment_figure(capacities, required, out / names[0])
    goodput_figure(capacities, out / names[1])
    cost_figure(capacities, out / names[2])
    return names
