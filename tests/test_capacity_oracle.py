"""The capacity answer held to vLLM's own scheduler (docs/DESIGN.md §17 "Capacity"): for
each row of the issue's command on a small pool, R copies of vLLM 0.32.0's Scheduler behind
the row's router (the fleet oracle, ``rearrival.model.simulator.vllm.oracle``), on the plan
that `plans open` makes at the reported rate, meet the SLO with exactly the row's
attainment, and at rate x (1 + 2 x tolerance) they do not. Without the vLLM environment the
test skips, except under CI, where that is a failure."""

from __future__ import annotations

from pathlib import Path

from test_capacity import (  # noqa: F401 (module fixtures)
    HORIZON,
    SEED,
    SLO,
    STEP_COST,
    TOLERANCE,
    WARMUP,
    _rows,
    capacity_dir,
    pool_file,
)
from typer.testing import CliRunner
from vllm_env import require_vllm

from rearrival.cli import app
from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.vllm_profile import parse_step_cost
from rearrival.model.fleet.latency import Slo, attainment, measured
from rearrival.model.fleet.records import RequestOutcome
from rearrival.model.plans.plan import Plan, load_plan
from rearrival.model.simulator.vllm import oracle


def _plans_open(pool: Path, rate: str, out: Path) -> Plan:
    """The plan `rearrival plans open` writes at ``rate`` (the text a row prints)."""
    made = CliRunner().invoke(
        app,
        ["plans", "open", "--pool", str(pool), "--rate", rate, "--horizon", HORIZON,
         "--seed", SEED, "--out", str(out)],
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    return load_plan(out)


def _attainment(plan: Plan, answer: dict) -> float:
    """SLO attainment over the measured window of vLLM's own per-request times."""
    gen = {(s.session, k): r.gen_tokens for s in plan.sessions for k, r in enumerate(s.rounds)}
    outcomes = [
        RequestOutcome(
            row["session"],
            row["round"],
            row["replica"],
            0,
            gen[(row["session"], row["round"])],
            row["cached_tokens"],
            row["preemptions"],
            row["arrival_s"],
            row["first_scheduled_s"],
            row["first_token_s"],
            row["finish_s"],
        )
        for row in answer["requests"]
    ]
    window = measured(outcomes, float(WARMUP), float(HORIZON))
    return attainment(window, Slo.parse(SLO, 0.9))


def test_each_rows_goodput_meets_the_slo_on_vllms_own_schedulers(request, tmp_path):
    require_vllm()
    out = request.getfixturevalue("capacity_dir")  # test_capacity's module fixtures
    pool = request.getfixturevalue("pool_file")
    cost = parse_step_cost(STEP_COST)
    cases, plans, rows = [], [], _rows(out / "capacity.csv")
    for i, row in enumerate(rows):
        configuration = VllmConfiguration.from_id(row["configuration"])
        above = repr(float(row["goodput_rate"]) * (1 + 2 * TOLERANCE))
        for kind, rate in (("at", row["goodput_rate"]), ("above", above)):
            plan = _plans_open(pool, rate, tmp_path / f"plan-{i}-{kind}.json")
            plans.append(plan)
            cases.append(
                oracle.fleet_case(
                    f"{i}-{kind}", plan, configuration, cost, int(row["replicas"]), row["router"]
                )
            )
    answers = oracle.run_oracle(cases)["results"]
    for i, row in enumerate(rows):
        at, above = (_attainment(plans[2 * i + j], answers[2 * i + j]) for j in (0, 1))
        where = f"{row['replicas']} x {row['router']} at {row['goodput_rate']}"
        assert at == float(row["attainment"]) >= 0.9, where
        assert above < 0.9, where
