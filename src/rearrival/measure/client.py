"""The async replay client (paper Section II-C/D, docs/DESIGN.md "Measurement backends").

One asyncio task per session sends the session's round 0 at its ``start_s``, waits for
the complete streamed response, sleeps the round's tool gap, and sends the next round,
until the session's last round. Prompts are token ids, so prefix identity holds by
construction: round k+1 sends the exact token-id transcript so far (every earlier
prompt, the ids the server generated, and the round's new ids; for the paper's
two-round session the follow-up is prompt + generated + 8 appended ids). A session's
new ids are derived from (plan seed, session, round) so no two sessions share a
prefix. Decoding is greedy (temperature 0, fixed seed, ``ignore_eos``) so every
request generates exactly its planned length.

The client records what channel B needs (send and completion time of every request) and
every token time, scrapes the Prometheus counters before and after the run, and reads
reuse per request from ``usage.prompt_tokens_details.cached_tokens``, which must sum to
the run's delta of ``vllm:prompt_tokens_cached_total`` -- never from
``prefix_cache_hits``, which reports hits after the slot was evicted (paper Section
II-D). Anything that cuts a run short (unreachable server, HTTP error, truncated stream,
wrong token count, reuse the counter does not confirm, a step log that does not cover
the requests) ends the run with status ``failed``/``partial`` and the reason, never
``complete``. The client is engine-neutral: what an engine's step log looks like is the
``StepLog`` its backend passes in (``[BUCKET]`` lines or vLLM's iteration lines).

This module is the replay itself; its parts are modules of their own: ``prompt_ids``
(the vocabulary-bounded token draw), ``counters`` (the Prometheus /metrics counters and
their delta), ``completion_stream`` (reading one streamed completion), ``client_http``
(the client's errors and its GETs), ``client_records`` (a replay as a run directory and
its status) and ``emulate_client`` (replaying against a running emulate-server).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import aiohttp

from rearrival.measure.client_http import ClientError, describe, served_model
from rearrival.measure.completion_stream import CompletionStream, absorb_chunk, cached_from_usage
from rearrival.measure.counters import scrape_metrics, summed
from rearrival.measure.prompt_ids import ANY_ID_HIGH, TOKEN_ID_LOW, new_ids, plan_key, prefix_ids
from rearrival.measure.records.contract import RequestRecord, TokenRecord
from rearrival.model.plans.plan import AnySession, Plan


@dataclass(frozen=True)
class ReplayOptions:
    """How the client drives a server; validated so a typo cannot silently change a run.

    ``time_scale`` is wall seconds per plan second: session starts and tool gaps are
    slept scaled and every recorded time is divided by it, so records stay in plan
    (virtual) seconds.
    """

    seed: int = 0
    model: str | None = None
    time_scale: float = 1.0
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 600.0
    # the served model's vocabulary (its config.json vocab_size); None: any id is taken
    vocab_size: int | None = None
    # a fleet behind a router (README "A study on a real fleet"): the header that carries
    # the session id (vllm-router's consistent_hash keys on X-Session-ID), the prefix of
    # the X-Request-Id every request carries (vLLM names the request by it in its log,
    # which is how a request is matched to the replica that served it), and the servers
    # whose counters are scraped before and after (default: the URL replayed against)
    session_header: str | None = None
    request_id_prefix: str | None = None
    metrics_urls: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.vocab_size is not None and not (
            isinstance(self.vocab_size, int) and self.vocab_size > TOKEN_ID_LOW + 1
        ):
            raise ClientError(
                f"vocab_size {self.vocab_size!r}: prompt ids are drawn from {TOKEN_ID_LOW} "
                "up to the model's vocabulary, which must be larger; check its config.json"
            )
        if not (self.time_scale > 0 and math.isfinite(self.time_scale)):
            raise ClientError(
                f"time_scale {self.time_scale}: must be a positive number "
                "(wall seconds per plan second, e.g. 0.05)"
            )
        for name in ("connect_timeout_s", "read_timeout_s"):
            if not getattr(self, name) > 0:
                raise ClientError(f"client option '{name}' must be > 0 seconds")


@dataclass(frozen=True)
class Reply:
    """One finished request: its run-record row, and the ids it generated with the time
    each reached the client (the ids extend the session's transcript)."""

    record: RequestRecord
    token_ids: tuple[int, ...]
    token_times_s: tuple[float, ...]


@dataclass(frozen=True)
class ClientRun:
    """Everything one replay observed; ``status`` is 'complete' only if nothing failed."""

    replies: tuple[Reply, ...]
    metrics_before: dict[str, float]
    metrics_after: dict[str, float]
    status: str
    reason: str | None
    model: str | None
    expected_requests: int
    # per scraped server (ReplayOptions.metrics_urls), its counters before and after
    server_metrics: tuple[tuple[dict[str, float], dict[str, float]], ...] = ()

    @property
    def requests(self) -> tuple[RequestRecord, ...]:
        return tuple(reply.record for reply in self.replies)

    def tokens(self) -> list[TokenRecord]:
        """Every generated token's arrival at the client, request by request."""
        return [
            TokenRecord(r.record.session, r.record.round, i, t)
            for r in self.replies
            for i, t in enumerate(r.token_times_s)
        ]

    def cut_short(self, status: str, reason: str) -> ClientRun:
        """The same observations under a status and reason found after the replay."""
        return replace(self, status=status, reason=reason)

    def placed(self, replicas: Mapping[str, int]) -> ClientRun:
        """The same observations with every request's replica, looked up by its request
        id in ``replicas`` (a fleet run; a request no server logged keeps None)."""
        replies = tuple(
            replace(r, record=replace(r.record, replica=replicas.get(r.record.request_id or "")))
            for r in self.replies
        )
        return replace(self, replies=replies)


# --- one request -----------------------------------------------------------------------


class _Clock:
    """Plan seconds since the run origin, from the event loop's monotonic clock."""

    def __init__(self, time_scale: float) -> None:
        self.scale = time_scale
        self.origin = asyncio.get_running_loop().time()

    def now(self) -> float:
        return (asyncio.get_running_loop().time() - self.origin) / self.scale

    async def sleep_until(self, plan_s: float) -> None:
        """Sleep until ``plan_s`` plan seconds after the origin (at once if past)."""
        delay = self.origin + plan_s * self.scale - asyncio.get_running_loop().time()
        if delay > 0:
            await asyncio.sleep(delay)


async def _complete(
    http: aiohttp.ClientSession,
    url: str,
    body: dict[str, Any],
    clock: _Clock,
    headers: dict[str, str] | None = None,
) -> tuple[float, CompletionStream]:
    """POST one streamed completion; returns (send time, stream state).

    Never retried: once the request may have reached the scheduler, a second send would
    be a second admission and change the run.
    """
    endpoint = f"{url}/v1/completions"
    stream = CompletionStream()
    send_s = clock.now()
    try:
        async with http.post(endpoint, json=body, headers=headers) as resp:
            if resp.status != 200:
                text = (await resp.text()).strip()
                raise ClientError(f"POST {endpoint} returned HTTP {resp.status}: {text[:200]!r}")
            async for raw in resp.content:
                line = raw.decode(errors="replace").strip()
                if line.startswith("data:"):
                    absorb_chunk(stream, line[5:].strip(), clock.now(), endpoint)
                if stream.done:
                    break
    except aiohttp.ClientConnectorError as exc:
        raise ClientError(
            f"cannot connect to {endpoint} ({describe(exc)}); is the server running?"
        ) from None
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise ClientError(
            f"POST {endpoint} broke off ({describe(exc)}); the server died or timed out"
        ) from None
    if not stream.done:
        raise ClientError(
            f"POST {endpoint}: stream ended without 'data: [DONE]' after "
            f"{len(stream.token_ids)} tokens (truncated response)"
        )
    return send_s, stream


def request_headers(
    options: ReplayOptions, session: int, round_index: int
) -> tuple[dict[str, str], str | None]:
    """The headers of one request and its request id (None when the options send none):
    the session header lets a router pin a session; the request id is what vLLM's log
    names the request by (``cmpl-<id>-...``), unique within the run."""
    headers = {}
    if options.session_header:
        headers[options.session_header] = f"session-{session}"
    request_id = None
    if options.request_id_prefix:
        request_id = f"{options.request_id_prefix}-s{session}-r{round_index}"
        headers["X-Request-Id"] = request_id
    return headers, request_id


async def _request(
    http: aiohttp.ClientSession,
    url: str,
    *,
    model: str,
    prompt: list[int],
    max_tokens: int,
    seed: int,
    clock: _Clock,
    session: int,
    round_index: int,
    options: ReplayOptions,
) -> Reply:
    headers, request_id = request_headers(options, session, round_index)
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "seed": seed,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_token_ids": True,
    }
    send_s, stream = await _complete(http, url, body, clock, headers)
    complete_s = clock.now()
    where = f"session {session} round {round_index}"
    if len(stream.token_ids) != max_tokens:
        raise ClientError(
            f"{where}: server generated {len(stream.token_ids)} tokens, the plan "
            f"needs {max_tokens}; the server must honour ignore_eos and max_tokens"
        )
    usage = stream.usage or {}
    prompt_tokens = int(usage.get("prompt_tokens", len(prompt)))
    cached = cached_from_usage(stream.usage)
    record = RequestRecord(
        session=session,
        round=round_index,
        send_s=send_s,
        first_token_s=stream.token_times[0],
        complete_s=complete_s,
        prompt_tokens=prompt_tokens,
        cached_tokens=cached,
        computed_tokens=None if cached is None else prompt_tokens - cached,
        generated_tokens=len(stream.token_ids),
        request_id=request_id,
    )
    return Reply(record, tuple(stream.token_ids), tuple(stream.token_times))


async def _session_task(
    http: aiohttp.ClientSession,
    url: str,
    s: AnySession,
    key: str,
    model: str,
    options: ReplayOptions,
    clock: _Clock,
    done: list[Reply],
) -> None:
    """The session's rounds in order, each sending the exact token-id transcript so far
    (after the session's shared prefix, when it names one).

    Round 0 leaves at the session's ``start_s``; round k+1 leaves round k's gap after
    round k's response was fully received.
    """
    await clock.sleep_until(s.start_s)
    high = options.vocab_size or ANY_ID_HIGH
    prefix = getattr(s, "prefix", None)
    transcript = prefix_ids(key, prefix, s.prefix_tokens, high) if prefix else []
    for k, r in enumerate(s.rounds):
        transcript += new_ids(key, s.session, k, r.new_tokens, high)
        reply = await _request(
            http,
            url,
            model=model,
            prompt=list(transcript),
            max_tokens=r.gen_tokens,
            seed=options.seed,
            clock=clock,
            session=s.session,
            round_index=k,
            options=options,
        )
        done.append(reply)
        transcript += reply.token_ids
        if r.gap_after_s > 0:
            await asyncio.sleep(r.gap_after_s * options.time_scale)


async def replay(
    plan: Plan, url: str, *, variant: str = "wait", options: ReplayOptions | None = None
) -> ClientRun:
    """Replay ``plan`` (as ``variant``) against an OpenAI-compatible server at ``url``.

    The first failure cancels the other sessions: once the server misbehaves, later
    times would not describe the configuration under test. The result then carries
    status 'failed' (nothing finished) or 'partial' and the first error as reason.
    """
    options = options or ReplayOptions()
    url = url.rstrip("/")
    runnable = plan.variant(variant)
    key = plan_key(plan)
    done: list[Reply] = []
    before: dict[str, float] = {}
    after: dict[str, float] = {}
    model = options.model
    scraped = options.metrics_urls or (url,)
    servers_before: list[dict[str, float]] = []
    servers_after: list[dict[str, float]] = []
    reason: str | None = None
    timeout = aiohttp.ClientTimeout(
        total=None, connect=options.connect_timeout_s, sock_read=options.read_timeout_s
    )
    connector = aiohttp.TCPConnector(limit=0)  # one connection per session, no pool queueing
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:
        try:
            model = model or await served_model(http, url)
            servers_before = [await scrape_metrics(http, u) for u in scraped]
            before = summed(servers_before)
            clock = _Clock(options.time_scale)
            async with asyncio.TaskGroup() as group:
                for s in runnable.sessions:
                    group.create_task(_session_task(http, url, s, key, model, options, clock, done))
            servers_after = [await scrape_metrics(http, u) for u in scraped]
            after = summed(servers_after)
        except* ClientError as group_error:
            reason = str(group_error.exceptions[0])
    status = "complete" if reason is None else ("partial" if done else "failed")
    ordered = tuple(sorted(done, key=lambda r: (r.record.session, r.record.round)))
    return ClientRun(
        replies=ordered,
        metrics_before=before,
        metrics_after=after,
        status=status,
        reason=reason,
        model=model,
        expected_requests=plan.requests,
        server_metrics=(
            tuple(zip(servers_before, servers_after, strict=False)) if options.metrics_urls else ()
        ),
    )


def replay_sync(
    plan: Plan, url: str, *, variant: str = "wait", options: ReplayOptions | None = None
) -> ClientRun:
    """Blocking wrapper for CLI verbs and pipeline rules."""
    return asyncio.run(replay(plan, url, variant=variant, options=options))
