"""The study on a real fleet as defined, without servers (docs/DESIGN.md §18; README "A
study on a real fleet"): config/fleet.yaml loads with every policy x both pools, each
policy's registered router model is the nearest one and the registration says why, the
section's keys are the schema's, bad sections are one line naming the key, and the
count-based decisions come out as their rules say on synthetic records. The end-to-end
study on real servers is `make all-fleet`, which .ci/run runs in a scratch clone."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from rearrival.config.errors import StudyConfigError
from rearrival.config.fleet import NEAREST_ROUTER_MODEL, FleetStudySettings
from rearrival.config.study import (
    config_schema_path,
    effective_definition,
    load_study_config,
    study_config_from_mapping,
)
from rearrival.judge.fleet_study import (
    FAILS,
    HOLDS,
    FleetCounts,
    RequestCount,
    decide,
    fleet_criteria,
)
from rearrival.measure.fleet.router import ROUTER_POLICIES
from rearrival.model.fleet.routers import ROUTERS
from rearrival.prereg.fleet import fleet_design, predict_condition
from rearrival.workflow.fleet import fleet_plan
from rearrival.workflow.params import workflow_params

REPO = Path(__file__).resolve().parents[1]
FLEET_YAML = REPO / "config" / "fleet.yaml"


@pytest.fixture(scope="module")
def cfg():
    return load_study_config(FLEET_YAML)


def test_the_fleet_definition_loads_with_every_policy_on_both_pools(cfg) -> None:
    fleet = cfg.fleet
    assert cfg.backend == "vllm" and cfg.studies == {}
    assert {"round_robin", "consistent_hash"} <= set(fleet.policies)
    labels = [c.label for c in fleet.conditions()]
    assert len(labels) == len(set(labels)) == len(fleet.policies) * 2
    small, large = (cfg.configurations[name] for name in fleet.pools)
    assert small.num_blocks < large.num_blocks
    assert fleet.replicas == 2 and fleet.replicates >= 1
    # the fleet stages get their own values digest, and no closed-loop study stage exists
    params = workflow_params(cfg)
    assert "fleet" in params and not any(":" in key for key in params)


def test_the_section_keys_are_the_schema_properties_and_round_trip(cfg, tmp_path) -> None:
    schema = yaml.safe_load(config_schema_path().read_text())["properties"]["fleet"]
    assert {f.name for f in dataclasses.fields(FleetStudySettings)} == set(schema["properties"])
    assert set(schema["properties"]["policies"]["items"]["enum"]) == set(NEAREST_ROUTER_MODEL)
    shown = tmp_path / "shown.yaml"
    shown.write_text(yaml.safe_dump(effective_definition(cfg), sort_keys=False))
    assert load_study_config(shown).fleet == cfg.fleet


def test_every_policy_has_a_router_model_that_exists_and_consistent_hash_is_affinity() -> None:
    assert set(NEAREST_ROUTER_MODEL) <= set(ROUTER_POLICIES)
    assert {model for model, _ in NEAREST_ROUTER_MODEL.values()} <= set(ROUTERS)
    assert NEAREST_ROUTER_MODEL["consistent_hash"][0] == "session_affinity"
    assert NEAREST_ROUTER_MODEL["cache_aware"][0] == "prefix_aware"
    assert NEAREST_ROUTER_MODEL["round_robin"][0] == "round_robin"


def test_the_registration_names_the_nearest_model_and_predicts_the_designs_premise(cfg) -> None:
    """Registered predictions on the study's own plan: consistent_hash is predicted by
    session_affinity (said so, with the hash as the reason), and the two pools do what the
    design says: affinity loses prefixes on the small pool only, round robin more."""
    plan = fleet_plan(cfg, 0)
    assert plan.prefixes and all(s.prefix for s in plan.sessions)
    profile = Path(cfg.measurement.profile)
    fleet = cfg.fleet
    small, large = fleet.pools
    predicted = {c.label: predict_condition(cfg, c, plan, profile) for c in fleet.conditions()}
    hashed = predicted[f"consistent_hash-{small}"]
    assert hashed["router_model"] == "session_affinity" and "hash" in hashed["router_model_why"]
    lost = {label: p["counts"]["re_arrivals_lost"] for label, p in predicted.items()}
    assert lost[f"consistent_hash-{large}"] == 0 < lost[f"consistent_hash-{small}"]
    assert lost[f"consistent_hash-{small}"] < lost[f"round_robin-{small}"]
    assert all(p["counts"]["requests"] == plan.requests for p in predicted.values())
    design = fleet_design(cfg, [plan], profile)
    assert design["n"] == [plan.n] and set(design["configurations"]) == set(fleet.pools)
    models = {c["router_model"] for c in design["conditions"]}
    assert models == {NEAREST_ROUTER_MODEL[p][0] for p in fleet.policies}
    assert {"round_robin", "session_affinity", "prefix_aware"} <= models


def _raw() -> dict:
    return yaml.safe_load(FLEET_YAML.read_text())


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"policies": ["round_robin", "round_robin"]}, "fleet.policies"),
        ({"small_pool": "nowhere"}, "fleet.small_pool"),
        ({"small_pool": "large_pool", "large_pool": "small_pool"}, "fleet.small_pool"),
        ({"colour": "red"}, "fleet: "),
    ],
)
def test_a_bad_fleet_section_is_one_line_naming_the_key(change: dict, named: str) -> None:
    raw = _raw()
    raw["fleet"] |= change
    with pytest.raises(StudyConfigError) as caught:
        study_config_from_mapping(raw, "fleet.yaml")
    message = str(caught.value)
    assert named in message and "\n" not in message


def test_a_definition_with_no_study_and_no_fleet_is_refused() -> None:
    raw = _raw()
    del raw["fleet"]
    with pytest.raises(StudyConfigError, match="nothing would run"):
        study_config_from_mapping(raw, "fleet.yaml")


def _counts(lost: int, prefill: int) -> FleetCounts:
    return FleetCounts(10, 6, lost, 100.0, prefill, 0.01, 0.02, {"0": 5, "1": 5})


def test_lost_prefixes_count_later_rounds_that_hit_less_than_the_round_before() -> None:
    rows = [
        RequestCount(0, 0, 300, 0, 0, 0.01),  # a first round never loses
        RequestCount(1, 0, 400, 320, 320, 0.01),  # hit everything: kept
        RequestCount(1, 1, 400, 256, 320, 0.02),  # the shared prefix only: lost (moved)
        RequestCount(2, 1, 500, 0, 416, 0.03),  # nothing: lost (evicted)
    ]
    counts = FleetCounts.of(rows)
    assert (counts.re_arrivals, counts.re_arrivals_lost) == (3, 2)
    assert counts.prefill_tokens == 300 + 80 + 144 + 500
    assert counts.requests_per_replica == {"0": 2, "1": 2}
    assert counts.ttft_s_p90 == 0.03


def test_decisions_are_made_on_the_observed_counts_beside_the_registered_prediction(
    cfg,
) -> None:
    fleet = cfg.fleet
    small, large = fleet.pools
    criteria = fleet_criteria(fleet)
    names = {c["name"] for c in criteria}
    assert f"consistent_hash_loses_fewer_{small}" in names
    assert f"consistent_hash_loses_none_{large}" in names
    assert {f"agreement_{c.label}" for c in fleet.conditions()} <= names
    predicted = {
        c.label: _counts(0 if c.configuration == large else 8, 6000) for c in fleet.conditions()
    }
    predicted |= {
        f"round_robin-{small}": _counts(20, 8000),
        f"round_robin-{large}": _counts(18, 7000),
        f"consistent_hash-{small}": _counts(8, 6000),
        f"consistent_hash-{large}": _counts(0, 5000),
    }
    # observed: affinity loses as many as round robin on the small pool, one on the large
    observed = dict(predicted) | {
        f"consistent_hash-{small}": _counts(20, 6500),
        f"consistent_hash-{large}": _counts(1, 5000),
    }
    errors = {label: 0 for label in predicted} | {f"round_robin-{large}": 2}
    decided = {d.name: d for d in decide(criteria, predicted, observed, errors)}
    fewer = decided[f"consistent_hash_loses_fewer_{small}"]
    assert (fewer.predicted, fewer.observed, fewer.verdict) == (True, False, FAILS)
    assert not fewer.prediction_right and "20 vs 20" in fewer.evidence
    assert decided[f"consistent_hash_recomputes_less_{small}"].verdict == HOLDS
    assert decided[f"consistent_hash_loses_none_{large}"].verdict == FAILS
    assert decided[f"consistent_hash_loses_some_{small}"].verdict == HOLDS
    assert decided[f"agreement_round_robin-{large}"].verdict == FAILS
    assert decided[f"agreement_round_robin-{small}"].verdict == HOLDS
    assert all(d.verdict in (HOLDS, FAILS) for d in decided.values())  # none withheld


def test_the_report_section_renders_every_condition_decision_and_both_figures(
    tmp_path: Path,
) -> None:
    """The fleet section from the decision stage's tables and one comparison per run, as
    Markdown and as the HTML report's section file: the three sides of every count, the
    router that served, each decision, both figures as SVG, the backend named."""
    import json

    import pandas as pd

    from rearrival.judge.fleet_study import CONDITIONS_FILE, DECISIONS_FILE, condition_row
    from rearrival.report.engine import engine_html
    from rearrival.report.fleet import FleetReportInputs, fleet_section
    from rearrival.report.sections import read_section, section_markdown, write_section

    label = "consistent_hash-small_pool"
    counts = _counts(3, 900)
    registered = {
        "policy": "consistent_hash",
        "configuration": "small_pool",
        "router_model": "session_affinity",
        "counts": counts.as_dict(),
    }
    decided = tmp_path / "decisions"
    decided.mkdir()
    row = condition_row(0, label, registered, counts, _counts(4, 950))
    pd.DataFrame([row | {"agreeing": 9, "timing_dependent": 1, "predictor_errors": 0}]).to_csv(
        decided / CONDITIONS_FILE, index=False
    )
    pd.DataFrame(
        [
            {
                "replicate": 0,
                "name": "x",
                "statement": "affinity keeps prefixes",
                "predicted": True,
                "observed": False,
                "verdict": FAILS,
                "prediction_right": False,
                "evidence": "observed 4 vs 3",
            }
        ]
    ).to_csv(decided / DECISIONS_FILE, index=False)
    comparison = tmp_path / "compare"
    comparison.mkdir()
    pd.DataFrame(
        {
            "round": [0, 1],
            "replica": [0, 1],
            "send_s": [0.1, 1.0],
            "cached_tokens_observed": [0, 256],
            "cached_tokens_predicted": [0, 320],
            "verdict": ["agree", "timing-dependent"],
            "ttft_s_observed": [0.2, 0.3],
            "ttft_s_predicted": [0.01, 0.02],
        }
    ).to_parquet(comparison / "requests.parquet")
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(
        json.dumps(
            {
                "fleet": {
                    "router": {
                        "name": "vllm-router",
                        "version": "0.1.17",
                        "policy": "consistent_hash",
                    },
                    "servers": [{}, {}],
                },
                "configuration": {"num_blocks": 40},
                "software": {"vllm": "0.32.0"},
                "engine": {"device": "cpu"},
                "started_at": "2026-12-03T18:00:00+00:00",
            }
        )
    )
    record = tmp_path / "prereg.json"
    record.write_text(
        json.dumps(
            {"study": "fleet_open", "commit": "a" * 40, "committed_at": "2026-12-03T17:59:00"}
        )
    )
    inputs = FleetReportInputs(
        "what it asks", decided, record, {f"r0/{label}": comparison}, {f"r0/{label}": run}
    )
    section = fleet_section(inputs)
    assert section.backend == "vLLM 0.32.0 (cpu) behind vllm-router 0.1.17"
    text = section_markdown(section, "fleet/figures", level=1)
    assert "vllm-router 0.1.17" in text and "session_affinity" in text
    assert "3 / 3 / 4 of 6" in text  # lost re-arrivals: registered / re-run / vLLM
    decision_row = next(line for line in text.splitlines() if "affinity keeps" in line)
    assert [c.strip() for c in decision_row.split("|")][3:6] == ["holds", "fails", "wrong"]
    figures = tmp_path / "reports" / "fleet" / "figures"
    written = write_section(section, tmp_path / "reports" / "fleet" / "section.json", figures)
    assert sorted(p.name for p in written) == ["fleet_cached_tokens.svg", "fleet_ttft.svg"]
    for figure in written:
        assert f"(fleet/figures/{figure.name})" in text
        assert figure.read_text().startswith("<svg")
    page = engine_html(
        load_study_config(FLEET_YAML),
        [read_section(tmp_path / "reports" / "fleet" / "section.json")],
    )
    assert 'id="section-fleet"' in page and page.count("<svg") == 2
    assert "affinity keeps prefixes" in page and "vllm-router 0.1.17" in page
