"""The emulated-http backend: the engine behind a real HTTP server (docs/DESIGN.md §5).

The oracle is the in-process emulated backend: with the same plan and seed, a replay
through ``rearrival emulate-server`` (a subprocess on loopback) and the real client must
give the same reuse, the same decode steps (every (n, b) pair) and the same token
counts. That holds when the engine sees the same event order, so the in-process twin is
driven with the arrivals the HTTP run's server logged (``observed_arrivals``, as
``rearrival compare`` runs the vLLM predictor on a real run's observed times): a client
that a loaded machine delays arrives late in both (issue 36). The plans below were made
to keep the order robust against the real network's timing on their own:

- all first requests arrive within the first prefill (about 0.28 emulated seconds, or
  56 ms of wall time at time scale 0.2; real first sends spread over a few ms), and the
  scheduler runs every waiting prefill before any decode, so the first phase always is
  three prefills then decode steps of 3, 2, 1 requests;
- tool waits 1 s apart put each re-arrival in an idle engine (the previous one needs
  about 0.5 s), so what survives in the KV slots depends only on the order of
  completions, which the distinct generation lengths fix.

The eviction case uses two sessions in two slots, where every eviction has exactly
one candidate: the first request to finish loses its slot as the dummy padding block
while the other decodes alone; the other re-arrives first (shorter wait) and reuses its
prefix; the first re-arrives last and recomputes everything, while the hit counter
still reports its prefix. Both outcomes are independent of which first send won.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rearrival.judge.channels import channels
from rearrival.measure import serve
from rearrival.measure.client import ReplayOptions
from rearrival.measure.counters import parse_counters
from rearrival.measure.emulate.driver import run_emulated
from rearrival.measure.emulate.observed import observed_arrivals
from rearrival.measure.emulate.server import EmulateServer, ServerOptions, server_argv
from rearrival.measure.emulate.tokens import (
    ChatMessage,
    chat_prompt,
    piece_id,
    pieces,
    reply_pieces,
    text_ids,
)
from rearrival.measure.emulate_client import replay_url
from rearrival.measure.records import manifest_template, read_run
from rearrival.measure.steplog import parse_step_log
from rearrival.model.configuration import RblnConfiguration
from rearrival.model.plans.plan import MultiRoundSession, Plan, PlanMeta, Round, Session

CLI = str(Path(sys.executable).with_name("rearrival"))
TIME_SCALE = 0.2
SEED = 11


ALL_SLOTS_SURVIVE = ((1600, 10, 12, 1.5), (1500, 15, 9, 2.5), (1400, 20, 14, 3.5))
ONE_EVICTED = ((1600, 10, 12, 3.5), (1500, 15, 9, 1.5))


def robust_plan(rows: tuple[tuple[int, int, int, float], ...] = ALL_SLOTS_SURVIVE) -> Plan:
    """Sessions (prompt, first generation, follow-up generation, tool wait)."""
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
        PlanMeta(seed=5, n=len(rows)),
    )


def _manifest(plan: Plan, backend: str, slots: int | None) -> dict:
    return manifest_template(
        study="test",
        backend=backend,
        configuration=RblnConfiguration((1, 2, 4, 8), 8, slots),
        variant="wait",
        condition="c",
        replicate=0,
        n=plan.n,
        plan_path="plan.json",
        plan_sha256=plan.sha256(),
        plan_seed=plan.meta.seed,
        run_seed=SEED,
        condition_order=["c"],
        time_scale=TIME_SCALE,
    )


def _server_argv(port: int, slots: int | None) -> list[str]:
    return [
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
        "--seed",
        str(SEED),
        "--time-scale",
        str(TIME_SCALE),
        *(["--slots", str(slots)] if slots else []),
    ]


def replay_both(plan: Plan, tmp_path: Path, slots: int | None):
    """The plan through a fresh emulate-server and the real client, and in process on
    the arrivals the server logged (the times a loaded machine really gave)."""
    port = serve.free_port()
    url = f"http://127.0.0.1:{port}"
    out = tmp_path / "http-run"
    with serve.running_server(
        _server_argv(port, slots), url, tmp_path / "server.log", ready_timeout_s=60, grace_s=5
    ):
        outcome = asyncio.run(
            replay_url(
                plan,
                url,
                out,
                variant="wait",
                options=ReplayOptions(seed=SEED, time_scale=TIME_SCALE),
                manifest=_manifest(plan, "emulated-http", slots),
            )
        )
    assert (outcome.status, outcome.reason) == ("complete", None)
    http = read_run(out)
    configuration = RblnConfiguration((1, 2, 4, 8), 8, slots)
    arrivals = observed_arrivals(http.server_log, http.requests)
    return http, run_emulated(plan, configuration, seed=SEED, arrivals_s=arrivals)


def assert_same_engine_work(http, emulated) -> pd.DataFrame:
    """Token counts, reuse, decode steps (every (n, b)) and counters agree; returns the
    HTTP run's requests indexed by (session, turn)."""
    ours = http.requests.set_index(["session", "turn"]).sort_index()
    theirs = emulated.requests.set_index(["session", "turn"]).sort_index()
    assert ours.index.tolist() == theirs.index.tolist()
    for column in ("prompt_tokens", "cached_tokens", "computed_tokens", "generated_tokens"):
        assert ours[column].tolist() == theirs[column].tolist(), column

    decode = emulated.steps[emulated.steps["kind"] == "decode"]
    assert parse_step_log(http.server_log) == list(zip(decode["n"], decode["b"], strict=True))
    assert http.steps["n"].tolist() == decode["n"].tolist()

    for name in (
        "vllm:prompt_tokens_cached_total",
        "vllm:prefix_cache_hits_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
    ):
        assert delta(http.metrics, name) == delta(emulated.metrics, name), name
    assert delta(http.metrics, "vllm:prompt_tokens_cached_total") == ours["cached_tokens"].sum()
    return ours


def delta(metrics: dict, name: str) -> float:
    return metrics["after"][name] - metrics["before"][name]


@pytest.mark.parametrize(("rows", "slots"), [(ALL_SLOTS_SURVIVE, None), (ONE_EVICTED, 2)])
def test_http_replay_matches_the_in_process_emulator(tmp_path: Path, rows, slots) -> None:
    plan = robust_plan(rows)
    http, emulated = replay_both(plan, tmp_path, slots)
    ours = assert_same_engine_work(http, emulated)
    reused = int((ours.xs(1, level="turn")["cached_tokens"] > 0).sum())
    assert reused == emulated.counts["reuse_hits"]
    if slots == 2:  # eviction happened: reuse lost, and the hit counter says otherwise
        assert ours["cached_tokens"].tolist() == [0, 0, 0, 1408]
        assert delta(http.metrics, "vllm:prefix_cache_hits_total") > delta(
            http.metrics, "vllm:prompt_tokens_cached_total"
        )
    else:
        assert reused == plan.n

    values = channels(http)
    assert values["b_s"] > values["a_s"] > 0
    twin = channels(read_back(plan, emulated, tmp_path))
    assert values["a_s"] == pytest.approx(twin["a_s"])


def staggered_plan(spacing_s: float = 1.5) -> Plan:
    """3 sessions x 4 rounds, session i starting at i * spacing_s. Each request needs
    about 0.6 emulated seconds and the gaps make the sessions take turns (period
    3 * spacing_s), so every request meets an idle engine with at least 0.5 emulated
    seconds (100 ms of wall time) to spare: the event order is the plan's, whatever
    the network's timing."""
    return Plan(
        tuple(
            MultiRoundSession(
                i,
                tuple(
                    Round(
                        1000 + 100 * i if k == 0 else 40 + 30 * k + 7 * i,
                        8 + 2 * i + k,
                        2 * spacing_s + 0.95 if k < 3 else 0.0,
                        "aggregate",
                    )
                    for k in range(4)
                ),
                start_s=spacing_s * i,
            )
            for i in range(3)
        ),
        PlanMeta(seed=6, n=3),
    )


@pytest.mark.parametrize("slots", [None, 3])
def test_multi_round_http_replay_matches_the_in_process_emulator(tmp_path: Path, slots) -> None:
    """Each round sends the exact token-id transcript so far; the server reuses KV only
    where ids repeat, so reuse equal to the twin's proves the transcripts extend."""
    plan = staggered_plan()
    http, emulated = replay_both(plan, tmp_path, slots)
    ours = assert_same_engine_work(http, emulated)
    assert len(ours) == plan.requests == 12
    for s in plan.sessions:
        rows = ours.loc[s.session]
        assert rows.index.tolist() == [0, 1, 2, 3]
        assert rows["prompt_tokens"].tolist() == list(s.prompts())
        assert rows["send_s"].iloc[0] >= s.start_s  # the client honours start_s (plan s)
        gaps = [r.gap_after_s for r in s.rounds[:-1]]
        assert (rows["send_s"].to_numpy()[1:] >= rows["complete_s"].to_numpy()[:-1] + gaps).all()
        cached = rows["cached_tokens"].tolist()
        if slots is None:  # every round reuses its previous prompt: C = floor(min(P, L-1)/128)*128
            prompts = s.prompts()
            assert cached == [0] + [min(p, q - 1) // 128 * 128 for p, q in pairwise(prompts)]
        else:  # the dummy block takes each session's slot before its next round
            assert cached == [0, 0, 0, 0]
    values = channels(http)
    assert values["b_s"] > values["a_s"] > 0
    twin = channels(read_back(plan, emulated, tmp_path))
    assert values["a_s"] == pytest.approx(twin["a_s"])


class _StallingAsyncio:
    """The client's view of asyncio with one tool-gap sleep of ``gap_s`` wall seconds
    lengthened by ``stall_s``: the client process descheduled once, as on a loaded
    machine. Everything else is asyncio's."""

    def __init__(self, gap_s: float, stall_s: float) -> None:
        self.gap_s, self.stall_s, self.stalled = gap_s, stall_s, False

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    async def sleep(self, delay: float, result: Any = None) -> Any:
        if not self.stalled and delay == pytest.approx(self.gap_s):
            self.stalled = True
            delay += self.stall_s
        return await asyncio.sleep(delay, result)


def test_a_client_delayed_by_load_is_compared_on_its_observed_sends(tmp_path, monkeypatch):
    """Issue 36: under load the HTTP step log had (2, 2) where the in-process emulator
    had (1, 1). A client stalled once (session 0's first tool wait 1.5 plan seconds
    late) makes two sessions meet in the engine; on the plan's own timing the twin
    disagrees, on the arrivals the server observed it does the same work."""
    from rearrival.measure import client

    plan = staggered_plan()
    gap_s = plan.sessions[0].rounds[0].gap_after_s
    stall = _StallingAsyncio(gap_s * TIME_SCALE, 1.5 * TIME_SCALE)
    monkeypatch.setattr(client, "asyncio", stall)
    http, emulated = replay_both(plan, tmp_path, None)
    assert stall.stalled
    assert any(n == 2 for n, _ in parse_step_log(http.server_log))  # the sessions met
    assert_same_engine_work(http, emulated)
    on_plan_timing = run_emulated(plan, RblnConfiguration((1, 2, 4, 8), 8, None), seed=SEED)
    with pytest.raises(AssertionError):
        assert_same_engine_work(http, on_plan_timing)


def read_back(plan: Plan, emulated, tmp_path: Path):
    """The in-process run written and read through the same records contract."""
    from rearrival.measure.records import finish_manifest, write_run

    out = tmp_path / "emulated-run"
    write_run(
        out,
        requests=emulated.requests,
        steps=emulated.steps,
        metrics=emulated.metrics,
        manifest=finish_manifest(_manifest(plan, "emulated", None)),
        server_log=emulated.server_log,
    )
    return read_run(out)


# --- protocol, against the app in process ------------------------------------------------


async def _with_server(options: ServerOptions, body, log=None):
    """Run the aiohttp app on a free loopback port for the duration of ``body(url)``."""
    from aiohttp import web

    server = EmulateServer(options, log=log)
    runner = web.AppRunner(server.app(), shutdown_timeout=1.0)
    await runner.setup()
    port = serve.free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        return await body(f"http://127.0.0.1:{port}", server)
    finally:
        await runner.cleanup()


FAST = ServerOptions(RblnConfiguration((1, 2, 4, 8), 8), seed=1, time_scale=0.01)


def test_streaming_and_plain_completions_speak_the_openai_shape() -> None:
    import aiohttp

    prompt = list(range(1000, 1300))

    async def body(url: str, _server) -> tuple[list, dict, dict]:
        async with aiohttp.ClientSession() as http:
            payload = {
                "model": "m",
                "prompt": prompt,
                "max_tokens": 5,
                "stream": True,
                "ignore_eos": True,
                "stream_options": {"include_usage": True},
            }
            async with http.post(f"{url}/v1/completions", json=payload) as resp:
                assert resp.headers["Content-Type"].startswith("text/event-stream")
                raw = (await resp.read()).decode()
            payload |= {"stream": False}
            async with http.post(f"{url}/v1/completions", json=payload) as resp:
                plain = await resp.json()
            async with http.get(f"{url}/v1/models") as resp:
                models = await resp.json()
        return raw, plain, models

    raw, plain, models = asyncio.run(_with_server(FAST, body))
    events = [line[len("data: ") :] for line in raw.split("\n\n") if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    streamed = [t for c in chunks for choice in c["choices"] for t in choice["token_ids"]]
    assert len(streamed) == 5 and chunks[4]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["usage"]["completion_tokens"] == 5
    assert chunks[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    # Same prompt, same ids (greedy-like); the repeat shares the cached prefix.
    assert plain["choices"][0]["token_ids"] == streamed
    assert plain["usage"]["prompt_tokens_details"]["cached_tokens"] == 256
    assert models["data"][0]["id"]


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"prompt": "hello", "max_tokens": 4}, "list of token ids"),
        ({"prompt": [1, 2, -3], "max_tokens": 4}, "list of token ids"),
        ({"prompt": [1, 2, 3], "max_tokens": 0}, "max_tokens"),
        ({"prompt": [1] * 8190, "max_tokens": 10}, "exceeds max_seq_len"),
    ],
)
def test_bad_completion_requests_get_400_naming_the_field(payload: dict, message: str) -> None:
    import aiohttp

    async def body(url: str, _server) -> tuple[int, dict]:
        async with (
            aiohttp.ClientSession() as http,
            http.post(f"{url}/v1/completions", json=payload) as resp,
        ):
            return resp.status, await resp.json()

    status, error = asyncio.run(_with_server(FAST, body))
    assert status == 400 and message in error["error"]["message"]


def test_hit_counter_over_reports_after_eviction_but_cached_tokens_do_not() -> None:
    """One slot: B's admission evicts A, so A's re-arrival recomputes everything while
    prefix_cache_hits still counts A's prefix (paper II-D: why reuse is read from
    prompt_tokens_cached_total)."""
    import aiohttp

    options = ServerOptions(RblnConfiguration((1,), 1, 1), seed=2, time_scale=0.01)
    a, b = list(range(2000, 2400)), list(range(5000, 5400))

    async def body(url: str, _server) -> tuple[dict, dict, list[int]]:
        cached = []
        async with aiohttp.ClientSession() as http:
            before = parse_counters(await (await http.get(f"{url}/metrics")).text())
            for prompt in (a, b, [*a, 7, 7, 7]):
                async with http.post(
                    f"{url}/v1/completions", json={"prompt": prompt, "max_tokens": 3}
                ) as resp:
                    reply = await resp.json()
                cached.append(reply["usage"]["prompt_tokens_details"]["cached_tokens"])
            after = parse_counters(await (await http.get(f"{url}/metrics")).text())
        return before, after, cached

    before, after, cached = asyncio.run(_with_server(options, body))
    assert cached == [0, 0, 0]
    assert after["vllm:prompt_tokens_cached_total"] - before["vllm:prompt_tokens_cached_total"] == 0
    assert after["vllm:prefix_cache_hits_total"] == 384  # floor(400/128)*128, over-reported
    assert after["vllm:prefix_cache_queries_total"] == 400 + 400 + 403


def test_decode_steps_reach_the_log_as_bucket_lines(tmp_path: Path) -> None:
    import aiohttp

    log_file = tmp_path / "steps.log"

    async def body(url: str, _server) -> str:
        async with aiohttp.ClientSession() as http:
            await asyncio.gather(
                *[
                    (
                        await http.post(
                            f"{url}/v1/completions",
                            json={"prompt": [3000 + i, 1, 2], "max_tokens": 4},
                        )
                    ).read()
                    for i in range(3)
                ]
            )
            return await (await http.get(f"{url}/rearrival/log")).text()

    with log_file.open("a") as handle:
        served = asyncio.run(_with_server(FAST, body, log=handle))
    pairs = parse_step_log(served)
    assert sum(n for n, _ in pairs) == 3 * (4 - 1)  # every token after the first
    assert all(b == min(x for x in (1, 2, 4, 8) if x >= n) for n, b in pairs)
    assert parse_step_log(log_file) == pairs


# --- real third-party clients: the official openai package on both routes -----------------


def _documented_id(piece: str) -> int:
    """The token id rule exactly as docs/DESIGN.md §5 states it."""
    return int.from_bytes(hashlib.sha256(piece.encode("utf-8")).digest()[:8], "big") % 151_643


def test_chat_text_becomes_ids_by_the_documented_rule() -> None:
    h = _documented_id
    im_start, im_end = 151_644, 151_645
    prompt = chat_prompt([ChatMessage("user", "hi  there\n")])
    assert prompt == (
        *(im_start, h("user"), h("\n"), h("hi"), h("  there"), h("\n"), im_end, h("\n")),
        *(im_start, h("assistant"), h("\n")),
    )


@given(st.text(max_size=200))
def test_pieces_give_the_text_back(text: str) -> None:
    assert "".join(pieces(text)) == text


@given(st.integers(0, 2**31), st.lists(st.integers(0, 151_935), min_size=1, max_size=30))
def test_a_reply_re_sent_tokenises_to_the_generated_ids(seed: int, prompt: list[int]) -> None:
    reply = reply_pieces(seed, tuple(prompt), 12)
    assert text_ids("".join(reply)) == [piece_id(p) for p in reply]
    assert reply == reply_pieces(seed, tuple(prompt), 12)  # deterministic, like greedy


@pytest.fixture(scope="module")
def openai_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The official openai client against a fresh `rearrival emulate-server` on loopback."""
    from openai import OpenAI

    port = serve.free_port()
    argv = server_argv(RblnConfiguration((1, 2, 4, 8), 8), port=port, seed=SEED, time_scale=0.01)
    url = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("openai") / "server.log"
    with serve.running_server(argv, url, log, ready_timeout_s=60, grace_s=5):
        yield OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


def _reuse(previous_prompt: int, prompt: int) -> int:
    """The engine's reuse rule on the emulated stack: C = floor(min(P, L - 1)/128)*128."""
    return min(previous_prompt, prompt - 1) // 128 * 128


def test_openai_client_completions_with_token_ids(openai_client: Any) -> None:
    reply = openai_client.completions.create(
        model="any",
        prompt=list(range(2000, 2300)),
        max_tokens=5,
        temperature=0,
        seed=4,
        extra_body={"ignore_eos": True, "return_token_ids": True},
    )
    assert reply.usage.prompt_tokens == 300 and reply.usage.completion_tokens == 5
    assert reply.usage.prompt_tokens_details.cached_tokens == 0
    assert reply.choices[0].finish_reason == "length"
    largest = openai_client.completions.create(model="any", prompt=[151_935], max_tokens=1)
    assert largest.usage.prompt_tokens == 1


def test_openai_client_chat_conversation_extends_its_own_tokens(openai_client: Any) -> None:
    """A conversation re-sent with its reply: usage exact by the documented rule, the
    cached prefix the engine's, streaming and plain replies the same text."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are terse."},  # 3 pieces
        {"role": "user", "content": " ".join(f"w{i}" for i in range(300))},  # 300 pieces
    ]
    first = openai_client.chat.completions.create(
        model="any", messages=messages, max_completion_tokens=6, temperature=0.7
    )
    assert first.choices[0].message.role == "assistant"
    assert first.choices[0].finish_reason == "length"
    assert first.usage.prompt_tokens == 2 * 5 + 3 + 300 + 3
    assert first.usage.completion_tokens == 6
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    messages += [first.choices[0].message.model_dump(), {"role": "user", "content": "go on"}]
    second = openai_client.chat.completions.create(model="any", messages=messages, max_tokens=4)
    # the previous prompt, its 6 reply tokens, <|im_end|> "\n", then 5 + 2 + 3 new ones
    assert second.usage.prompt_tokens == first.usage.prompt_tokens + 6 + 2 + 5 + 2 + 3
    cached = _reuse(first.usage.prompt_tokens, second.usage.prompt_tokens)
    assert second.usage.prompt_tokens_details.cached_tokens == cached == 256
    chunks = list(
        openai_client.chat.completions.create(
            model="any",
            messages=messages,
            max_completion_tokens=4,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == second.choices[0].message.content and len(pieces(text)) == 4
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    usage = chunks[-1].usage
    assert usage.prompt_tokens == second.usage.prompt_tokens and usage.completion_tokens == 4
    assert usage.prompt_tokens_details.cached_tokens == 256


CHAT = [{"role": "user", "content": "hello"}]


@pytest.mark.parametrize(
    ("route", "arguments", "param"),
    [
        ("chat", {"n": 2}, "n"),
        ("chat", {"logprobs": True}, "logprobs"),
        ("chat", {"top_logprobs": 2}, "top_logprobs"),
        ("chat", {"stop": ["."]}, "stop"),
        ("chat", {"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ("chat", {"response_format": {"type": "json_object"}}, "response_format"),
        ("chat", {"max_completion_tokens": None}, "max_completion_tokens"),
        ("chat", {"extra_body": {"guided_regex": "a+"}}, "guided_regex"),
        (
            "chat",
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
            "messages[0].content[0].type",
        ),
        (
            "chat",
            {"messages": [{"role": "assistant", "content": "x", "tool_calls": [{"id": "1"}]}]},
            "messages[0].tool_calls",
        ),
        ("completions", {"n": 2}, "n"),
        ("completions", {"echo": True}, "echo"),
        ("completions", {"logprobs": 0}, "logprobs"),
        ("completions", {"stop": "\n"}, "stop"),
        ("completions", {"best_of": 3}, "best_of"),
        ("completions", {"prompt": [5, 151_936]}, "prompt"),
    ],
)
def test_what_the_emulator_does_not_implement_is_a_400_naming_the_field(
    openai_client: Any, route: str, arguments: dict, param: str
) -> None:
    from openai import BadRequestError

    if route == "chat":
        call = openai_client.chat.completions.create
        arguments = {"model": "any", "messages": CHAT, "max_completion_tokens": 3} | arguments
    else:
        call = openai_client.completions.create
        arguments = {"model": "any", "prompt": [7, 8, 9], "max_tokens": 3} | arguments
    with pytest.raises(BadRequestError) as info:
        call(**arguments)
    assert info.value.status_code == 400 and info.value.param == param
    assert f"'{param}'" in info.value.message


def test_fields_that_change_nothing_are_accepted(openai_client: Any) -> None:
    reply = openai_client.chat.completions.create(
        model="any",
        messages=[{"role": "developer", "content": [{"type": "text", "text": "be brief"}]}],
        max_completion_tokens=2,
        n=1,
        logprobs=False,
        stop=None,
        tool_choice="none",
        seed=1,
        top_p=0.9,
        presence_penalty=0.5,
        user="someone",
        store=False,
    )
    assert reply.usage.prompt_tokens == 5 + 2 + 3 and reply.usage.completion_tokens == 2
