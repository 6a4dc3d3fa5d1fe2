"""The ``emulated-http`` backend: the emulator engine behind a real aiohttp server.

docs/DESIGN.md §5: the real replay client is tested against this server, so it speaks the
parts of vLLM's OpenAI-compatible API the client uses -- ``/v1/completions`` with
token-id prompts, ``max_tokens``, ``ignore_eos`` and streaming (SSE ``data: {...}``
chunks, ``data: [DONE]``), ``/v1/models``, ``/health`` and Prometheus ``/metrics`` with
``vllm:prompt_tokens_cached_total``, ``vllm:prefix_cache_queries_total`` and
``vllm:prefix_cache_hits_total`` (which over-reports after eviction, as on the real
stack) -- and it logs the observation patch's ``[BUCKET]`` line for every decode step.
``/v1/chat/completions`` serves agents written against the chat API (and the
OpenTelemetry instrumentations that trace it): text messages become token ids by the
documented rule of :mod:`rearrival.measure.emulate.tokens`, so ``usage`` and cached
tokens stay exact. Both routes refuse, with HTTP 400 naming the field, what the emulator
does not implement (:mod:`rearrival.measure.emulate.request_fields`).

Clock: the engine runs steps back to back on its own virtual timeline and the server
paces them against the wall clock: a step ending at virtual time v is delivered at wall
time ``start + v * time_scale`` (``time_scale`` = wall seconds per virtual second, e.g.
0.05 runs 20x faster than the device). Requests are stamped with the virtual time at
which they reach the server, so they are admitted at the next step boundary after
arrival, exactly as the in-process driver does.

Prefix identity: the engine reuses KV by session key. The server gives a request the
key of the longest earlier prompt that is a token-for-token prefix of it, else a new
key, so reuse arises only where the token ids really repeat (each later round of a
client session is the transcript so far: earlier prompt + generated + new ids, so every
round of a session maps to its round 0's key). Generated ids are a deterministic
function of the server seed and the prompt, like greedy decoding.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import random
import signal
import sys
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily

from rearrival.errors import RearrivalError
from rearrival.measure.emulate.engine import EMULATOR_VERSION, Engine, StepOutcome
from rearrival.measure.emulate.observed import arrival_line
from rearrival.measure.emulate.request_fields import (
    Generation,
    RequestError,
    parse_chat,
    parse_completion,
)
from rearrival.measure.emulate.tokens import ORDINARY_TOKENS, VOCAB_SIZE, piece_id, reply_pieces
from rearrival.measure.emulate.truth import load_truth
from rearrival.model.configuration import RblnConfiguration

MODEL_NAME = "rearrival-emulated-qwen3"
_DONE = object()
METRIC_HELP = {
    "vllm:prompt_tokens_total": "Prompt tokens received.",
    "vllm:generation_tokens_total": "Generated tokens.",
    "vllm:prompt_tokens_cached_total": "Prompt tokens served from surviving KV (true reuse).",
    "vllm:prefix_cache_queries_total": "Prompt tokens looked up in the prefix cache.",
    "vllm:prefix_cache_hits_total": "Prefix-cache hits as the prefix index reports them "
    "(over-reports after eviction).",
}


class EmulateServerError(RearrivalError):
    """Bad emulate-server options; names the option and the fix."""


@dataclass(frozen=True)
class ServerOptions:
    """What one emulate-server serves: a compiled configuration and its clock."""

    config: RblnConfiguration
    seed: int = 0
    time_scale: float = 1.0
    log_path: Path | None = None
    truth_path: Path | None = None  # emulator truth file; None: the shipped twin

    def __post_init__(self) -> None:
        if not self.time_scale > 0:
            raise EmulateServerError(
                f"time_scale {self.time_scale}: must be > 0 (wall "
                "seconds per emulated second, e.g. 0.05)"
            )
        if self.seed < 0:
            raise EmulateServerError(f"seed {self.seed}: must be >= 0")


class _Counters:
    """Prometheus view of the counters as of the last delivered step (private registry).

    The engine counts a step when it schedules it; the server publishes the counts when
    the step ends in wall time, as a real server would.
    """

    def __init__(self, engine: Engine) -> None:
        self.published = dict(engine.counters)

    def collect(self) -> Any:
        for name, value in self.published.items():
            family = CounterMetricFamily(
                name.removesuffix("_total"), METRIC_HELP.get(name, name), labels=["model_name"]
            )
            family.add_metric([MODEL_NAME], value)
            yield family


@dataclass
class _Live:
    """A submitted request: its planned ids and the queue its handler reads."""

    request_id: str
    prompt_tokens: int
    token_ids: list[int]
    queue: asyncio.Queue[Any]
    sent: int = 0
    cached_tokens: int | None = None


class _Prefixes:
    """Session keys by token-id prefix: the longest known prompt that prefixes a new one."""

    def __init__(self) -> None:
        self._by_head: dict[int, list[tuple[tuple[int, ...], int]]] = {}
        self._keys = itertools.count()

    def key_for(self, prompt: tuple[int, ...]) -> int:
        best: tuple[int, int] | None = None  # (length, key)
        for known, key in self._by_head.get(prompt[0], []):
            if (
                len(known) <= len(prompt)
                and prompt[: len(known)] == known
                and (best is None or len(known) > best[0])
            ):
                best = (len(known), key)
        key = next(self._keys) if best is None else best[1]
        self._by_head.setdefault(prompt[0], []).append((prompt, key))
        return key


def _generated_ids(seed: int, prompt: tuple[int, ...], count: int) -> list[int]:
    digest = hashlib.sha256(f"{seed}|".encode() + json.dumps(prompt).encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    return [rng.randrange(ORDINARY_TOKENS) for _ in range(count)]


class EmulateServer:
    """The aiohttp application around one engine; owns the engine's clock."""

    def __init__(self, options: ServerOptions, log: IO[str] | None = None) -> None:
        self.options = options
        self.engine = Engine(
            options.config, seed=options.seed, truth=load_truth(options.truth_path)
        )
        self.prefixes = _Prefixes()
        self.live: dict[str, _Live] = {}
        self.log_lines: list[str] = []
        self._log = log
        self._log_seen = 0
        self._ids = itertools.count()
        self._counters = _Counters(self.engine)
        self._registry = CollectorRegistry()
        self._registry.register(self._counters)
        self._wake = asyncio.Event()
        self._origin = 0.0
        self._failure: str | None = None
        self._driver: asyncio.Task[None] | None = None

    # -- clock ---------------------------------------------------------------------------

    def virtual_now(self) -> float:
        return (asyncio.get_running_loop().time() - self._origin) / self.options.time_scale

    async def _sleep_until(self, virtual_s: float) -> None:
        wall = self._origin + virtual_s * self.options.time_scale
        delay = wall - asyncio.get_running_loop().time()
        if delay > 0:
            await asyncio.sleep(delay)

    # -- engine driver -------------------------------------------------------------------

    async def _drive(self) -> None:
        """Run steps back to back while there is work; sleep until woken otherwise.

        After an idle spell the next step starts at the waiting request's arrival (as
        the in-process driver jumps to it), not at the moment the driver woke up.
        """
        engine = self.engine
        busy_until = 0.0
        continuing = False
        while True:
            if continuing:
                now = busy_until
            else:
                arrival = engine.next_arrival_s
                now = max(busy_until, self.virtual_now() if arrival is None else arrival)
            outcome = engine.step(now)
            if outcome is None:
                continuing = False
                self._wake.clear()
                upcoming = engine.next_arrival_s
                timeout = (
                    None
                    if upcoming is None
                    else max(0.0, (upcoming - self.virtual_now()) * self.options.time_scale)
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout)
                continue
            await self._sleep_until(outcome.end_s)
            busy_until, continuing = outcome.end_s, True
            self._deliver(outcome)

    def _deliver(self, outcome: StepOutcome) -> None:
        """Hand a finished step's effects to the waiting handlers, at its end time."""
        self._emit_log()
        self._counters.published = dict(self.engine.counters)
        if outcome.admission is not None:
            self.live[
                str(outcome.admission.request_id)
            ].cached_tokens = outcome.admission.cached_tokens
        for request_id in outcome.emitted:
            live = self.live[str(request_id)]
            live.queue.put_nowait(live.token_ids[live.sent])
            live.sent += 1
        for done in outcome.finished:
            live = self.live.pop(str(done.request_id))
            live.queue.put_nowait(_DONE)

    def _emit_log(self, extra: tuple[str, ...] = ()) -> None:
        """Copy the engine's new log lines (and ``extra``) to the server log."""
        lines = [*self.engine.log_lines[self._log_seen :], *extra]
        self._log_seen = len(self.engine.log_lines)
        self._write_log(lines)

    def _write_log(self, lines: list[str]) -> None:
        if not lines:
            return
        self.log_lines.extend(lines)
        if self._log is not None:
            self._log.write("".join(line + "\n" for line in lines))
            self._log.flush()

    def _driver_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self._failure = f"engine stopped: {type(exc).__name__}: {exc}"
            self._emit_log((f"ERROR {self._failure}",))
            for live in self.live.values():
                live.queue.put_nowait(exc)

    # -- HTTP ----------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/rearrival/log", self.server_log)
        app.router.add_get("/rearrival/config", self.configuration)
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)
        return app

    async def _start(self, _app: web.Application) -> None:
        self._origin = asyncio.get_running_loop().time()
        self._driver = asyncio.create_task(self._drive())
        self._driver.add_done_callback(self._driver_done)

    async def _stop(self, _app: web.Application) -> None:
        if self._driver is not None:
            self._driver.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._driver

    async def health(self, _request: web.Request) -> web.Response:
        if self._failure is not None:
            return web.Response(status=500, text=self._failure)
        return web.Response(text="ok")

    async def models(self, _request: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": MODEL_NAME,
                        "object": "model",
                        "owned_by": "rearrival",
                        "max_model_len": self.engine.profile.slot_tokens,
                    }
                ],
            }
        )

    async def configuration(self, _request: web.Request) -> web.Response:
        config = self.options.config
        return web.json_response(
            {
                **config.as_dict(),
                "seed": self.options.seed,
                "time_scale": self.options.time_scale,
                "emulator": EMULATOR_VERSION,
                "truth": self.engine.truth.version,
                "vocab_size": VOCAB_SIZE,
            }
        )

    async def server_log(self, _request: web.Request) -> web.Response:
        text = "".join(line + "\n" for line in self.log_lines)
        return web.Response(text=text, headers={"X-Log-Bytes": str(len(text.encode()))})

    async def metrics(self, _request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(self._registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    def _submit(self, generation: Generation, generated: list[int], kind: str) -> _Live:
        """Queue a parsed request with the ids it will generate; ``kind`` prefixes its id."""
        prompt, max_tokens = generation.prompt, generation.max_tokens
        key: Hashable = self.prefixes.key_for(prompt)
        request_id = f"{kind}-{next(self._ids)}"
        arrival_s = self.virtual_now()
        try:
            self.engine.submit(request_id, key, len(prompt), max_tokens, arrival_s)
        except RearrivalError as exc:
            raise RequestError(str(exc)) from None
        self._write_log([arrival_line(arrival_s, request_id, key, len(prompt), max_tokens)])
        live = _Live(request_id, len(prompt), generated, asyncio.Queue())
        self.live[request_id] = live
        self._wake.set()
        return live

    async def _tokens(self, live: _Live) -> Any:
        while True:
            item = await live.queue.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    @staticmethod
    def _usage(live: _Live, generated: int) -> dict[str, Any]:
        usage: dict[str, Any] = {
            "prompt_tokens": live.prompt_tokens,
            "completion_tokens": generated,
            "total_tokens": live.prompt_tokens + generated,
        }
        if live.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": live.cached_tokens}
        return usage

    @staticmethod
    async def _json(request: web.Request) -> Any:
        try:
            return await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise RequestError("request body is not JSON") from None

    async def completions(self, request: web.Request) -> web.StreamResponse:
        if self._failure is not None:
            return _error(500, self._failure)
        try:
            generation = parse_completion(await self._json(request))
            generated = _generated_ids(self.options.seed, generation.prompt, generation.max_tokens)
            live = self._submit(generation, generated, "cmpl")
        except RequestError as exc:
            return _error(400, str(exc), exc.param)
        base = {
            "id": live.request_id,
            "object": "text_completion",
            "created": int(time.time()),
            "model": MODEL_NAME,
        }
        if not generation.stream:
            ids = [token async for token in self._tokens(live)]
            choice = {
                "index": 0,
                "text": "".join(f" t{t}" for t in ids),
                "token_ids": ids,
                "logprobs": None,
                "finish_reason": "length",
            }
            return web.json_response(
                base | {"choices": [choice], "usage": self._usage(live, len(ids))}
            )

        def chunk(count: int, token: int) -> dict[str, Any]:
            return {
                "index": 0,
                "text": f" t{token}",
                "token_ids": [token],
                "logprobs": None,
                "finish_reason": "length" if count == generation.max_tokens else None,
            }

        return await self._stream(request, live, generation, base, chunk)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        """``/v1/chat/completions``: one text choice of exactly ``max_tokens`` pieces."""
        if self._failure is not None:
            return _error(500, self._failure)
        try:
            generation = parse_chat(await self._json(request))
            reply = reply_pieces(self.options.seed, generation.prompt, generation.max_tokens)
            live = self._submit(generation, [piece_id(p) for p in reply], "chatcmpl")
        except RequestError as exc:
            return _error(400, str(exc), exc.param)
        base = {"id": live.request_id, "created": int(time.time()), "model": MODEL_NAME}
        if not generation.stream:
            count = len([token async for token in self._tokens(live)])
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": "".join(reply[:count])},
                "logprobs": None,
                "finish_reason": "length",
            }
            return web.json_response(
                base
                | {
                    "object": "chat.completion",
                    "choices": [choice],
                    "usage": self._usage(live, count),
                }
            )

        def chunk(count: int, _token: int) -> dict[str, Any]:
            finish = "length" if count == generation.max_tokens else None
            delta = {"content": reply[count - 1]}
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}

        base["object"] = "chat.completion.chunk"
        opening = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None}
        return await self._stream(
            request, live, generation, base, chunk, opening | {"finish_reason": None}
        )

    async def _stream(
        self,
        request: web.Request,
        live: _Live,
        generation: Generation,
        base: dict[str, Any],
        chunk: Callable[[int, int], dict[str, Any]],
        opening: dict[str, Any] | None = None,
    ) -> web.StreamResponse:
        """SSE: an ``opening`` choice, one chunk per token, usage if asked, ``[DONE]``."""
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        if opening is not None:
            await _sse(response, base | {"choices": [opening]})
        count = 0
        async for token in self._tokens(live):
            count += 1
            await _sse(response, base | {"choices": [chunk(count, token)]})
        if generation.include_usage:
            await _sse(response, base | {"choices": [], "usage": self._usage(live, count)})
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _error(status: int, message: str, param: str | None = None) -> web.Response:
    """An OpenAI-style error body; ``param`` names the request field at fault."""
    kind = "invalid_request_error" if status == 400 else "internal_error"
    return web.json_response(
        {"error": {"message": message, "type": kind, "param": param, "code": status}},
        status=status,
    )


async def _sse(response: web.StreamResponse, payload: dict[str, Any]) -> None:
    await response.write(f"data: {json.dumps(payload)}\n\n".encode())


async def serve(options: ServerOptions, host: str, port: int) -> None:
    """Serve until SIGTERM or SIGINT, then close connections and return (exit code 0)."""
    log = options.log_path.open("a") if options.log_path is not None else sys.stdout
    try:
        server = EmulateServer(options, log=log)
        runner = web.AppRunner(server.app(), handle_signals=False, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise EmulateServerError(
                f"port {port}: cannot listen on {host}:{port} ({exc.strerror}); choose a free port"
            ) from None
        print(
            f"emulate-server listening on http://{host}:{port} "
            f"(buckets {list(options.config.buckets)}, batch {options.config.batch_size}, "
            f"slots {options.config.slots}, time scale {options.time_scale})",
            file=sys.stderr,
            flush=True,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await runner.cleanup()
    finally:
        if log is not sys.stdout:
            log.close()


def server_argv(
    config: RblnConfiguration,
    *,
    port: int,
    seed: int,
    time_scale: float,
    host: str = "127.0.0.1",
    truth: Path | None = None,
) -> list[str]:
    """``rearrival emulate-server`` for this interpreter, as an argument list (no shell, no
    reliance on PATH), for launching a fresh server per run
    (rearrival.measure.serve.running_server)."""
    argv = [
        sys.executable,
        "-c",
        "import sys; from rearrival.cli import main; sys.argv[0] = 'rearrival'; main()",
        "emulate-server",
        "--host",
        host,
        "--port",
        str(port),
        "--buckets",
        ",".join(map(str, config.buckets)),
        "--batch-size",
        str(config.batch_size),
        "--seed",
        str(seed),
        "--time-scale",
        repr(float(time_scale)),
    ]
    argv += ["--truth", str(truth)] if truth is not None else []
    return argv + (["--slots", str(config.slots)] if config.slots != config.batch_size else [])
