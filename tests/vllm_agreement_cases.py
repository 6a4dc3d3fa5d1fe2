"""vLLM run records whose "server" is the predictor's own step-by-step engine, so the truth
of a comparison is known: a run written under the profile's own step cost must agree
with the prediction exactly, and one written under other step times may not.

``simulated_run`` writes a complete, sealed run directory as the vllm backend does: the
requests (send, first token and finish times, prompt and cached tokens), vLLM's
iteration lines in server.log (the steps frame parsed from them) and a manifest with a
``VllmConfiguration`` and the engine that served the shipped tiny-qwen3.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from rearrival.config.served_model import load_served_model
from rearrival.measure.records import finish_manifest, manifest_template, write_run
from rearrival.measure.records.contract import RequestRecord
from rearrival.measure.records.frames import requests_frame
from rearrival.measure.vllm.iterations import IterationStepLog
from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.vllm_profile import VllmStepCost
from rearrival.model.plans.plan import MultiRoundSession, Plan, PlanMeta, Round, write_plan
from rearrival.model.simulator.vllm.engine import Engine
from rearrival.model.simulator.vllm.inputs import vllm_inputs

CACHED_COUNTER = "vllm:prompt_tokens_cached_total"


def evicting_plan() -> Plan:
    """Four sessions of three rounds, started 0.1 s apart, with tool waits long enough
    for the others' prefills to need a small pool's cached blocks."""
    rows = [
        (0.0, [(300, 12, 0.6), (60, 10, 0.5), (40, 6, 0.0)]),
        (0.1, [(260, 10, 0.4), (80, 12, 0.7), (30, 5, 0.0)]),
        (0.2, [(340, 8, 0.8), (50, 9, 0.3), (60, 4, 0.0)]),
        (0.3, [(220, 14, 0.5), (70, 8, 0.6), (20, 6, 0.0)]),
    ]
    return Plan(
        tuple(
            MultiRoundSession(i, tuple(Round(*r) for r in rounds), start_s=start)
            for i, (start, rounds) in enumerate(rows)
        ),
        PlanMeta(seed=5, n=len(rows)),
    )


def configuration(num_blocks: int) -> VllmConfiguration:
    return VllmConfiguration(
        (),
        8,
        num_blocks=num_blocks,
        block_size=32,
        max_num_batched_tokens=512,
        name=f"k{num_blocks}",
    )


def _log_line(i: int, counts: tuple[int, int, int, int], elapsed_s: float, usage: float) -> str:
    cr, ct, gr, gt = counts
    return (
        f"INFO 12-01 00:00:00 [loggers.py:1] Engine 000: Iteration({i}): {cr} context "
        f"requests, {ct} context tokens, {gr} generation requests, {gt} generation tokens, "
        f"iteration elapsed time: {elapsed_s * 1e3:.6f} ms, CPU KV cache usage: "
        f"{usage * 100:.1f}%"
    )


def serve(plan: Plan, conf: VllmConfiguration, cost: VllmStepCost) -> tuple[list, list[str]]:
    """The plan on the engine under ``cost``: request records and iteration lines."""
    inputs = vllm_inputs(plan, conf.block_size)
    engine = Engine(inputs, conf, cost, None)
    first_token = [math.nan] * inputs.requests
    lines = []
    usable = conf.usable_blocks
    while engine.advance_to_work():
        before = [(r.steps, r.outputs) for r in engine.requests]
        decode, prefill, device = engine.decode_tokens, engine.prefill_tokens, engine.device_s
        engine.step()
        context = generation = 0
        for r, (steps, outputs) in zip(engine.requests, before, strict=True):
            if r.steps > steps:
                generation += bool(outputs)
                context += not outputs
            if not outputs and r.outputs:
                first_token[r.rid] = engine.t
        counts = (
            context,
            engine.prefill_tokens - prefill,
            generation,
            engine.decode_tokens - decode,
        )
        usage = (usable - engine.pool.free_count) / usable
        lines.append(_log_line(len(lines), counts, engine.device_s - device, usage))
    a = inputs.arrays
    records = [
        RequestRecord(
            session=a.session_of[r.rid],
            round=a.round_of[r.rid],
            send_s=r.arrival_s,
            first_token_s=first_token[r.rid],
            complete_s=r.finish_s,
            prompt_tokens=r.prompt,
            cached_tokens=r.cached_tokens,
            computed_tokens=r.prompt - r.cached_tokens,
            generated_tokens=r.gen,
        )
        for r in engine.requests
    ]
    return records, lines


def simulated_run(
    tmp_path: Path,
    plan: Plan,
    conf: VllmConfiguration,
    cost: VllmStepCost,
    *,
    name: str = "run",
    edit: Callable[[list[RequestRecord]], list[RequestRecord]] | None = None,
    backend: str = "vllm",
    status: str = "complete",
) -> Path:
    """A sealed run record of ``plan`` served by the engine under ``cost`` (``edit``
    changes the request records before they are written)."""
    plan_path = write_plan(plan, tmp_path / f"{name}.plan.json")
    records, lines = serve(plan, conf, cost)
    if edit is not None:
        records = edit(records)
    log = "\n".join(lines) + "\n"
    model = load_served_model()
    manifest = manifest_template(
        study="agree",
        backend=backend,
        configuration=conf,
        variant="wait",
        condition=conf.name,
        replicate=0,
        n=plan.n,
        plan_path=str(plan_path),
        plan_sha256=plan.sha256(),
        plan_seed=plan.meta.seed,
        run_seed=0,
        condition_order=[conf.name],
    ) | {
        "engine": {
            "name": "vllm",
            "version": "0.32.0",
            "device": "cpu",
            "model": model.manifest_entry(),
        }
    }
    cached = float(sum(r.cached_tokens or 0 for r in records))
    return write_run(
        tmp_path / name,
        requests=requests_frame(records),
        steps=IterationStepLog(()).steps(log),
        metrics={"before": {CACHED_COUNTER: 0.0}, "after": {CACHED_COUNTER: cached}},
        manifest=finish_manifest(
            manifest, status=status, reason=None if status == "complete" else "cut"
        ),
        server_log=log,
    )


def profile_file(path: Path, cost: VllmStepCost, **changes: object) -> Path:
    """A vLLM profile of the shipped tiny-qwen3 on CPU holding ``cost`` (``changes``
    replace top-level fields or the KV bytes)."""
    model = load_served_model()
    coefficient = {
        name: {"value": value, "provenance": "assumed for the test"}
        for name, value in zip(
            ("base_s", "per_decode_token_s", "per_prefill_token_s", "per_kv_token_s"),
            cost.as_tuple(),
            strict=True,
        )
    }
    tree = {
        "profile_version": "test/1",
        "substrate": "vllm",
        "model_id": "tiny-qwen3",
        "model_config_sha256": model.config_sha256,
        "vllm_version": "0.32.0",
        "device": "cpu",
        "step_cost": coefficient,
        "kv": {
            "bytes_per_token": {
                "value": changes.pop("kv_bytes_per_token", model.kv_bytes_per_token),
                "provenance": "the model's config.json",
            }
        },
    } | changes
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return path


def check_adds_up(summary: dict, frame) -> None:
    """The summary's numbers are the per-request table's, summed as they say."""
    assert summary["requests"] == len(frame)
    assert summary["agreeing"] == int(frame["agree"].sum())
    assert summary["agreeing_share"] == summary["agreeing"] / summary["requests"]
    clean = frame[frame["evictions_before"] == 0]
    assert summary["no_eviction_requests"] == len(clean)
    assert summary["no_eviction_agreeing"] == int(clean["agree"].sum())
    later = frame[frame["round"] > 0]
    assert summary["re_arrivals"] == len(later)
    lost = later["cached_tokens_observed"] < later["cacheable_tokens"]
    assert summary["re_arrivals_lost_observed"] == int(lost.sum())
    for side in ("observed", "predicted"):
        prefill = (frame[f"prompt_tokens_{side}"] - frame[f"cached_tokens_{side}"]).sum()
        assert summary[f"prefill_tokens_{side}"] == prefill
        assert summary[f"recomputed_prefill_tokens_{side}"] == (
            prefill - summary["prefill_tokens_never_evicting"]
        )
        by_round = sum(e[f"cached_{side}"] for e in summary["reuse_by_round"])
        assert by_round == summary[f"cached_tokens_{side}"] == frame[f"cached_tokens_{side}"].sum()
    assert sum(e["prompt_tokens"] for e in summary["reuse_by_round"]) == summary["prompt_tokens"]
    assert summary["cacheable_tokens"] == frame["cacheable_tokens"].sum()
    error = summary["device_s_predicted"] / summary["device_s_observed"] - 1
    assert summary["device_s_relative_error"] == pytest.approx(error, rel=1e-12, abs=1e-15)
