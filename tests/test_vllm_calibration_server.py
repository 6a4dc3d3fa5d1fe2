"""The vLLM calibration on real vLLM servers (vLLM's CPU build, the shipped tiny-qwen3 with
random weights; docs/DESIGN.md §15, "Calibration"): a small calibration end to end in CI
(two short servers: the calibration plan and the held-out one), the full-size verb in the
slow tier. What is checked is what a run must give whatever the machine's speed: every
logged step reproduced by the replay with the log's own counts, every reported prefix hit
equal to the replay's, coefficients finite and >= 0, the held-out figure present, and a
profile the loader reads. Each run's server is stopped by the backend before it returns.

Without the vLLM environment (.venv-vllm, `make vllm-env`) the module skips, except
under CI (CI=true), where .ci/run builds it and its absence is a failure.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from vllm_env import BLOCK, cli, require_vllm

from rearrival.measure.calibration.vllm_design import VllmCalibrationDesign
from rearrival.measure.calibration.vllm_document import profile_document, write_profile
from rearrival.measure.calibration.vllm_drive import (
    VllmCalibration,
    VllmCalibrationSettings,
    calibrate_vllm,
)
from rearrival.measure.calibration.vllm_samples import LOGGED, replay_run
from rearrival.measure.records.contract import ROUND_COLUMN
from rearrival.measure.vllm.backend import VllmSettings
from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.vllm_profile import COEFFICIENTS, VllmStepCost, load_vllm_profile
from rearrival.model.plans.plan import load_plan

pytestmark = pytest.mark.timeout(900)
# Small knobs and a short design: about 200 steps of calibration plan, so the two runs
# take seconds beside their servers' starts.
SMALL_KNOBS = VllmConfiguration(
    (), 4, num_blocks=256, block_size=BLOCK, max_num_batched_tokens=256, name="small"
)
SMALL_DESIGN = VllmCalibrationDesign(cycles=1, decode_tokens=16, warmup_steps=8)


@pytest.fixture(scope="module")
def small_calibration(tmp_path_factory: pytest.TempPathFactory) -> VllmCalibration:
    require_vllm()
    settings = VllmCalibrationSettings(
        SMALL_KNOBS,
        VllmSettings(max_model_len=2048),
        SMALL_DESIGN,
        resamples=200,
        block_steps=16,
    )
    return calibrate_vllm(settings, tmp_path_factory.mktemp("vllm-calibration"))


def test_every_logged_step_is_replayed_with_the_logs_counts(small_calibration) -> None:
    for record in (small_calibration.calibration_run, small_calibration.validation_run):
        plan = load_plan(record.manifest["plan_path"])
        replay = replay_run(record, plan, SMALL_KNOBS)  # checks hits and preemptions too
        logged = record.steps[list(LOGGED)].astype("int64").to_numpy().tolist()
        assert [list(step.logged()) for step in replay.steps] == logged
        assert len(replay.steps) == len(record.steps) > 0
        reported = record.requests.sort_values(["session", ROUND_COLUMN])["cached_tokens"]
        assert list(replay.cached_tokens) == [int(x) for x in reported]
    samples = small_calibration.samples
    assert len(samples) == len(small_calibration.calibration_run.steps)
    assert (samples["context_read"] >= 0).all() and samples["context_read"].max() > 0


def test_the_fit_and_the_held_out_figure(small_calibration, tmp_path: Path) -> None:
    fit = small_calibration.fit
    for name in COEFFICIENTS:
        c = fit.coefficient(name)
        assert math.isfinite(c.value) and c.value >= 0, c
        assert 0 <= c.ci[0] <= c.ci[1] and math.isfinite(c.ci[1]), c
    assert fit.steps == len(small_calibration.samples) - SMALL_DESIGN.warmup_steps
    validation = small_calibration.validation
    assert validation.logged_s > 0 and validation.priced_s > 0 and validation.simulated_s > 0
    assert math.isfinite(validation.simulated_relative) and math.isfinite(
        validation.priced_relative
    )
    document = profile_document(small_calibration, command=["rearrival"], measured_at="now")
    profile = load_vllm_profile(write_profile(document, tmp_path / "p.yaml"))
    written = VllmStepCost(*(document["step_cost"][n]["value"] for n in COEFFICIENTS))
    assert profile.device == "cpu" and profile.step_cost == written
    assert document["engine"]["knobs"]["capture_sizes"] == "none"  # CPU: no graphs, none invented


@pytest.mark.slow
def test_the_calibrate_verb_at_full_size(tmp_path: Path) -> None:
    require_vllm()
    out = tmp_path / "profile.yaml"
    done = cli("calibrate", "--backend", "vllm", "--out", str(out), timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith(f"{out}: vLLM step cost on cpu from ")
    document = yaml.safe_load(out.read_text())
    assert document["fit"]["design"]["cycles"] == VllmCalibrationDesign().cycles
    assert [r["role"] for r in document["runs"]] == ["calibration", "validation"]
    profile = load_vllm_profile(out)
    assert all(math.isfinite(x) and x >= 0 for x in profile.step_cost.as_tuple())
    assert (tmp_path / "profile-calibration" / "vllm_steps.parquet").is_file()
