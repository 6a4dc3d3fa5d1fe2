"""The capacity stage in the HTML report (docs/DESIGN.md §17 "Capacity"): where the study
definition has a ``capacity:`` section, the report shows what ``rules/capacity.smk`` wrote
into ``results/capacity``: the three pictures (``capacity_figures``), embedded so the
report stays one file, the fleet of highest goodput per replica, and with a target rate
the pick and its deploy lines, as the verb printed them. The numbers are read from the
stage's ``summary.json``, never recomputed; a stage not run yet is "not produced"."""

from __future__ import annotations

import base64
from dataclasses import dataclass

from rearrival.report.results import Results

FOLDER = "capacity"  # under the results tree (rules/common.smk capacity_path)
HOW = "snakemake results/capacity"


@dataclass(frozen=True)
class CapacityPicture:
    name: str
    data_uri: str | None  # None: the stage named it but the file is not there


@dataclass(frozen=True)
class CapacitySection:
    """What the report's capacity section shows; ``produced`` false before the stage ran."""

    produced: bool
    lines: tuple[str, ...] = ()
    pictures: tuple[CapacityPicture, ...] = ()


def capacity_section(res: Results) -> CapacitySection | None:
    """The section, or None when the study runs no capacity stage."""
    if res.cfg.capacity is None:
        return None
    summary = res.load(f"{FOLDER}/summary.json", HOW)
    if summary is None:
        return CapacitySection(False)
    pictures = tuple(_picture(res, name) for name in summary.get("pictures", ()))
    return CapacitySection(True, tuple(_lines(summary)), pictures)


def _picture(res: Results, name: str) -> CapacityPicture:
    path = res.file(f"{FOLDER}/{name}", HOW)
    if path is None:
        return CapacityPicture(name, None)
    encoded = base64.b64encode(path.read_bytes()).decode("ascii")
    return CapacityPicture(name, f"data:image/png;base64,{encoded}")


def _lines(summary: dict) -> list[str]:
    """What the search covered and found, then the pick's lines."""
    slo, workload, space = summary["slo"], summary["workload"], summary["space"]
    thresholds = ", ".join(
        f"{name} {slo[f'{name}_s']:g} s" for name in ("ttft", "tpot", "e2e") if slo[f"{name}_s"]
    )
    lines = [
        f"{space['fleets']} fleets ({space['configurations']} configurations x fleet sizes x "
        f"routers) on {summary['substrate']}, each by bisection on the session rate to "
        f"{summary['tolerance']:g} relative, over {workload['horizon_s']:g} s of open traffic "
        f"(measured from {workload['warmup_s']:g} s, seed {workload['seed']}) from "
        f"{summary['pool']['path']}; SLO {thresholds} for {slo['attainment']:.0%} of requests; "
        f"cost: {summary['cost']['source']}."
    ]
    if summary.get("not_monotone"):
        lines.append(f"{summary['not_monotone']} fleets have a non-monotone attainment curve.")
    best = summary.get("highest_goodput_per_replica")
    if best is not None:
        lines.append(
            f"Highest goodput per replica: {best['configuration']} x{best['replicas']} "
            f"{best['router']}, {best['goodput_rate']!r} sessions/s."
        )
    return [*lines, *(line.strip() for line in summary.get("pick_lines", ()))]
