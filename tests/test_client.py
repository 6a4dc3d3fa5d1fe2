"""The async replay client and the `run` verb (docs/DESIGN.md §5-6, paper Section II-C/D).

Protocol properties are checked against a tiny recording aiohttp server; faults (HTTP
500, a truncated stream, a wrong token count, an unreachable URL, a server killed
mid-run) must each end as one clear reason in a run marked incomplete, never complete.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from rearrival.measure import client, client_records, counters, prompt_ids, serve
from rearrival.measure.client import ReplayOptions, replay
from rearrival.measure.client_http import ClientError
from rearrival.measure.emulate_client import replay_url
from rearrival.measure.records import RunRecordError, manifest_template, read_run
from rearrival.model.configuration import RblnConfiguration
from rearrival.model.plans.plan import (
    MultiRoundSession,
    Plan,
    PlanMeta,
    Prefix,
    Round,
    Session,
    write_plan,
)

CLI = str(Path(sys.executable).with_name("rearrival"))
FAST = ReplayOptions(seed=9, time_scale=0.01, read_timeout_s=10)
CACHED_PER_REQUEST = 16  # what the fake server reports for every request


def plan_of(rows: list[tuple[int, int, int, float]], seed: int | None = 4) -> Plan:
    return Plan(
        tuple(
            Session(
                session=i,
                prompt_tokens=p,
                gen_tokens=g0,
                followup_gen_tokens=g1,
                appended_tokens=8,
                tool_wait_s=w,
                tool_name="aggregate",
            )
            for i, (p, g0, g1, w) in enumerate(rows)
        ),
        PlanMeta(seed=seed, n=len(rows)),
    )


PLAN = plan_of([(40, 3, 4, 2.0), (30, 5, 2, 0.0)])

Behaviour = Callable[[web.Request, dict[str, Any], int], Awaitable[web.StreamResponse]]


async def good_stream(
    request: web.Request, body: dict[str, Any], _index: int
) -> web.StreamResponse:
    """A well-behaved streaming server: ids from the prompt length, usage, [DONE]."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for k in range(body["max_tokens"]):
        chunk = {"choices": [{"index": 0, "text": "x", "token_ids": [len(body["prompt"]) + k]}]}
        await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
    usage = {
        "prompt_tokens": len(body["prompt"]),
        "completion_tokens": body["max_tokens"],
        "prompt_tokens_details": {"cached_tokens": CACHED_PER_REQUEST},
    }
    await response.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
    await response.write(b"data: [DONE]\n\n")
    return response


def fake_app(behaviour: Behaviour, seen: list[dict[str, Any]]) -> web.Application:
    def metrics() -> str:
        # the counter moves by the 16 cached tokens each streamed usage reports
        cached = 32.0 + CACHED_PER_REQUEST * len(seen)
        name = "vllm:prompt_tokens_cached_total"
        return f"# TYPE {name} counter\n{name} {cached}\n"

    async def models(_request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "fake"}]})

    async def scrape(_request: web.Request) -> web.Response:
        return web.Response(text=metrics())

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen.append(body)
        return await behaviour(request, body, len(seen) - 1)

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", scrape)
    return app


def replay_against(
    behaviour: Behaviour, plan: Plan = PLAN, variant: str = "wait"
) -> tuple[client.ClientRun, list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []

    async def main() -> client.ClientRun:
        runner = web.AppRunner(fake_app(behaviour, seen), shutdown_timeout=0.5)
        await runner.setup()
        port = serve.free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            return await replay(plan, f"http://127.0.0.1:{port}", variant=variant, options=FAST)
        finally:
            await runner.cleanup()

    return asyncio.run(main()), seen


def manifest_for(plan: Plan, backend: str = "emulated-http") -> dict[str, Any]:
    return manifest_template(
        study="test",
        backend=backend,
        configuration=RblnConfiguration((1, 2, 4, 8), 8),
        variant="wait",
        condition="c",
        replicate=0,
        n=plan.n,
        plan_path="p.json",
        plan_sha256=plan.sha256(),
        plan_seed=plan.meta.seed,
        run_seed=9,
        condition_order=["c"],
        time_scale=FAST.time_scale,
    )


# --- prompts and protocol ------------------------------------------------------------------


def test_prompt_ids_are_deterministic_and_never_share_a_prefix() -> None:
    key = prompt_ids.plan_key(PLAN)
    first = [prompt_ids.new_ids(key, s.session, 0, s.prompt_tokens) for s in PLAN.sessions]
    assert first == [prompt_ids.new_ids(key, s.session, 0, s.prompt_tokens) for s in PLAN.sessions]
    assert [len(ids) for ids in first] == [40, 30]
    assert first[0][0] != first[1][0]  # different at position 0: no common prefix at all
    other = prompt_ids.new_ids(prompt_ids.plan_key(plan_of([(40, 3, 4, 2.0)], seed=5)), 0, 0, 40)
    assert other[1:] != first[0][1:]  # another plan seed, other ids
    assert prompt_ids.plan_key(plan_of([(40, 3, 4, 2.0)], seed=None)).startswith("sha:")
    appended = [prompt_ids.new_ids(key, 0, k, 8) for k in (1, 2, 3)]
    assert all(len(ids) == 8 for ids in appended)
    assert len({tuple(ids) for ids in appended}) == 3  # every round appends its own ids


def test_requests_are_greedy_token_id_extensions_and_times_are_recorded() -> None:
    run, seen = replay_against(good_stream)
    assert run.status == "complete" and run.reason is None and run.model == "fake"
    for body in seen:
        assert body["temperature"] == 0 and body["seed"] == 9 and body["ignore_eos"] is True
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
        assert all(type(t) is int for t in body["prompt"])
    key = prompt_ids.plan_key(PLAN)
    by_prompt = {tuple(b["prompt"]): b for b in seen}
    for s in PLAN.sessions:
        first_ids = prompt_ids.new_ids(key, s.session, 0, s.prompt_tokens)
        first = by_prompt[tuple(first_ids)]
        assert first["max_tokens"] == s.gen_tokens
        generated = [len(first_ids) + k for k in range(s.gen_tokens)]
        followup = first_ids + generated + prompt_ids.new_ids(key, s.session, 1, 8)
        assert by_prompt[tuple(followup)]["max_tokens"] == s.followup_gen_tokens
        assert len(followup) == s.followup_prompt_tokens

    replies = {(r.record.session, r.record.round): r for r in run.replies}
    assert len(replies) == 4
    for (session, round_index), reply in replies.items():
        r = reply.record
        assert r.send_s <= r.first_token_s <= r.complete_s
        assert list(reply.token_times_s) == sorted(reply.token_times_s)
        assert (
            r.generated_tokens
            == len(reply.token_ids)
            == (
                PLAN.sessions[session].gen_tokens
                if round_index == 0
                else PLAN.sessions[session].followup_gen_tokens
            )
        )
        assert r.cached_tokens == CACHED_PER_REQUEST
        assert r.computed_tokens == r.prompt_tokens - CACHED_PER_REQUEST
    records = {key: reply.record for key, reply in replies.items()}
    # The follow-up waits the planned tool time (in plan seconds) after the completion.
    assert records[(0, 1)].send_s >= records[(0, 0)].complete_s + 2.0
    cached = "vllm:prompt_tokens_cached_total"
    assert run.metrics_after[cached] - run.metrics_before[cached] == 4 * CACHED_PER_REQUEST


def test_control_variant_sends_the_followup_without_waiting() -> None:
    run, _ = replay_against(good_stream, plan_of([(40, 3, 4, 500.0)]), variant="control")
    assert run.status == "complete" and len(run.requests) == 2


MULTI = Plan(
    (
        MultiRoundSession(0, (Round(40, 3, 2.0), Round(5, 4, 0.0), Round(9, 2, 0.0)), start_s=0.0),
        MultiRoundSession(1, (Round(30, 2, 0.5), Round(12, 3, 1.5), Round(7, 5, 0.0)), start_s=3.0),
    ),
    PlanMeta(seed=4, n=2),
)


def test_multi_round_sessions_send_the_exact_transcript_so_far() -> None:
    """Round k+1 = round k's prompt + the ids the server generated + the round's new ids."""
    run, seen = replay_against(good_stream, MULTI)
    assert run.status == "complete" and run.expected_requests == MULTI.requests == 6
    key = prompt_ids.plan_key(MULTI)
    by_prompt = {tuple(b["prompt"]): b for b in seen}
    replies = {(r.record.session, r.record.round): r for r in run.replies}
    records = {key: reply.record for key, reply in replies.items()}
    assert sorted(records) == [(s, k) for s in (0, 1) for k in range(3)]
    for s in MULTI.sessions:
        transcript: list[int] = []
        for k, r in enumerate(s.rounds):
            transcript += prompt_ids.new_ids(key, s.session, k, r.new_tokens)
            assert by_prompt[tuple(transcript)]["max_tokens"] == r.gen_tokens
            record = records[(s.session, k)]
            assert record.prompt_tokens == len(transcript) == s.prompts()[k]
            assert record.generated_tokens == r.gen_tokens
            transcript += list(replies[(s.session, k)].token_ids)
            if k:  # each round leaves its gap (plan seconds) after the previous response
                before = records[(s.session, k - 1)]
                assert record.send_s >= before.complete_s + s.rounds[k - 1].gap_after_s
    assert records[(1, 0)].send_s >= 3.0  # the session starts at its start_s
    assert records[(0, 0)].send_s < 3.0


def test_sessions_naming_a_shared_prefix_send_it_first_and_part_after_it() -> None:
    """A shared prefix (an agent's system prompt) is the same ids in every session naming
    it, so a server can cache its blocks once; each session's own ids follow it, and every
    prompt is the plan's length (the prefix counted, as the predictor counts it)."""
    shared = Plan(
        tuple(
            MultiRoundSession(i, (Round(20, 3, 0.1), Round(6, 2)), 0.2 * i, "agent", 64)
            for i in range(2)
        ),
        PlanMeta(seed=9, n=2),
        (Prefix("agent", 64),),
    )
    run, seen = replay_against(good_stream, shared)
    assert run.status == "complete"
    heads = {tuple(b["prompt"][:64]) for b in seen}
    assert heads == {tuple(prompt_ids.prefix_ids(prompt_ids.plan_key(shared), "agent", 64))}
    firsts = [b["prompt"] for b in seen if len(b["prompt"]) == 84]
    assert len(firsts) == 2 and firsts[0][64] != firsts[1][64]  # the sessions part at 64
    for reply in run.replies:
        s = shared.sessions[reply.record.session]
        assert reply.record.prompt_tokens == s.prompts()[reply.record.round]


def test_a_two_round_plan_and_its_multi_round_twin_send_the_same_requests() -> None:
    twin = Plan(
        tuple(MultiRoundSession(s.session, s.rounds, s.start_s) for s in PLAN.sessions),
        PLAN.meta,
    )
    _, one = replay_against(good_stream, PLAN)
    _, two = replay_against(good_stream, twin)
    assert sorted(map(json.dumps, one)) == sorted(map(json.dumps, two))


def test_counters_are_summed_over_labels_and_only_vllm_counters_kept() -> None:
    text = (
        "# TYPE vllm:prompt_tokens_cached_total counter\n"
        'vllm:prompt_tokens_cached_total{engine="0"} 100.0\n'
        'vllm:prompt_tokens_cached_total{engine="1"} 28.0\n'
        "vllm:prefix_cache_hits_total 7\n"  # untyped: still a counter sample
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3.0\n"
        "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 9.0\n"
    )
    assert counters.parse_counters(text) == {
        "vllm:prompt_tokens_cached_total": 128.0,
        "vllm:prefix_cache_hits_total": 7.0,
    }


def test_replay_options_are_validated() -> None:
    with pytest.raises(ClientError, match="time_scale"):
        ReplayOptions(time_scale=0)
    with pytest.raises(ClientError, match="read_timeout_s"):
        ReplayOptions(read_timeout_s=-1)


# --- faults --------------------------------------------------------------------------------


async def server_error(
    request: web.Request, body: dict[str, Any], index: int
) -> web.StreamResponse:
    return web.json_response({"error": {"message": "engine dead"}}, status=500)


async def truncates_followups(
    request: web.Request, body: dict[str, Any], index: int
) -> web.StreamResponse:
    if len(body["prompt"]) <= 40:  # first requests are fine
        return await good_stream(request, body, index)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    chunk = {"choices": [{"index": 0, "text": "x", "token_ids": [1]}]}
    await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
    return response  # ends the body without [DONE]


async def ignores_max_tokens(
    request: web.Request, body: dict[str, Any], index: int
) -> web.StreamResponse:
    return await good_stream(request, body | {"max_tokens": 1}, index)


@pytest.mark.parametrize(
    ("behaviour", "status", "reason"),
    [
        (server_error, "failed", "returned HTTP 500: .*engine dead"),
        (truncates_followups, "partial", "without 'data: \\[DONE\\]' after 1 tokens"),
        (ignores_max_tokens, "failed", "server generated 1 tokens, the plan needs"),
    ],
)
def test_faults_end_the_run_incomplete_with_one_reason(
    tmp_path: Path, behaviour: Behaviour, status: str, reason: str
) -> None:
    run, _ = replay_against(behaviour)
    assert run.status == status and "\n" not in (run.reason or "")
    assert run.reason is not None and __import__("re").search(reason, run.reason)
    outcome = client_records.write_client_run(
        tmp_path / "run", run, manifest=manifest_for(PLAN), server_log=""
    )
    assert outcome.status == status
    with pytest.raises(RunRecordError, match=f"status is '{status}'"):
        read_run(tmp_path / "run")
    kept = read_run(tmp_path / "run", require_complete=False)
    assert kept.manifest["reason"] == run.reason
    assert len(kept.requests) == len(run.requests)


def test_a_multi_round_run_cut_short_keeps_each_sessions_finished_rounds(tmp_path: Path) -> None:
    async def truncates_third_rounds(
        request: web.Request, body: dict[str, Any], index: int
    ) -> web.StreamResponse:
        if len(body["prompt"]) <= 50:  # MULTI's rounds 0 and 1 are at most 48 tokens
            return await good_stream(request, body, index)
        return await truncates_followups(request, body, index)

    run, _ = replay_against(truncates_third_rounds, MULTI)
    assert run.status == "partial" and "without 'data: [DONE]'" in (run.reason or "")
    client_records.write_client_run(
        tmp_path / "run", run, manifest=manifest_for(MULTI), server_log=""
    )
    kept = read_run(tmp_path / "run", require_complete=False).requests
    assert kept["turn"].max() <= 1 and (kept["turn"] == 1).any()
    for _, turns in kept.groupby("session")["turn"]:
        assert sorted(turns) == list(range(len(turns)))


def test_unreachable_url_is_a_failed_run_with_the_url_in_the_reason(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{serve.free_port()}"
    outcome = asyncio.run(
        replay_url(
            PLAN, url, tmp_path / "run", variant="wait", options=FAST, manifest=manifest_for(PLAN)
        )
    )
    assert outcome.status == "failed" and f"cannot reach {url}" in (outcome.reason or "")
    record = read_run(tmp_path / "run", require_complete=False)
    assert record.requests.empty and record.metrics == {"before": {}, "after": {}}


def test_step_log_that_misses_decode_steps_makes_the_run_unusable(tmp_path: Path) -> None:
    run, _ = replay_against(good_stream)
    outcome = client_records.write_client_run(
        tmp_path / "run",
        run,
        manifest=manifest_for(PLAN),
        server_log="INFO started\n[BUCKET] request_nums=2 padded_batch_size=2\n",
    )
    assert outcome.status == "failed" and "VLLM_LOGGING_LEVEL=DEBUG" in (outcome.reason or "")


def test_server_killed_mid_run_gives_a_partial_run(tmp_path: Path) -> None:
    """Kill the emulate-server while both sessions sit in their tool wait."""
    plan = plan_of([(300, 4, 4, 3.0), (260, 6, 3, 3.0)])
    port = serve.free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [
        CLI,
        "emulate-server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--buckets",
        "1,2,4,8",
        "--batch-size",
        "8",
        "--time-scale",
        "0.25",
    ]
    options = ReplayOptions(seed=1, time_scale=0.25, read_timeout_s=10)

    async def kill_after_first_responses(server: serve.ServerProcess) -> None:
        import aiohttp

        async with aiohttp.ClientSession() as http:
            while True:
                text = await (await http.get(f"{url}/metrics")).text()
                if counters.parse_counters(text)["vllm:generation_tokens_total"] >= 10:
                    break
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # let the last chunks reach the client; waits last 0.75 s
        os.killpg(server.process.pid, signal.SIGKILL)

    async def main(server: serve.ServerProcess) -> client_records.RunOutcome:
        killer = asyncio.create_task(kill_after_first_responses(server))
        outcome = await replay_url(
            plan,
            url,
            tmp_path / "run",
            variant="wait",
            options=options,
            manifest=manifest_for(plan),
        )
        await killer
        return outcome

    with serve.running_server(
        argv, url, tmp_path / "server.log", ready_timeout_s=60, grace_s=2
    ) as server:
        outcome = asyncio.run(main(server))
    assert outcome.status == "partial"
    assert f"cannot connect to {url}/v1/completions" in (outcome.reason or "")
    record = read_run(tmp_path / "run", require_complete=False)
    assert sorted(record.requests["turn"]) == [0, 0]


# --- the run verb --------------------------------------------------------------------------


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], capture_output=True, text=True, check=False)


def test_run_rbln_without_the_stack_fails_fast_saying_what_to_install(tmp_path: Path) -> None:
    plan_path = write_plan(PLAN, tmp_path / "plan.json")
    done = cli("run", str(plan_path), "--backend", "rbln", "--out", str(tmp_path / "run"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and "install the RBLN stack" in done.stderr
    assert not (tmp_path / "run").exists()


def test_run_verb_against_an_unreachable_url_keeps_a_failed_record(tmp_path: Path) -> None:
    plan_path = write_plan(PLAN, tmp_path / "plan.json")
    url = f"http://127.0.0.1:{serve.free_port()}"
    done = cli(
        "run",
        str(plan_path),
        "--backend",
        "emulated-http",
        "--url",
        url,
        "--time-scale",
        "0.01",
        "--out",
        str(tmp_path / "run"),
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and "run failed: cannot reach" in done.stderr
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["status"] == "failed" and manifest["backend"] == "emulated-http"


def test_run_verb_emulated_http_with_a_fresh_server_writes_a_complete_run(tmp_path: Path) -> None:
    plan = plan_of([(300, 4, 5, 1.0), (200, 3, 2, 2.0)])
    plan_path = write_plan(plan, tmp_path / "plan.json")
    done = cli(
        "run",
        str(plan_path),
        "--backend",
        "emulated-http",
        "--time-scale",
        "0.05",
        "--seed",
        "2",
        "--study",
        "s",
        "--replicate",
        "1",
        "--out",
        str(tmp_path / "run"),
    )
    assert done.returncode == 0, done.stderr
    record = read_run(tmp_path / "run")
    manifest = record.manifest
    assert (manifest["backend"], manifest["time_scale"], manifest["replicate"]) == (
        "emulated-http",
        0.05,
        1,
    )
    assert manifest["seeds"] == {"plan": 4, "run": 2} and manifest["patch_sha256"] is None
    assert sorted(record.requests["generated_tokens"]) == [2, 3, 4, 5]
    assert int(record.steps["n"].sum()) == (4 - 1) + (5 - 1) + (3 - 1) + (2 - 1)
    assert (tmp_path / "run.server.log").is_file()


def test_run_verb_emulated_backend_writes_the_in_process_twin(tmp_path: Path) -> None:
    plan_path = write_plan(PLAN, tmp_path / "plan.json")
    done = cli(
        "run",
        str(plan_path),
        "--backend",
        "emulated",
        "--slots",
        "4",
        "--variant",
        "control",
        "--seed",
        "3",
        "--out",
        str(tmp_path / "run"),
    )
    assert done.returncode == 0, done.stderr
    manifest = read_run(tmp_path / "run").manifest
    assert (manifest["backend"], manifest["variant"], manifest["status"]) == (
        "emulated",
        "control",
        "complete",
    )
    assert {key: manifest["configuration"][key] for key in ("buckets", "batch_size", "slots")} == {
        "buckets": [1, 2, 4, 8],
        "batch_size": 8,
        "slots": 4,
    }


def test_run_verb_records_every_round_of_a_multi_round_plan(tmp_path: Path) -> None:
    plan_path = write_plan(MULTI, tmp_path / "plan.json")
    done = cli("run", str(plan_path), "--backend", "emulated", "--out", str(tmp_path / "run"))
    assert done.returncode == 0, done.stderr
    requests = read_run(tmp_path / "run").requests
    assert list(zip(requests["session"], requests["turn"], strict=True)) == [
        (s, k) for s in (0, 1) for k in range(3)
    ]
    assert requests["prompt_tokens"].tolist() == [p for s in MULTI.sessions for p in s.prompts()]


def test_run_verb_refuses_a_round_the_context_cannot_hold(tmp_path: Path) -> None:
    long = Plan(
        (MultiRoundSession(0, (Round(5000, 100, 1.0), Round(3000, 100, 0.0))),),
        PlanMeta(seed=1, n=1),
    )
    plan_path = write_plan(long, tmp_path / "plan.json")
    done = cli("run", str(plan_path), "--backend", "emulated", "--out", str(tmp_path / "run"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1
    assert "plan.json: session 0 round 1: field 'new_tokens'" in done.stderr
    assert not (tmp_path / "run").exists()


def test_url_of_a_server_that_does_not_say_what_it_serves_is_refused(tmp_path: Path) -> None:
    """--url at a vLLM-like server (no /rearrival/config): the run is refused, never
    labelled with the emulator's configuration, and nothing is written."""
    from rearrival.measure.backends import BackendSettings, RunRequest, run_backend
    from rearrival.model.configuration import RblnConfiguration

    async def main() -> str:
        runner = web.AppRunner(fake_app(good_stream, []), shutdown_timeout=0.5)
        await runner.setup()
        port = serve.free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        url = f"http://127.0.0.1:{port}"
        settings = BackendSettings(backend="emulated-http", url=url, time_scale=0.01)
        run = RunRequest(
            study="s",
            plan=PLAN,
            plan_path=Path("p.json"),
            configuration=RblnConfiguration((1, 2, 4, 8), 8, name="baseline"),
            variant="wait",
            label="baseline-wait",
            replicate=0,
            seed=1,
            condition_order=["baseline-wait"],
            prereg={},
        )
        try:
            with pytest.raises(ClientError, match="does not say what it serves") as err:
                await asyncio.to_thread(run_backend, settings, run, tmp_path / "run")
            return str(err.value)
        finally:
            await runner.cleanup()

    message = asyncio.run(main())
    assert "--backend vllm" in message and "HTTP 404" in message
    assert not (tmp_path / "run").exists()
