"""The predictor against the emulated substrate on the paper's validation design
(Section IV): three replicates, replicate-summed channel-A ratios, N = 6 and 8.

The emulator is richer than the predictor (noise, true f(b), immediate release, dummy
block, jitter), so these are real out-of-model checks, not identities.
"""

from __future__ import annotations

import pytest

from rearrival.judge.channels import channel_a, channel_b
from rearrival.measure.emulate.driver import run_emulated
from rearrival.measure.records import RunRecord
from rearrival.model.configuration import RblnConfiguration
from rearrival.model.plans.plangen import derive_seed, generate_plan
from rearrival.model.simulator.rbln.sim import SimConfig, simulate

BASELINE = RblnConfiguration((1, 2, 4, 8), 8)
MORE_SLOTS = RblnConfiguration((1, 2, 4, 8, 16), 16)
STUDY_SEED = 424242
REPLICATES = 3


def measured(plan, configuration, replicate):
    seed = derive_seed(STUDY_SEED, replicate, plan.n, 9, f"run:{configuration.batch_size}")
    run = run_emulated(plan, configuration, seed=seed)
    record = RunRecord(
        requests=run.requests,
        steps=run.steps,
        metrics=run.metrics,
        manifest={},
        server_log=None,
        path=None,
    )
    return channel_a(record).total_s, channel_b(record), run.counts


@pytest.fixture(scope="module", params=[6, 8])
def validation(request):
    n = request.param
    sums = {"pred": [0.0, 0.0], "a": [0.0, 0.0], "b": [0.0, 0.0], "hits": [0, 0]}
    re_arrivals = 0
    for replicate in range(REPLICATES):
        plan = generate_plan(n, study_seed=STUDY_SEED, replicate=replicate, block=9)
        for side, configuration in enumerate((BASELINE, MORE_SLOTS)):
            sums["pred"][side] += simulate(plan, SimConfig.of(configuration)).device_s
            a, b, counts = measured(plan, configuration, replicate)
            sums["a"][side] += a
            sums["b"][side] += b
            sums["hits"][side] += counts["reuse_hits"]
        re_arrivals += n
    return n, sums, re_arrivals


def test_prediction_error_within_the_confirmatory_tolerance(validation):
    _, sums, _ = validation
    predicted = sums["pred"][1] / sums["pred"][0]
    observed = sums["a"][1] / sums["a"][0]
    assert abs(observed - predicted) <= 0.03


def test_channels_agree_and_b_sits_a_few_percent_above_a(validation):
    _, sums, _ = validation
    ratio_a = sums["a"][1] / sums["a"][0]
    ratio_b = sums["b"][1] / sums["b"][0]
    assert abs(ratio_a - ratio_b) <= 0.02
    r_over_b = (sums["b"][0] - sums["a"][0]) / sums["b"][0]
    assert 0.01 <= r_over_b <= 0.06


def test_more_slots_recover_reuse(validation):
    n, sums, re_arrivals = validation
    assert sums["hits"][1] == re_arrivals
    if n == 8:
        assert sums["hits"][0] < re_arrivals
