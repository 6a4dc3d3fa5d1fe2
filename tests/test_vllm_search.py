"""The search and the advice on the vLLM substrate (docs/DESIGN.md §15 "Search and
advice"): every configuration scored exactly as its own ``simulate_vllm`` call, the
space counted and filtered with counts, the structural upper bound against the
simulated hit rate, the baseline and the profile named, the verbs on the shipped
TraceLab sample, and one-line refusals for bad options."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from importlib import resources
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import CONFIG_FILE, TRACELAB_SAMPLE
from typer.testing import CliRunner
from vllm_cases import random_plan

from rearrival.cli import app
from rearrival.config.search import SearchError, SearchSettings
from rearrival.errors import RearrivalError
from rearrival.limits import MAX_CANDIDATES, MAX_KV_BLOCKS, LimitError
from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.profile import GIB
from rearrival.model.cost.vllm_profile import (
    COEFFICIENTS,
    DEFAULT_VLLM_PROFILE,
    VllmProfileError,
    VllmStepCost,
    load_vllm_profile,
    shipped_vllm_profile,
)
from rearrival.model.simulator.vllm.inputs import vllm_inputs
from rearrival.model.simulator.vllm.sim import simulate_vllm
from rearrival.search.inputs import PlanKey
from rearrival.search.outputs import OutputPaths
from rearrival.search.vllm.defaults import (
    BATCH_DEFAULTS,
    BLOCK_SIZE,
    default_capture_sizes,
)
from rearrival.search.vllm.evaluate import OUTCOME_COLUMNS, evaluate, outcome
from rearrival.search.vllm.prefix_bound import prefix_bound
from rearrival.search.vllm.run import Inputs, resolve_baseline, search_vllm
from rearrival.search.vllm.space import VllmAxes, build_space, parse_capture_sets

runner = CliRunner()
STEP_COST = VllmStepCost(0.004, 2e-4, 3e-5, 1e-8)


def profile_text(device: str = "cpu", memory: bool = True, device_gib: float = 0.25) -> str:
    text = f"""\
profile_version: "vllm-test-{device}/1"
substrate: vllm
model_id: "rearrival/tiny-qwen3"
vllm_version: "0.32.0"
device: {device}
step_cost:
  base_s: {{value: 0.004, provenance: "test"}}
  per_decode_token_s: {{value: 2.0e-4, provenance: "test"}}
  per_prefill_token_s: {{value: 3.0e-5, provenance: "test"}}
  per_kv_token_s: {{value: 1.0e-8, provenance: "test"}}
kv:
  bytes_per_token: {{value: 1024, provenance: "2 x 2 layers x 1 kv head x 64 x 4 B"}}
"""
    if memory:
        text += f"""\
memory:
  device_gib: {{value: {device_gib}, provenance: "test"}}
  weights_gib: {{value: 0.002, provenance: "test"}}
  overhead_gib: {{value: 0.001, provenance: "test"}}
  num_devices: {{value: 1, provenance: "test"}}
"""
    return text


@pytest.fixture
def cpu_profile(tmp_path: Path) -> Path:
    path = tmp_path / "cpu.yaml"
    path.write_text(profile_text())
    return path


def plans(seed: int, count: int = 3, sessions: int = 6) -> list:
    rng = random.Random(seed)
    return [
        random_plan(rng, sessions=sessions, rounds=4, prompt=600, new=200, gen=60)
        for _ in range(count)
    ]


def keyed(search: list, evaluation: list) -> list:
    out = [(PlanKey("search", p.n, i, 0), p) for i, p in enumerate(search)]
    return out + [(PlanKey("evaluation", p.n, i, 0), p) for i, p in enumerate(evaluation)]


def test_every_configuration_is_scored_as_its_own_simulation():
    """Exact re-use (max_num_seqs at or above N, equal padding, pools that never evict)
    changes no number: each row equals the configuration's own simulate_vllm call."""
    inputs = plans(1)
    ample = max(vllm_inputs(p, 16).never_evicting_blocks() for p in inputs)
    need = 1 + max(vllm_inputs(p, 16).blocks_needed() for p in inputs)
    cands = [
        VllmConfiguration(sizes, seqs, num_blocks=k, block_size=16, max_num_batched_tokens=t)
        for k in (need, need + 40, ample, ample + 500)
        for seqs in (2, 6, 8, 64)
        for t in (64, 512)
        for sizes in ((), (1, 2, 4, 8), (1, 2, 3, 4, 6, 8), (1, 2, 4, 8, 16))
        if t >= seqs
    ]
    frame, simulations = evaluate(cands, keyed(inputs, []), STEP_COST)
    assert simulations < len(cands) * len(inputs)  # some runs stood in for others
    assert (frame["preemptions"] > 0).any() and (frame["re_arrivals_lost"] > 0).any()
    for cand in cands:
        rows = frame[frame["candidate"] == cand.id].sort_values("plan")
        for (_, row), plan in zip(rows.iterrows(), inputs, strict=True):
            direct = outcome(simulate_vllm(plan, cand, STEP_COST, core="compiled"))
            assert tuple(row[list(OUTCOME_COLUMNS)]) == tuple(direct), cand.id


def test_the_upper_bound_holds_and_is_reached_on_a_pool_that_never_evicts():
    for seed in range(12):
        for plan in plans(seed, count=2):
            for bs in (16, 32):
                bound = prefix_bound(plan, bs)
                inputs = vllm_inputs(plan, bs)
                for pool in (inputs.blocks_needed() + 1, 2 * inputs.blocks_needed() + 3):
                    cfg = VllmConfiguration((), 4, num_blocks=pool, block_size=bs)
                    summary = simulate_vllm(plan, cfg, STEP_COST).summary()
                    assert summary["cached_tokens"] <= bound.cacheable_tokens
                ample = replace(cfg, num_blocks=inputs.never_evicting_blocks())
                summary = simulate_vllm(plan, ample, STEP_COST).summary()
                assert summary["cached_tokens"] == bound.cacheable_tokens
                assert summary["recomputed_prefill_tokens"] == 0
                assert summary["re_arrivals_lost"] == summary["preemptions"] == 0
                assert bound.prompt_tokens == sum(sum(s.prompts()) for s in plan.sessions)


def test_the_filters_count_what_they_remove(cpu_profile):
    profile = load_vllm_profile(cpu_profile)
    inputs = plans(3)
    need = 1 + max(vllm_inputs(p, 32).blocks_needed() for p in inputs)
    block_gib = 1024 * 32 / GIB
    holds = int((0.25 - 0.003) // block_gib)  # device less weights and overhead
    given = (need - 1, need, need + 7, holds, holds + 1, 3 * holds)
    axes = VllmAxes.for_profile(
        profile,
        block_sizes=(32,),
        max_num_seqs=(4, 16, 64),
        token_budgets=(8, 32, 2048),
        num_blocks=given,
    )
    space = build_space(axes, profile, inputs, inputs)
    assert space.enumerated == axes.enumerated() == 6 * 3 * 3
    per_pool = 9 - 3  # budget 8 below 16 and 64, budget 32 below 64: 3 pairs refused
    assert space.excluded_by_budget == 3 * 6
    assert space.excluded_by_pool_too_small == per_pool * 1
    assert space.excluded_by_memory == per_pool * 2
    assert len(space.candidates) == per_pool * 3
    assert {c.num_blocks for c in space.candidates} == {need, need + 7, holds}
    off = build_space(replace(axes, memory_filter=False), profile, inputs, inputs)
    assert off.excluded_by_memory == 0 and len(off.candidates) == per_pool * 5


def test_pools_derived_from_memory_span_the_longest_request_to_what_matters(cpu_profile):
    profile = load_vllm_profile(cpu_profile)
    inputs = plans(4)
    axes = VllmAxes.for_profile(profile, block_sizes=(16,), pool_sizes=6)
    space = build_space(axes, profile, inputs, inputs[:1])
    pools = space.pools[16]
    r = space.ranges[16]
    assert pools[0] == r.smallest == 1 + max(vllm_inputs(p, 16).blocks_needed() for p in inputs)
    assert r.never_evicting == vllm_inputs(inputs[0], 16).never_evicting_blocks()
    assert pools[-1] == min(r.never_evicting, r.memory_holds) and len(pools) <= 6
    assert list(pools) == sorted(set(pools))
    tight = load_vllm_profile(cpu_profile)
    tight = replace(tight, memory=replace(tight.memory, device_gib=0.003 + 100 * 16 * 1024 / GIB))
    capped = build_space(axes, tight, inputs, inputs[:1])
    assert capped.ranges[16].memory_holds == 100
    if capped.ranges[16].smallest <= 100:
        assert capped.pools[16][-1] == 100


def test_the_space_is_counted_and_refused_before_any_plan_is_drawn(cpu_profile):
    profile = load_vllm_profile(cpu_profile)
    big = VllmAxes.for_profile(
        profile,
        max_num_seqs=tuple(range(1, 201)),
        token_budgets=tuple(range(1000, 1051)),
        pool_sizes=16,
    )
    assert big.enumerated() == 200 * 51 * 16 > MAX_CANDIDATES
    with pytest.raises(LimitError, match="100,000"):
        big.check_bound()
    with pytest.raises(SearchError, match="every token budget"):
        VllmAxes.for_profile(profile, max_num_seqs=(64,), token_budgets=(32,)).check_bound()


def test_vllm_default_capture_sizes_follow_its_rule():
    assert default_capture_sizes(8, 2048) == (1, 2, 4, 8, 16)
    assert default_capture_sizes(6, 2048) == (1, 2, 4, 6, 8)
    assert default_capture_sizes(256, 2048) == (1, 2, 4, *range(8, 256, 8), *range(256, 513, 16))
    assert default_capture_sizes(64, 40) == (1, 2, 4, 8, 16, 24, 32, 40)
    assert parse_capture_sets("none; default;1,2,4,8") == ("none", "default", "1,2,4,8")
    with pytest.raises(SearchError, match="--capture-sizes"):
        parse_capture_sets("4,2")


def small_settings() -> SearchSettings:
    return SearchSettings(n=(6,), seeds=2, blocks=1, restricted_n=(), top=3)


def test_a_search_writes_the_same_bytes_twice_and_names_profile_and_baseline(cpu_profile, tmp_path):
    profile = load_vllm_profile(cpu_profile)
    inputs = Inputs(keyed(plans(5, 2), plans(6, 2)), True, small_settings(), {"n": [6]})
    axes = VllmAxes.for_profile(profile, block_sizes=(32,), pool_sizes=4)
    first = search_vllm(inputs, axes, profile, OutputPaths.under(tmp_path / "a"))
    search_vllm(inputs, axes, profile, OutputPaths.under(tmp_path / "b"))
    for name in ("scores.parquet", "selected.json", "summary.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert first["profile"]["sha256"] == profile.sha256 and first["profile"]["device"] == "cpu"
    assert "CPU seconds" in first["profile_note"] and "not GPU seconds" in first["profile_note"]
    seqs, budget = BATCH_DEFAULTS["cpu"]
    base = first["baseline"]
    assert (base["batch_size"], base["max_num_batched_tokens"], base["block_size"]) == (
        seqs,
        budget,
        BLOCK_SIZE["cpu"],
    )
    assert base["num_blocks"] == int((0.25 - 0.003) // (1024 * 128 / GIB))
    table = json.loads((tmp_path / "a" / "summary.json").read_text())["top"]
    assert table[0]["id"] == first["selected"]["id"]


def test_a_gpu_profile_searches_capture_sizes_and_its_baseline_is_vllms_default(tmp_path):
    path = tmp_path / "gpu.yaml"
    path.write_text(profile_text("gpu", device_gib=0.5))
    profile = load_vllm_profile(path)
    inputs = Inputs(keyed(plans(7, 2), plans(8, 2)), True, small_settings(), {"n": [6]})
    axes = VllmAxes.for_profile(
        profile, max_num_seqs=(4, 8), capture_sets=("none", "default"), pool_sizes=3
    )
    summary = search_vllm(inputs, axes, profile, OutputPaths.under(tmp_path / "s"))
    base = summary["baseline"]
    assert base["buckets"] == list(default_capture_sizes(*BATCH_DEFAULTS["gpu"]))
    assert base["block_size"] == BLOCK_SIZE["gpu"] == 16
    assert "asynchronous scheduling" in summary["profile_note"]
    assert "eager_unpriced" in {c["code"] for c in summary["caveats"]}
    pools = summary["candidates"]["pools"]["16"]
    assert summary["candidates"]["searched"] == len(pools) * 2 * 3 * 2  # seqs, budgets, sets
    table = pd.read_parquet(tmp_path / "s" / "scores.parquet")
    for row in table.itertuples():
        sizes = default_capture_sizes(row.max_num_seqs, row.max_num_batched_tokens)
        assert row.capture_sizes in ("none", ",".join(map(str, sizes)))
        assert row.short_id.endswith(":default") == (row.capture_sizes != "none")


def test_without_a_memory_block_pools_must_be_given(tmp_path):
    path = tmp_path / "bare.yaml"
    path.write_text(profile_text(memory=False))
    profile = load_vllm_profile(path)
    inputs = plans(9, 1)
    with pytest.raises(SearchError, match="--num-blocks"):
        build_space(VllmAxes.for_profile(profile), profile, inputs, inputs)
    need = 1 + max(vllm_inputs(p, 128).blocks_needed() for p in inputs)
    space = build_space(
        VllmAxes.for_profile(profile, num_blocks=(need, 2 * need)), profile, inputs, inputs
    )
    assert not space.memory_filter and space.excluded_by_memory == 0


def test_the_memory_block_is_read_with_its_provenance(tmp_path, cpu_profile):
    profile = load_vllm_profile(cpu_profile)
    assert profile.memory.device_gib == 0.25 and profile.memory.num_devices == 1
    assert profile.memory.overhead_gib == 0.001
    for broken, field in (
        (profile_text().replace('weights_gib: {value: 0.002, provenance: "test"}', ""), "weights"),
        (profile_text().replace("num_devices: {value: 1,", "num_devices: {value: 0,"), "num_dev"),
        (
            profile_text().replace(
                'device_gib: {value: 0.25, provenance: "test"}', "device_gib: {value: 0.25}"
            ),
            "provenance",
        ),
    ):
        path = tmp_path / "broken.yaml"
        path.write_text(broken)
        with pytest.raises(VllmProfileError) as caught:
            load_vllm_profile(path)
        assert str(path) in str(caught.value) and field in str(caught.value)


def refusal(args: list[str], *needles: str) -> str:
    result = runner.invoke(app, args)
    assert isinstance(result.exception, RearrivalError), result.output
    message = str(result.exception)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message
    return message


def test_bad_options_are_one_line_refusals(cpu_profile, tmp_path):
    out = ["--out", str(tmp_path / "o"), "--config", str(CONFIG_FILE)]
    vllm = ["--substrate", "vllm", "--profile", str(cpu_profile)]
    refusal(["search", *out, "--substrate", "tpu"], "--substrate", "rbln, vllm")
    refusal(["search", *out, "--num-blocks", "512"], "--num-blocks", "--substrate vllm")
    refusal(["search", *out, *vllm, "--batch-sizes", "8"], "--batch-sizes", "--substrate rbln")
    refusal(["search", *out, *vllm, "--capture-sizes", "1,2,4"], "CPU profile", "CUDA graphs")
    refusal(["search", *out, *vllm, "--capture-sizes", "x"], "--capture-sizes")
    refusal(["search", *out, *vllm, "--baseline", "vllm:8:x"], "--baseline", "vllm:16:512x16")
    refusal(["search", *out, *vllm, "--pool-sizes", "65"], "--pool-sizes", "64")
    refusal(["search", *out, *vllm, "--max-num-seqs", "2048"], "--max-num-seqs", "1,024")
    refusal(["search", *out, *vllm, "--num-blocks", "2000000"], "--num-blocks", "1,048,576")
    refusal(["search", *out, *vllm, "--num-blocks", "4,8"], "no candidate left", "longest")
    refusal(
        ["search", *out, "--substrate", "vllm"],
        f"{DEFAULT_VLLM_PROFILE}: the vLLM profile has no memory block",
        "--num-blocks",
    )
    refusal(["advise", *vllm, "--search", str(tmp_path)], "--search")
    refusal(["advise", "--max-model-len", "4096"], "--max-model-len", "--substrate vllm")
    result = runner.invoke(
        app,
        [
            "search",
            *vllm,
            "--config",
            str(CONFIG_FILE),
            "shard",
            "--plans",
            "x",
            "--shard",
            "0",
            "--out",
            "y",
        ],
    )
    assert "one process" in str(result.exception)


def test_the_shipped_vllm_profile_is_the_cpu_calibration_of_the_tiny_model():
    """What ships is a calibration's own output: CPU seconds of the random-weight tiny
    model on vLLM's CPU build, every coefficient with its interval and provenance."""
    profile = shipped_vllm_profile()
    assert profile.name == DEFAULT_VLLM_PROFILE
    assert (profile.device, profile.vllm_version, profile.model_id) == (
        "cpu",
        "0.32.0",
        "tiny-qwen3",
    )
    assert "not GPU seconds" in profile.seconds_note()
    tree = yaml.safe_load(
        resources.files("rearrival.data").joinpath(DEFAULT_VLLM_PROFILE).read_text()
    )
    for name in COEFFICIENTS:
        entry = tree["step_cost"][name]
        assert entry["ci"][0] <= entry["value"] <= entry["ci"][1], name
        assert entry["provenance"].startswith("fitted:")
    assert tree["provenance"]["command"].startswith("rearrival calibrate --backend vllm")
    assert tree["engine"]["distributions"]["torch"].endswith("+cpu")
    assert "dummy (random) weights" in tree["what"] and "not GPU timings" in tree["what"]
    assert set(tree["validation"]) >= {"simulated_relative_error", "priced_relative_error"}


def test_the_search_runs_on_the_shipped_sample(cpu_profile, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    imported = runner.invoke(
        app,
        [
            "plans",
            "from-trace",
            str(TRACELAB_SAMPLE),
            "--out",
            "results/sample",
            "--token-scale",
            "0.15",
            "--time-origin",
            "zero",
        ],
    )
    assert imported.exit_code == 0, imported.output
    result = runner.invoke(
        app,
        [
            "search",
            "--substrate",
            "vllm",
            "--plans",
            "results/sample",
            "--profile",
            str(cpu_profile),
            "--out",
            "results/vllm",
            "--config",
            str(CONFIG_FILE),
        ],
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert "searched" in lines[-2] and "vLLM configurations" in lines[-2]
    assert lines[-1].startswith("selected vllm:")
    summary = json.loads(Path("results/vllm/summary.json").read_text())
    assert summary["inputs"]["n"] == [2] and summary["profile"]["device"] == "cpu"
    assert "profile" in result.stderr and "CPU seconds" in result.stderr
    assert len(lines[-2].removeprefix("results/vllm: ")) <= 100 and len(lines[-1]) <= 100
    plans_args = ["--plans", "results/sample", "--profile", str(cpu_profile)]
    plans_args += ["--config", str(CONFIG_FILE), "--json"]
    advised = runner.invoke(app, ["advise", "--substrate", "vllm", *plans_args])
    assert advised.exit_code == 0, advised.output
    advice = json.loads(advised.stdout)
    assert "not held out" in advice["inputs"] and advice["saving_spread"] is None
    assert advice["selected"]["configuration"]["id"] == summary["selected"]["id"]
    # issue 36: --trace on the same file and options gives the --plans answer
    trace_args = ["--trace", str(TRACELAB_SAMPLE), "--token-scale", "0.15", "--time-origin"]
    on_trace = runner.invoke(
        app, ["advise", "--substrate", "vllm", *trace_args, "zero", *plans_args[2:]]
    )
    assert on_trace.exit_code == 0, on_trace.output
    traced = json.loads(on_trace.stdout)
    for key in ("n", "selected", "baseline", "predicted_saving", "recommendation", "pools"):
        assert traced[key] == advice[key], key
    # issue 36: what to paste, in vLLM's own knob names
    deployed = VllmConfiguration.from_id(advice["recommendation"]["id"])
    assert advice["deploy"]["knobs"]["max_num_seqs"] == deployed.batch_size
    assert advice["deploy"]["knobs"]["num_gpu_blocks_override"] == deployed.num_blocks
    assert (
        advice["selected"]["configuration"]["vllm"]["max_num_seqs"]
        == summary["selected"]["batch_size"]
    )
    command = advice["deploy"]["commands"][0]
    assert command.startswith(
        f"vllm serve rearrival/tiny-qwen3 --max-num-seqs {deployed.batch_size}"
    )
    text = runner.invoke(app, ["advise", "--substrate", "vllm", *plans_args[:-1]]).stdout
    assert f"```sh\n{command}\n```" in text and "num_gpu_blocks_override=" in text


def test_advise_runs_on_the_shipped_sample_and_shows_the_bound_beside_the_hit_rate(
    cpu_profile,
):
    args = [
        "advise",
        "--substrate",
        "vllm",
        "--trace",
        str(TRACELAB_SAMPLE),
        "--token-scale",
        "0.15",
        "--profile",
        str(cpu_profile),
        "--config",
        str(CONFIG_FILE),
        "--resamples",
        "20",
        "--workload",
        "drawn",
    ]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    advice = json.loads(result.stdout)
    rows = advice["pools"]
    assert len(rows) >= 2 and [r["configuration"]["num_blocks"] for r in rows] == sorted(
        r["configuration"]["num_blocks"] for r in rows
    )
    for row in rows:
        assert row["hit_rate"] <= row["upper_bound"] + 1e-12
        assert row["fits_memory"] is True
    assert rows[0]["recomputed_prefill_tokens"] > rows[-1]["recomputed_prefill_tokens"]
    assert advice["saving_spread"]["resamples"] == 20
    assert advice["profile"]["device"] == "cpu" and "not GPU seconds" in advice["profile_note"]
    assert advice["selected"]["headroom_gib_per_device"] >= 0
    text = runner.invoke(app, args).stdout
    assert "device CPU s" in text and "upper bound" in text and "not GPU seconds" in text
    assert "other overhead (0.001 GiB)" in text and advice["profile_memory"]["num_devices"] == 1


def test_a_baseline_larger_than_the_pool_bound_is_simulated_at_it(tmp_path):
    """All of 72 GiB holds more 16-token blocks of the tiny model than a pool may have;
    beyond the never-evicting pool nothing changes, so the bound stands in and says so."""
    path = tmp_path / "h100.yaml"
    path.write_text(profile_text("gpu", device_gib=72.0))
    profile = load_vllm_profile(path)
    inputs = plans(10, 2)
    space = build_space(VllmAxes.for_profile(profile, pool_sizes=2), profile, inputs, inputs)
    base, why = resolve_baseline(profile, space, inputs, None)
    assert base.num_blocks == MAX_KV_BLOCKS and "never evicts on these inputs" in why
    given, why = resolve_baseline(profile, space, inputs, "vllm:8:4096x16:512")
    assert given.num_blocks == 4096 and why == "--baseline vllm:8:4096x16:512"
