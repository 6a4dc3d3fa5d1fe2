"""The registration of the study on a real fleet (docs/DESIGN.md §18), committed before the
first server starts: per condition the fleet rule set's predictions on the study's open
plans (each policy predicted by its nearest router model, named with the reason), the
count-based decision criteria (``rearrival.judge.fleet_study``), the design the audit
checks every run against (backend, N, replicates, variant, the two pools' knobs) and the
profile the predictions are priced with.

Files under ``preregistration/<study>/``: ``design.json``, ``plans.json`` (each
replicate's plan sha256 and its new seed), ``predictions.json``, ``criteria.json`` and
``profile.yaml``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rearrival.config.fleet import NEAREST_ROUTER_MODEL, FleetCondition
from rearrival.config.study import StudyConfig
from rearrival.judge.fleet_study import FleetCounts, RequestCount, fleet_criteria
from rearrival.model.cost.profile import profile_bytes, profile_sha256
from rearrival.model.cost.vllm_profile import load_vllm_profile
from rearrival.model.fleet.simulate import FleetResult, simulate_fleet
from rearrival.model.plans.plan import Plan
from rearrival.prereg.registration import PROFILE_FILE, PreregRecord, register

DESIGN, PLANS = "design.json", "plans.json"
PREDICTIONS, CRITERIA = "predictions.json", "criteria.json"
# What a registered TTFT or device time is: stated beside every prediction of them.
EXPLORATORY = (
    "time to first token and device time are registered-exploratory: predicted against "
    "observed in the report, never decided (a loaded 2-core machine blurs wall time)"
)


def prediction_rows(result: FleetResult) -> list[RequestCount]:
    """The predictor's requests as the decision counts read them."""
    return [
        RequestCount(
            r.round,
            r.replica,
            r.prompt_tokens,
            r.cached_tokens,
            result.prediction.cacheable_tokens(rid),
            r.first_token_s - r.arrival_s,
        )
        for rid, r in enumerate(result.requests)
    ]


def predict_condition(
    cfg: StudyConfig, condition: FleetCondition, plan: Plan, profile: Path
) -> dict[str, Any]:
    """One condition's registered prediction: the fleet rule set on ``plan`` behind the
    policy's nearest router model, counts and per-request rows."""
    assert cfg.fleet is not None
    result = simulate_fleet(
        plan,
        cfg.configurations[condition.configuration],
        load_vllm_profile(profile).step_cost,
        cfg.fleet.replicas,
        condition.router_model,
        core="python",  # the same bits as the compiled fleet; 52 requests take 0.1 s
        # there, where a fresh clone would first compile the numba core (about a minute)
    )
    rows = prediction_rows(result)
    return {
        "policy": condition.policy,
        "configuration": condition.configuration,
        "router_model": condition.router_model,
        "router_model_why": NEAREST_ROUTER_MODEL[condition.policy][1],
        "counts": FleetCounts.of(rows).as_dict(),
        "device_s_per_replica": list(result.replica_device_s),
        "requests": [
            {
                "session": r.session,
                "round": r.round,
                "replica": r.replica,
                "cached_tokens": r.cached_tokens,
                "ttft_s": r.first_token_s - r.arrival_s,
            }
            for r in result.requests
        ],
    }


def fleet_design(cfg: StudyConfig, plans: list[Plan], profile: Path) -> dict[str, Any]:
    """What the audit checks each run against (``rearrival.prereg.audit.runs``)."""
    assert cfg.fleet is not None
    fleet = cfg.fleet
    return {
        "study": fleet.study,
        "kind": "fleet",
        "backend": cfg.backend,
        "n": sorted({p.n for p in plans}),
        "replicates": fleet.replicates,
        "variants": [fleet.variant],
        "configurations": {name: cfg.configurations[name].as_dict() for name in fleet.pools},
        "conditions": [
            {
                "label": c.label,
                "policy": c.policy,
                "configuration": c.configuration,
                "router_model": c.router_model,
            }
            for c in fleet.conditions()
        ],
        "fleet": fleet.as_dict(),
        "profile_sha256": profile_sha256(profile),
        "exploratory": EXPLORATORY,
    }


def register_fleet(
    repo_dir: Path, cfg: StudyConfig, plans: list[Plan], profile: Path, records_dir: Path
) -> PreregRecord:
    """Commit the fleet study's registration (no commit when it is already registered
    with the same content; a changed one is refused by ``register``)."""
    assert cfg.fleet is not None
    fleet = cfg.fleet
    predictions = {
        f"r{rep}/{c.label}": predict_condition(cfg, c, plan, profile)
        for rep, plan in enumerate(plans)
        for c in fleet.conditions()
    }
    registry = {
        "validation": True,
        "plans": [
            {
                "replicate": rep,
                "n": p.n,
                "seed": p.meta.seed,
                "sha256": p.sha256(),
                "variant": fleet.variant,
            }
            for rep, p in enumerate(plans)
        ],
    }
    files = {
        DESIGN: fleet_design(cfg, plans, profile),
        PLANS: registry,
        PREDICTIONS: {"exploratory": EXPLORATORY, "conditions": predictions},
        CRITERIA: {"criteria": fleet_criteria(fleet), "judged_on": "observed counts"},
        PROFILE_FILE: profile_bytes(profile),
    }
    return register(
        repo_dir,
        fleet.study,
        files,
        message=f"prereg({fleet.study}): fleet predictions and count criteria before any run",
        records_dir=records_dir,
    )
