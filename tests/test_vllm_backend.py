"""The vllm backend on a real vLLM server (vLLM's CPU build, the shipped tiny-qwen3 with
random weights): plans through `rearrival run --backend vllm`, reuse checked against
vLLM's own counter and the reuse rule of docs/DESIGN.md §15, the steps parsed from the
real log, and both channels. Each run starts a fresh server (40-90 s on two cores).

Without the vLLM environment (.venv-vllm, `make vllm-env`) the module skips, except
under CI (CI=true), where .ci/run builds it and its absence is a failure.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest
from vllm_env import (
    BLOCK,
    LinearStepCost,
    cli,
    manifest,
    multi_round_plan,
    require_vllm,
    two_round_plan,
)

from rearrival.config.served_model import shipped_model
from rearrival.judge.channels import channels, iteration_channel_a, union_length
from rearrival.measure.records import read_run
from rearrival.measure.records.contract import ROUND_COLUMN
from rearrival.model.plans.plan import Plan, write_plan

pytestmark = pytest.mark.timeout(900)
COST = LinearStepCost(base=1e-3, decode=2e-5, prefill=1e-6, kv=0.0)


@pytest.fixture(scope="module")
def vllm_ready() -> Path:
    return require_vllm()


def _run(tmp_path: Path, plan: Plan, name: str, *extra: str) -> Path:
    plan_path = write_plan(plan, tmp_path / f"{name}.json")
    out = tmp_path / name
    done = cli(
        "run",
        str(plan_path),
        "--backend",
        "vllm",
        "--out",
        str(out),
        "--max-model-len",
        "2048",
        "--block-size",
        str(BLOCK),
        "--num-blocks",
        "128",
        *extra,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert not out.with_name(f"{name}.server.log").exists()  # the run directory holds it
    return out


def _expected_hits(plan: Plan) -> dict[tuple[int, int], int]:
    """docs/DESIGN.md §15 rule 2 with room to spare (the pool never evicts here):
    round k+1 hits floor((P + G - 1) / bs) * bs of round k's prompt P and generation G."""
    hits = {}
    for s in plan.sessions:
        prompts = s.prompts()
        hits[(s.session, 0)] = 0
        for k in range(1, len(s.rounds)):
            previous = prompts[k - 1] + s.rounds[k - 1].gen_tokens - 1
            hits[(s.session, k)] = (previous // BLOCK) * BLOCK
    return hits


def _check_reuse(run_dir: Path, plan: Plan) -> None:
    record = read_run(run_dir)
    requests = record.requests
    cached = {
        (int(r["session"]), int(r[ROUND_COLUMN])): int(r["cached_tokens"])
        for r in requests.to_dict("records")
    }
    assert cached == _expected_hits(plan)
    counter = "vllm:prompt_tokens_cached_total"
    delta = record.metrics["after"][counter] - record.metrics["before"][counter]
    assert sum(cached.values()) == delta  # per request = vLLM's own counter, exactly
    assert (
        requests["computed_tokens"] == requests["prompt_tokens"] - requests["cached_tokens"]
    ).all()


def _check_steps(run_dir: Path) -> None:
    """The steps are the log's iterations and account for every token of the run."""
    record = read_run(run_dir)
    steps, requests = record.steps, record.requests
    assert list(steps["iteration"]) == list(range(len(steps)))
    assert steps["generation_tokens"].sum() == (requests["generated_tokens"] - 1).sum()
    preemptions = "vllm:num_preemptions_total"
    if record.metrics["after"][preemptions] == record.metrics["before"][preemptions]:
        assert steps["context_tokens"].sum() == requests["computed_tokens"].sum()
    else:  # a preempted request recomputes what it had
        assert steps["context_tokens"].sum() > requests["computed_tokens"].sum()
    assert (steps["n"] == steps["generation_requests"]).all()
    decoding = steps["generation_tokens"] > 0
    assert (steps.loc[decoding, "b"] == steps.loc[decoding, "generation_tokens"]).all()  # eager
    assert steps.loc[~decoding, "b"].isna().all()
    assert set(steps["kind"]) <= {"prefill", "decode", "mixed"}
    assert ((steps["elapsed_s"] > 0) & (steps["kv_cache_usage"] <= 1)).all()


def test_two_round_plan_on_a_real_vllm_server(vllm_ready: Path, tmp_path: Path) -> None:
    plan = two_round_plan()
    run_dir = _run(tmp_path, plan, "two-round")
    _check_reuse(run_dir, plan)
    _check_steps(run_dir)
    record = read_run(run_dir)
    # the first prompts (1,420 tokens) arrive together: a 512-token budget chunks them
    assert (record.steps["kind"] == "mixed").any()
    values = channels(record, step_cost=COST)
    steps = record.steps
    expected = math.fsum(
        COST.step_s(int(0 if math.isnan(float(b)) else b), int(p), 0)
        for b, p in zip(steps["b"].astype("float64"), steps["context_tokens"], strict=True)
    )
    assert values["a_s"] == pytest.approx(expected, rel=1e-12)
    assert values["a_elapsed_s"] == pytest.approx(steps["elapsed_s"].sum(), rel=1e-12)
    assert values["a_kv_tokens"] is None  # chunked: the log cannot say what each chunk read
    requests = record.requests
    intervals = zip(requests["send_s"], requests["complete_s"], strict=True)
    assert values["b_s"] == union_length(intervals)
    priced_kv = LinearStepCost(1e-3, 2e-5, 1e-6, kv=1e-9)
    with pytest.raises(ValueError, match="KV coefficient is zero"):
        iteration_channel_a(record, priced_kv)
    engine = manifest(run_dir)["engine"]
    assert engine["name"] == "vllm" and engine["version"] == "0.32.0"
    assert engine["device"] == "cpu" and engine["capture_sizes"] == "none"
    assert "--enforce-eager" in engine["argv"] and "--enable-prefix-caching" in engine["argv"]
    config = (shipped_model() / "config.json").read_bytes()
    assert engine["model"]["config_sha256"] == hashlib.sha256(config).hexdigest()
    assert "server.log" in manifest(run_dir)["files"]
    assert manifest(run_dir)["configuration"]["substrate"] == "vllm"


def test_multi_round_plan_on_a_real_vllm_server(vllm_ready: Path, tmp_path: Path) -> None:
    """Staggered sessions, one request in the engine at a time: every step belongs to the
    one running request, so the context it read is known step by step, an oracle for the
    run-level KV read channel A derives from the requests."""
    plan = multi_round_plan()
    run_dir = _run(tmp_path, plan, "multi-round")
    _check_reuse(run_dir, plan)
    _check_steps(run_dir)
    record = read_run(run_dir)
    steps = record.steps
    assert (steps[["context_requests", "generation_requests"]].sum(axis=1) == 1).all()
    oracle = 0
    context = 0
    ordered = record.requests.sort_values("send_s")
    queue = [(int(r.cached_tokens), int(r.computed_tokens)) for r in ordered.itertuples()]
    for step in steps.itertuples():
        if step.context_requests:
            cached, computed = queue.pop(0)
            assert step.context_tokens == computed
            oracle += cached
            context = cached + computed
        else:
            oracle += context
            context += 1
    kv_priced = LinearStepCost(1e-3, 2e-5, 1e-6, kv=1e-7)
    a = iteration_channel_a(record, kv_priced)
    assert a.kv_tokens == oracle
    plain = iteration_channel_a(record, LinearStepCost(1e-3, 2e-5, 1e-6, kv=0.0))
    assert a.total_s == pytest.approx(plain.total_s + 1e-7 * oracle, rel=1e-12)
    assert json.loads(json.dumps(channels(record, step_cost=kv_priced)))["a_kv_tokens"] == oracle


@pytest.mark.slow
def test_agent_sessions_under_a_small_pool(vllm_ready: Path, tmp_path: Path) -> None:
    """Eight sessions of four rounds, starts spread over a second, on a pool of 95 usable
    blocks (about three transcripts): re-arrivals may lose their prefix to eviction, so
    each hit is at most the rule's, a whole number of blocks, and together exactly what
    vLLM's counter says."""
    import random

    from rearrival.model.plans.plan import MultiRoundSession, PlanMeta, Round

    rng = random.Random(5)
    sessions = tuple(
        MultiRoundSession(
            i,
            tuple(
                Round(rng.randint(40, 300), rng.randint(4, 24), rng.uniform(0.1, 0.6))
                for _ in range(4)
            ),
            start_s=rng.uniform(0.0, 1.0),
        )
        for i in range(8)
    )
    plan = Plan(sessions, PlanMeta(seed=13, n=8))
    plan_path = write_plan(plan, tmp_path / "agents.json")
    out = tmp_path / "agents"
    done = cli(
        "run",
        str(plan_path),
        "--backend",
        "vllm",
        "--out",
        str(out),
        "--max-model-len",
        "1024",
        "--block-size",
        str(BLOCK),
        "--num-blocks",
        "96",
        "--batch-size",
        "4",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    record = read_run(out)
    bound = _expected_hits(plan)
    for r in record.requests.to_dict("records"):
        hit = int(r["cached_tokens"])
        assert hit % BLOCK == 0 and hit <= bound[(int(r["session"]), int(r[ROUND_COLUMN]))]
    counter = "vllm:prompt_tokens_cached_total"
    delta = record.metrics["after"][counter] - record.metrics["before"][counter]
    assert int(record.requests["cached_tokens"].sum()) == delta
    _check_steps(out)
