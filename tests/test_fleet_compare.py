"""`rearrival compare` on a fleet run, without servers (README "A study on a real fleet"):
a run record whose observations are the fleet predictor's own agrees on every request; one
request whose replica's pool had evicted nothing but whose cached tokens differ is a
predictor error (exit 1, the files written); a single-server run is refused as a fleet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fleet_synthetic import synthetic_fleet_run
from typer.testing import CliRunner

from rearrival.cli import app
from rearrival.judge.fleet_agreement import compare_fleet_run, fleet_placement
from rearrival.judge.vllm_agreement import AgreementError, PredictorBugWarning
from rearrival.measure.records import read_run
from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.vllm_profile import load_vllm_profile
from rearrival.model.plans.plan import MultiRoundSession, Plan, PlanMeta, Round, write_plan

PROFILE = Path(__file__).parents[1] / "src/rearrival/data/profile_vllm_tiny_qwen3_cpu.yaml"
CONFIGURATION = VllmConfiguration(
    (), 4, num_blocks=128, block_size=32, max_num_batched_tokens=2048, name="baseline"
)
PLAN = Plan(
    tuple(
        MultiRoundSession(
            i, (Round(200 + 40 * i, 8, 0.3), Round(50, 6, 0.2), Round(20, 4)), 0.3 * i
        )
        for i in range(4)
    ),
    PlanMeta(seed=7, n=4),
)


def _fleet_run(tmp_path: Path, bump: tuple[int, int] | None = None) -> Path:
    """A sealed fleet run whose observations are the predictor's on ``session_affinity``;
    ``bump`` adds one cached token to that (session, round)."""
    plan_path = write_plan(PLAN, tmp_path / "plan.json")
    out = tmp_path / ("bumped" if bump else "run")
    profile = load_vllm_profile(PROFILE)
    return synthetic_fleet_run(out, PLAN, plan_path, CONFIGURATION, profile, bump=bump)


def test_a_fleet_run_that_is_the_prediction_agrees_on_every_request(tmp_path: Path) -> None:
    record = read_run(_fleet_run(tmp_path))
    agreement = compare_fleet_run(record, PLAN, load_vllm_profile(PROFILE), "plan.json")
    summary = agreement.summary()
    assert summary["agreeing"] == summary["requests"] == PLAN.requests
    assert [r.replica for r in agreement.requests] == fleet_placement(record)
    assert summary["run"]["policy"] == "consistent_hash"
    assert summary["re_arrivals_lost_observed"] == summary["re_arrivals_lost_predicted"] == 0


def test_a_difference_where_nothing_was_evicted_is_a_predictor_error(tmp_path: Path) -> None:
    run = _fleet_run(tmp_path, bump=(2, 1))
    with pytest.warns(PredictorBugWarning, match="s2r1"):
        agreement = compare_fleet_run(read_run(run), PLAN, load_vllm_profile(PROFILE), "plan")
    assert agreement.summary()["predictor_errors"] == ["s2r1"]
    out = tmp_path / "cmp"
    result = CliRunner().invoke(
        app, ["compare", "--run", str(run), "--profile", str(PROFILE), "--out", str(out)]
    )
    assert result.exit_code == 1, result.output
    assert "PREDICTOR BUG" in result.output
    assert json.loads((out / "summary.json").read_text())["predictor_errors"] == ["s2r1"]


def test_a_run_without_replicas_is_not_compared_as_a_fleet(tmp_path: Path) -> None:
    record = read_run(_fleet_run(tmp_path))
    single = record.requests.drop(columns=["replica", "request_id"])
    with pytest.raises(AgreementError, match="not a fleet run"):
        fleet_placement(type(record)(**{**record.__dict__, "requests": single}))
