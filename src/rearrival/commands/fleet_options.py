"""The fleet options of ``rearrival simulate`` (docs/DESIGN.md §16), as one typed object:
``--replicas``, ``--router``, ``--slo`` with ``--attainment``, and the measurement window
``--warmup``/``--horizon``. Given any of them, a plan is served by a fleet
(``rearrival.model.fleet.simulate.simulate_fleet``) and its output gains the fleet's
fields; without them ``simulate`` is the single engine, as before."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rearrival.errors import RearrivalError


class FleetOptionError(RearrivalError, ValueError):
    """Fleet options that cannot be used; the message names the option and the fix."""


@dataclass(frozen=True)
class FleetOptions:
    replicas: int
    router: str
    slo: Any  # rearrival.model.fleet.latency.Slo | None
    warmup_s: float
    horizon_s: float

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> FleetOptions | None:
        """The fleet the options ask for, or None when they name none."""
        names = ("replicas", "router", "slo", "attainment", "warmup", "horizon")
        if all(options[name] is None for name in names):
            return None
        from rearrival.limits import MAX_REPLICAS, REPLICAS_WHY, check_at_most
        from rearrival.model.fleet.latency import DEFAULT_ATTAINMENT, Slo
        from rearrival.model.fleet.routers import ROUTERS

        replicas = 1 if options["replicas"] is None else options["replicas"]
        if replicas < 1:
            raise FleetOptionError(f"--replicas {replicas}: give a fleet of at least 1 replica")
        check_at_most("--replicas", replicas, MAX_REPLICAS, REPLICAS_WHY)
        router = options["router"] or "round_robin"
        if router not in ROUTERS:
            raise FleetOptionError(f"--router {router!r}: use one of {', '.join(ROUTERS)}")
        if options["attainment"] is not None and options["slo"] is None:
            raise FleetOptionError("--attainment needs --slo ttft=SECONDS,tpot=SECONDS")
        attainment = DEFAULT_ATTAINMENT if options["attainment"] is None else options["attainment"]
        slo = None if options["slo"] is None else Slo.parse(options["slo"], attainment)
        warmup = 0.0 if options["warmup"] is None else options["warmup"]
        horizon = math.inf if options["horizon"] is None else options["horizon"]
        if not (0 <= warmup < horizon):
            raise FleetOptionError(
                f"--warmup {warmup} --horizon {horizon}: the window needs 0 <= warm-up < horizon"
            )
        return cls(replicas, router, slo, warmup, horizon)

    def summary(
        self, plan: Any, configuration: Any, cost: Any, fixed: Any, source: str
    ) -> dict[str, Any]:
        from rearrival.model.fleet.simulate import simulate_fleet

        result = simulate_fleet(
            plan, configuration, cost, self.replicas, self.router, fixed, source=source
        )
        return result.summary(self.slo, self.warmup_s, self.horizon_s)

    def line(self, summary: dict[str, Any]) -> str:
        """The fleet's line under the substrate's: replicas, router, latency, SLO."""
        latency = summary["latency"]

        def spread(metric: str) -> str:
            values = latency[metric]
            if values["p50"] is None:
                return f"{metric.removesuffix('_s')} -"
            return f"{metric.removesuffix('_s')} " + "/".join(
                f"{values[p]:.4f}" for p in ("p50", "p90", "p99")
            )

        parts = [
            f"  fleet: {summary['replicas']} replica(s), {summary['router']}",
            "device " + "/".join(f"{d:.4f}" for d in summary["replica_device_s"]) + " s",
            f"{summary['measured_requests']} measured requests, p50/p90/p99 s: "
            + ", ".join(spread(m) for m in ("ttft_s", "tpot_s", "e2e_s", "queue_s")),
        ]
        slo = summary.get("slo")
        if slo is not None:
            verdict = "met" if slo["met"] else "not met"
            parts.append(
                f"SLO attainment {slo['attainment']:.3f} "
                f"(required {slo['attainment_required']}): {verdict}"
            )
        return "; ".join(parts)
