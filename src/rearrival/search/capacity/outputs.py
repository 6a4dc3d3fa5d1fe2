"""The capacity folder (docs/DESIGN.md §17 "Capacity"): ``capacity.csv`` (one row per
configuration x replicas x router), ``curve.csv`` (every rate each fleet was run at),
``summary.json`` (what the answer rests on, the pick and its deployment) and the lines the
verb prints. Rates are written with ``repr``, the shortest text that reads back as the same
float, so ``rearrival plans open --rate <goodput_rate>`` rebuilds the very plan the row was
measured on. Every file is written atomically.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

from rearrival.atomic import atomic_write_json, atomic_write_text
from rearrival.search.capacity.evaluate import FleetCapacity, Point
from rearrival.search.capacity.run import CapacityRun

CAPACITY_COLUMNS = (
    "configuration",
    "replicas",
    "router",
    "goodput_rate",
    "attainment",
    "tolerance",
    "monotone",
    "device_s_per_session",
    "cache_hit_share",
    "goodput_per_replica",
    "replicas_per_rate",
    "sessions",
    "measured_requests",
    "ttft_p90_s",
    "tpot_p90_s",
    "rate_above",
    "attainment_above",
    "bounded",
    "evaluations",
)
CURVE_COLUMNS = (
    "configuration",
    "replicas",
    "router",
    "rate",
    "role",
    "attainment",
    "meets",
    "device_s_per_session",
    "cache_hit_share",
    "sessions",
    "measured_requests",
)


def text(value: Any) -> str:
    """A cell: floats by ``repr`` (exact), None empty, booleans lower case."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ("inf" if value > 0 else "nan")
    return str(value)


def capacity_row(c: FleetCapacity) -> dict[str, Any]:
    at, above = c.at_goodput, c.above
    return {
        "configuration": c.fleet.configuration.id,
        "replicas": c.fleet.replicas,
        "router": c.fleet.router,
        "goodput_rate": c.goodput_rate,
        "attainment": None if at is None else at.attainment,
        "tolerance": c.tolerance,
        "monotone": c.monotone,
        "device_s_per_session": None if at is None else at.device_s_per_session,
        "cache_hit_share": None if at is None else at.cache_hit_share,
        "goodput_per_replica": c.goodput_rate / c.fleet.replicas,
        "replicas_per_rate": c.fleet.replicas / c.goodput_rate if c.goodput_rate else None,
        "sessions": None if at is None else at.sessions,
        "measured_requests": None if at is None else at.measured_requests,
        "ttft_p90_s": None if at is None else at.ttft_p90_s,
        "tpot_p90_s": None if at is None else at.tpot_p90_s,
        "rate_above": c.above_rate,
        "attainment_above": None if above is None else above.attainment,
        "bounded": c.bounded,
        "evaluations": len(c.points),
    }


def curve_rows(c: FleetCapacity) -> list[dict[str, Any]]:
    return [_curve_row(c, p) for p in c.points]


def _curve_row(c: FleetCapacity, p: Point) -> dict[str, Any]:
    return {
        "configuration": c.fleet.configuration.id,
        "replicas": c.fleet.replicas,
        "router": c.fleet.router,
        "rate": p.rate,
        "role": c.roles.get(p.rate, "bisection"),
        "attainment": p.attainment,
        "meets": p.meets,
        "device_s_per_session": p.device_s_per_session,
        "cache_hit_share": p.cache_hit_share,
        "sessions": p.sessions,
        "measured_requests": p.measured_requests,
    }


def to_csv(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([text(row[c]) for c in columns])
    return buffer.getvalue()


def write_tables(run: CapacityRun, out: Path) -> None:
    """``capacity.csv`` and ``curve.csv``."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [capacity_row(c) for c in run.capacities]
    atomic_write_text(out / "capacity.csv", to_csv(rows, CAPACITY_COLUMNS))
    curve = [row for c in run.capacities for row in curve_rows(c)]
    atomic_write_text(out / "curve.csv", to_csv(curve, CURVE_COLUMNS))


def write_summary(summary: dict[str, Any], out: Path) -> None:
    atomic_write_json(out / "summary.json", summary)


def result_lines(run: CapacityRun, out: Path, reproduce: str) -> list[str]:
    """What the verb prints: each fleet's goodput, the pick, and how to re-check a row."""
    lines = []
    for c in run.capacities:
        at = c.at_goodput
        shape = "" if c.monotone else " (attainment curve NOT monotone: see curve.csv)"
        where = (
            f"attainment {at.attainment:.3f}, {at.device_s_per_session:.3f} device-s/session, "
            f"cache hits {at.cache_hit_share:.1%}"
            if at is not None
            else "fails the SLO even at the smallest rate tried"
        )
        lines.append(
            f"{c.fleet.configuration.id} x{c.fleet.replicas} {c.fleet.router}: goodput "
            f"{text(c.goodput_rate)} sessions/s ({where}){shape}"
        )
    lines.append(
        f"wrote {out}/capacity.csv ({len(run.capacities)} fleets, tolerance "
        f"{run.tolerance:g} relative), curve.csv, summary.json and pictures"
    )
    if run.capacities and run.capacities[0].goodput_rate > 0:
        rate = text(run.capacities[0].goodput_rate)
        lines.append(f"re-check a row: {reproduce.format(rate=rate)}")
    return lines
