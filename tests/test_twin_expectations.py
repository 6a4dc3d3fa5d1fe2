"""The mechanisms behind the scorecard's "expected on the emulated twin" rows
(``Finding.twin``): each reason is a property of the twin checked here, not a verdict
typed in."""

from __future__ import annotations

from dataclasses import replace

from rearrival.measure.emulate.driver import run_emulated
from rearrival.measure.emulate.truth import default_truth
from rearrival.model.configuration import RblnConfiguration
from rearrival.model.plans.plangen import derive_seed, generate_plan
from rearrival.report.findings.mechanisms import GRID_STEPS_ON_TWIN

BASELINE = RblnConfiguration((1, 2, 4, 8), 8)
GRID6 = RblnConfiguration((1, 2, 4, 6, 8), 8)
STUDY_SEED = 20240601


def control_steps(truth) -> list[tuple[int, int]]:
    """Decode steps of the control condition at N=6 on both grids, per replicate (10:
    with the twin's latency about 3 in 10 differ, so 3 replicates may show none)."""
    out = []
    for replicate in range(10):
        plan = generate_plan(6, study_seed=STUDY_SEED, replicate=replicate)
        seed = derive_seed(STUDY_SEED, replicate, 6, 0, "twin")
        out.append(
            tuple(
                run_emulated(plan, grid, variant="control", seed=seed, truth=truth).counts[
                    "decode_steps"
                ]
                for grid in (BASELINE, GRID6)
            )
        )
    return out


def test_the_twins_http_latency_makes_control_step_counts_move_with_the_grid() -> None:
    """grid_steps_feedback: with the twin's HTTP ingress and egress the control step
    counts differ between the grids; without them they agree in every replicate."""
    shipped = default_truth()
    assert shipped.ingress_median_s + shipped.egress_median_s > 0.1
    differ = sum(a != b for a, b in control_steps(shipped))
    assert differ > 0
    assert f"(in {differ} of 10 replicates at N=6)" in GRID_STEPS_ON_TWIN  # the reason's count
    no_http = replace(shipped, ingress_median_s=0.0, egress_median_s=0.0)
    assert all(a == b for a, b in control_steps(no_http))
