"""``summary.json`` of a capacity run (docs/DESIGN.md §17 "Capacity"): what the answer
rests on (the pool and its sha256, the open traffic, the SLO, the tolerance, the cost model
and its provenance, the space and what its filters removed), the fleet of highest goodput
per replica, and with a target rate the pick, its spread and its deployment, plus the lines
the verb prints about the pick."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rearrival.search.capacity.deploy import deployment
from rearrival.search.capacity.evaluate import START_SESSIONS, Point
from rearrival.search.capacity.outputs import text
from rearrival.search.capacity.pick import Pick
from rearrival.search.capacity.run import CapacityRun
from rearrival.search.capacity.space import Fleet

VERSION = "rearrival-capacity/1"
MONOTONE_RULE = (
    "monotone: no rate evaluated (bracket, bisection, the check just above, the grid) meets "
    "the SLO above a rate that fails it"
)


@dataclass(frozen=True)
class Basis:
    """What the answer rests on besides the run itself: the pool as the user named it,
    the substrate, the trace pool's token scale, the grid, the cost model's provenance,
    what the deployment lines need (the model) and the ``plans open`` line that
    rebuilds a row's plan (``{rate}`` to fill)."""

    pool_path: str
    substrate: str
    token_scale: float
    grid: int
    provenance: dict[str, Any]
    deploy_args: dict[str, Any]
    reproduce: str


def _fleet(fleet: Fleet) -> dict[str, Any]:
    return {
        "configuration": fleet.configuration.id,
        "knobs": fleet.configuration.as_dict(),
        "replicas": fleet.replicas,
        "router": fleet.router,
    }


def _point(point: Point) -> dict[str, Any]:
    return {
        "rate": point.rate,
        "attainment": point.attainment,
        "meets": point.meets,
        "sessions": point.sessions,
        "measured_requests": point.measured_requests,
        "device_s_per_session": point.device_s_per_session,
        "cache_hit_share": point.cache_hit_share,
        "ttft_p90_s": point.ttft_p90_s,
        "tpot_p90_s": point.tpot_p90_s,
    }


def summary(run: CapacityRun, basis: Basis, pictures: list[str], wall_s: float) -> dict[str, Any]:
    """The summary (module docstring)."""
    workload = run.workload
    slo, pool = workload.slo, workload.pool
    data: dict[str, Any] = {
        "version": VERSION,
        "substrate": basis.substrate,
        "pool": {
            "path": basis.pool_path,
            "sha256": pool.sha256(),
            "sessions": pool.n,
            "requests": pool.requests,
            "prefixes": {p.id: p.tokens for p in pool.prefixes},
            "token_scale": basis.token_scale,
        },
        "workload": {
            "arrivals": "poisson",
            "horizon_s": workload.horizon_s,
            "warmup_s": workload.warmup_s,
            "seed": workload.seed,
            "start_rate": workload.start_rate,
            "start_rule": f"about {START_SESSIONS} sessions in the measured window",
            "reproduce": basis.reproduce.format(rate="<goodput_rate>"),
        },
        "slo": {
            "ttft_s": slo.ttft_s,
            "tpot_s": slo.tpot_s,
            "e2e_s": slo.e2e_s,
            "attainment": slo.attainment,
        },
        "tolerance": run.tolerance,
        "grid": basis.grid,
        "monotone_rule": MONOTONE_RULE,
        "cost": basis.provenance,
        "space": run.space.counts(),
        "not_monotone": sum(not c.monotone for c in run.capacities),
        "wall_s": round(wall_s, 3),
        "pictures": pictures,
    }
    useful = [c for c in run.capacities if c.goodput_rate > 0]
    if useful:
        best = max(useful, key=lambda c: c.goodput_rate / c.fleet.replicas)
        data["highest_goodput_per_replica"] = _fleet(best.fleet) | {
            "goodput_rate": best.goodput_rate,
            "deploy": deployment(
                best.fleet.configuration,
                best.fleet.replicas,
                best.fleet.router,
                **basis.deploy_args,
            ),
        }
    data["pick"], data["pick_lines"] = pick_summary(run.pick, run.pick_spread, basis.deploy_args)
    return data


def pick_summary(
    pick: Pick | None, pick_spread: dict[str, Any] | None, deploy_args: dict[str, Any]
) -> tuple[dict[str, Any] | None, list[str]]:
    """The pick, its spread and its deployment, and the lines printed about them."""
    if pick is None:
        return None, []
    meeting = sum(p.meets for _, p in pick.points)
    if pick.fleet is None or pick.point is None:
        return {"rate": pick.rate, "fleet": None, "meeting": 0}, [
            f"at {text(pick.rate)} sessions/s no fleet of the {len(pick.points)} meets the SLO: "
            "give more --replicas, other knobs or a looser --slo"
        ]
    deploy = deployment(
        pick.fleet.configuration, pick.fleet.replicas, pick.fleet.router, **deploy_args
    )
    body = {
        "rate": pick.rate,
        "meeting": meeting,
        "fleet": _fleet(pick.fleet),
        "at_rate": _point(pick.point),
        "spread": pick_spread,
        "deploy": deploy,
    }
    lines = [
        f"pick at {text(pick.rate)} sessions/s ({meeting} of {len(pick.points)} fleets meet "
        f"the SLO): {pick.fleet.configuration.id} x{pick.fleet.replicas} {pick.fleet.router}, "
        f"attainment {pick.point.attainment:.3f}, "
        f"{pick.point.device_s_per_session:.3f} device-s/session"
    ]
    if pick_spread is not None:
        s = pick_spread
        lines.append(
            f"  over {s['resamples']} resampled pools: meets on {s['meets_share']:.0%}; "
            f"attainment {s['attainment']['p05']:.3f} .. {s['attainment']['p95']:.3f} "
            f"(5-95 %), device-s/session {s['device_s_per_session']['p05']:.3f} .. "
            f"{s['device_s_per_session']['p95']:.3f}"
        )
    lines += _deploy_lines(deploy)
    return body, lines


def _deploy_lines(deploy: dict[str, Any]) -> list[str]:
    if deploy["substrate"] == "vllm":
        lines = [f"  deploy: {line}" for line in deploy["vllm_serve"]]
        if deploy["router"] is not None:
            lines += [f"  deploy: {deploy['router']}", f"  router: {deploy['router_note']}"]
        return lines
    lines = [
        f"  compile: {deploy['rearrival_compile']}",
        f"  serve: {deploy['instances_per_server']} instances of {deploy['devices_per_instance']} "
        f"devices per RBLN-CA25 server; {deploy['servers']} server(s)",
        *(f"  deploy: {line}" for line in deploy["vllm_serve"]),
    ]
    if deploy["router"] is not None:
        lines += [f"  deploy: {deploy['router']}", f"  router: {deploy['router_note']}"]
    return lines
