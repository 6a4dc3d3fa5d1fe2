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
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import pandas as pd
from prometheus_client.parser import text_string_to_metric_families

from rearrival.errors import RearrivalError
from rearrival.measure.records import finish_manifest, write_run
from rearrival.measure.records.contract import DECODE, RequestRecord, StepRecord, TokenRecord
from rearrival.measure.records.frames import requests_frame, steps_frame, tokens_frame
from rearrival.measure.steplog import StepLogError, parse_step_log
from rearrival.model.configuration import knob_names
from rearrival.model.plans.plan import AnySession, Plan

# Prompt ids start here: below it most tokenizers keep their control and byte tokens.
TOKEN_ID_LOW = 1_000
# A server that takes any non-negative id (emulate-server) gets ids below this bound:
# Qwen3's ordinary vocabulary (its special tokens start at 151643), the model the twin
# stands for. A real engine's bound is its model's vocab_size (ReplayOptions.vocab_size).
ANY_ID_HIGH = 150_000
GET_RETRIES = 3
CACHED_COUNTER = "vllm:prompt_tokens_cached_total"


class ClientError(RearrivalError):
    """A request or scrape that failed; the message says which URL and what happened."""


class UnreachableError(ClientError):
    """Nothing answered at the URL (connection refused or timed out on every retry)."""


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


class StepLog(Protocol):
    """How one engine's step log becomes steps.parquet (docs/DESIGN.md §6): the
    ``[BUCKET]`` lines of the patched vllm-rbln and the twin, or vLLM's iteration lines."""

    def steps(self, log_text: str) -> pd.DataFrame:
        """The steps frame; a garbage line raises StepLogError naming it."""
        ...

    def coverage_problem(
        self,
        steps: pd.DataFrame,
        requests: Sequence[RequestRecord],
        counters: Mapping[str, float],
    ) -> str | None:
        """Why these steps cannot be the ones that served these requests, or None.
        ``counters`` is the run's delta of the server's counters."""
        ...


# --- prompts ---------------------------------------------------------------------------


def _rng(*parts: object) -> random.Random:
    digest = hashlib.sha256(json.dumps([str(p) for p in parts]).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def plan_key(plan: Plan) -> str:
    """What prompt ids derive from: the plan seed when known, else the plan's content hash."""
    return f"seed:{plan.meta.seed}" if plan.meta.seed is not None else f"sha:{plan.sha256()}"


def new_ids(
    key: str, session: int, round_index: int, count: int, high: int = ANY_ID_HIGH
) -> list[int]:
    """Deterministic ids of the tokens round ``round_index`` appends to the transcript.

    Round 0's first id encodes the session number, so two sessions differ at position 0
    and never share a cached prefix, whatever the random ids after it are. Rounds 0 and
    1 draw from the streams the two-round client always used (the first prompt, then
    the tool result appended before the re-arrival), so the paper's plans send the same
    ids as before multi-round plans existed; later rounds get a stream each. Every id
    lies in [TOKEN_ID_LOW, high): ``high`` is the served model's vocabulary (an id at or
    above it crashes a real engine), ``ANY_ID_HIGH`` for a server that takes any id.
    """
    if round_index == 0:
        head = TOKEN_ID_LOW + session
        if head >= high:
            raise ClientError(
                f"session {session}: too many sessions for distinct prompt heads below "
                f"the model's vocabulary of {high} (at most {high - TOKEN_ID_LOW})"
            )
        rng = _rng("prompt", key, session)
        return [head, *(rng.randrange(TOKEN_ID_LOW, high) for _ in range(count - 1))]
    rng = (
        _rng("append", key, session)
        if round_index == 1
        else _rng("append", key, session, round_index)
    )
    return [rng.randrange(TOKEN_ID_LOW, high) for _ in range(count)]


def prefix_ids(key: str, prefix: str, count: int, high: int = ANY_ID_HIGH) -> list[int]:
    """The token ids of a shared prefix (docs/DESIGN.md §2): the same for every session of
    the plan that names ``prefix``, so its full blocks are one cached chain any of them can
    hit, as the predictor's prefix blocks are; the session's own ids follow it (round 0's
    first new id encodes the session, so two sessions part right after the prefix)."""
    rng = _rng("prefix", key, prefix)
    return [rng.randrange(TOKEN_ID_LOW, high) for _ in range(count)]


# --- metrics ---------------------------------------------------------------------------


def parse_counters(text: str) -> dict[str, float]:
    """Every ``vllm:*_total`` counter sample, summed over label sets (engines, models).

    Untyped samples count too: a ``# TYPE`` line naming the family without ``_total``
    leaves the parser unable to type the sample, yet it is the same counter.
    """
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.type not in ("counter", "unknown", "untyped"):
            continue
        for sample in family.samples:
            if sample.name.startswith("vllm:") and sample.name.endswith("_total"):
                totals[sample.name] = totals.get(sample.name, 0.0) + float(sample.value)
    return totals


async def _get_text(session: aiohttp.ClientSession, url: str) -> str:
    """GET with retries: a read is idempotent, so retrying a refused connection is safe."""
    last: Exception | None = None
    for attempt in range(GET_RETRIES):
        try:
            async with session.get(url) as resp:
                body = await resp.text()
                if resp.status != 200:
                    raise ClientError(
                        f"GET {url} returned HTTP {resp.status}: "
                        f"{body.strip()[:200]!r}; check the server log"
                    )
                return body
        except (aiohttp.ClientConnectionError, TimeoutError) as exc:
            last = exc
            await asyncio.sleep(0.1 * (attempt + 1))
        except aiohttp.ClientError as exc:  # e.g. a malformed URL: retrying cannot help
            raise ClientError(f"GET {url} failed ({_describe(exc)}); fix the server URL") from None
    raise UnreachableError(
        f"cannot reach {url} ({_describe(last)}); start the server or fix the server URL"
    )


async def scrape_metrics(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    text = await _get_text(session, f"{url}/metrics")
    try:
        return parse_counters(text)
    except ValueError as exc:
        raise ClientError(
            f"GET {url}/metrics: not Prometheus text ({exc}); point the server URL at a vLLM server"
        ) from None


async def served_model(session: aiohttp.ClientSession, url: str) -> str:
    """The first model id from /v1/models (what `vllm serve` registered)."""
    body = await _get_text(session, f"{url}/v1/models")
    try:
        return str(json.loads(body)["data"][0]["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise ClientError(
            f"GET {url}/v1/models: no model listed; name the model explicitly or check the server"
        ) from None


# --- one request -----------------------------------------------------------------------


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown error"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass
class _Stream:
    """Mutable state of one streamed completion while it is being read."""

    token_ids: list[int] = field(default_factory=list)
    token_times: list[float] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    done: bool = False


def _absorb_chunk(stream: _Stream, payload: str, now: float, url: str) -> None:
    if payload == "[DONE]":
        stream.done = True
        return
    try:
        chunk = json.loads(payload)
    except json.JSONDecodeError:
        chunk = None
    if not isinstance(chunk, dict):
        raise ClientError(
            f"POST {url}: stream chunk is not a JSON object ({payload[:80]!r}); "
            "point the server URL at an OpenAI-compatible server"
        )
    if "error" in chunk:
        raise ClientError(
            f"POST {url}: server reported an error in the stream: {str(chunk['error'])[:200]}"
        )
    if chunk.get("usage"):
        stream.usage = chunk["usage"]
    for choice in chunk.get("choices") or []:
        ids = choice.get("token_ids")
        if ids is None and choice.get("text"):
            raise ClientError(
                f"POST {url}: the server streams text without token_ids; it must "
                "support 'return_token_ids' (vLLM >= 0.10.2 or emulate-server)"
            )
        if not isinstance(ids, list | None) or any(type(t) is not int for t in ids or []):
            raise ClientError(
                f"POST {url}: 'token_ids' must be a list of integers, got {str(ids)[:80]}"
            )
        stream.token_ids.extend(ids or [])
        stream.token_times.extend([now] * len(ids or []))


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
) -> tuple[float, _Stream]:
    """POST one streamed completion; returns (send time, stream state).

    Never retried: once the request may have reached the scheduler, a second send would
    be a second admission and change the run.
    """
    endpoint = f"{url}/v1/completions"
    stream = _Stream()
    send_s = clock.now()
    try:
        async with http.post(endpoint, json=body, headers=headers) as resp:
            if resp.status != 200:
                text = (await resp.text()).strip()
                raise ClientError(f"POST {endpoint} returned HTTP {resp.status}: {text[:200]!r}")
            async for raw in resp.content:
                line = raw.decode(errors="replace").strip()
                if line.startswith("data:"):
                    _absorb_chunk(stream, line[5:].strip(), clock.now(), endpoint)
                if stream.done:
                    break
    except aiohttp.ClientConnectorError as exc:
        raise ClientError(
            f"cannot connect to {endpoint} ({_describe(exc)}); is the server running?"
        ) from None
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise ClientError(
            f"POST {endpoint} broke off ({_describe(exc)}); the server died or timed out"
        ) from None
    if not stream.done:
        raise ClientError(
            f"POST {endpoint}: stream ended without 'data: [DONE]' after "
            f"{len(stream.token_ids)} tokens (truncated response)"
        )
    return send_s, stream


def _cached_from_usage(usage: dict[str, Any] | None) -> int | None:
    details = (usage or {}).get("prompt_tokens_details") or {}
    value = details.get("cached_tokens")
    return None if value is None else int(value)


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
    cached = _cached_from_usage(stream.usage)
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


def summed(counters: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Counters of several servers added name by name (a fleet's counters as one)."""
    total: dict[str, float] = {}
    for one in counters:
        for name, value in one.items():
            total[name] = total.get(name, 0.0) + value
    return total


def replay_sync(
    plan: Plan, url: str, *, variant: str = "wait", options: ReplayOptions | None = None
) -> ClientRun:
    """Blocking wrapper for CLI verbs and pipeline rules."""
    return asyncio.run(replay(plan, url, variant=variant, options=options))


# --- run records -------------------------------------------------------------------------


class BucketStepLog:
    """steps.parquet from ``[BUCKET]`` lines (the client's ``StepLog`` for the patched
    vllm-rbln and emulate-server): decode steps only, times unknown (NaN).

    A real server log has no per-step times at useful resolution (paper III-C: 1 s) and
    no prefill line, so prefill is priced from the requests' computed tokens instead.
    """

    def steps(self, log_text: str) -> pd.DataFrame:
        return steps_frame([StepRecord(DECODE, n, b) for n, b in parse_step_log(log_text)])

    def coverage_problem(
        self,
        steps: pd.DataFrame,
        requests: Sequence[RequestRecord],
        counters: Mapping[str, float],
    ) -> str | None:
        """Every generated token after the first comes from one decode step, so the
        decode steps must advance exactly sum(generated - 1) request-tokens; anything else
        means DEBUG logging was off, the patch is missing, or the log slice is wrong."""
        advances = sum(r.generated_tokens - 1 for r in requests)
        logged = int(steps["n"].sum())
        if logged == advances:
            return None
        return (
            f"server log holds {len(steps)} [BUCKET] steps advancing {logged} "
            f"tokens, but the requests needed {advances}; run the server with "
            "VLLM_LOGGING_LEVEL=DEBUG and the observation patch applied "
            "(`rearrival rbln patch apply`)"
        )


BUCKET_STEP_LOG = BucketStepLog()


def counter_delta(run: ClientRun) -> dict[str, float]:
    """What each server counter moved during the run (counters scraped both times)."""
    before, after = run.metrics_before, run.metrics_after
    return {name: after[name] - before.get(name, 0.0) for name in after if name in before}


def reuse_problem(run: ClientRun) -> str | None:
    """Why the per-request cached tokens cannot be trusted, or None: each request must
    report them (the server sends ``prompt_tokens_details``), and their sum must equal
    the run's delta of ``vllm:prompt_tokens_cached_total`` (docs/DESIGN.md §15)."""
    missing = [r for r in run.requests if r.cached_tokens is None]
    if missing:
        first = missing[0]
        return (
            f"session {first.session} round {first.round}: the server reported no "
            "usage.prompt_tokens_details.cached_tokens; start vLLM with "
            "--enable-prompt-tokens-details"
        )
    delta = counter_delta(run)
    if CACHED_COUNTER not in delta:
        return f"/metrics has no {CACHED_COUNTER} before and after the run"
    reported = sum(int(r.cached_tokens or 0) for r in run.requests)
    if reported != delta[CACHED_COUNTER]:
        return (
            f"the requests report {reported} cached tokens but {CACHED_COUNTER} moved by "
            f"{delta[CACHED_COUNTER]:g}; the server's reuse reports disagree with its counter"
        )
    return None


def _outcome(run: ClientRun, steps: pd.DataFrame, step_log: StepLog) -> tuple[str, str | None]:
    """The run's status: the client's, unless the requests are not all there, their
    reuse is not confirmed by the counter, or the step log does not cover them."""
    if run.status != "complete":
        return run.status, run.reason
    if len(run.requests) != run.expected_requests:
        return "partial", (f"{len(run.requests)} of {run.expected_requests} requests finished")
    problem = reuse_problem(run) or step_log.coverage_problem(
        steps, run.requests, counter_delta(run)
    )
    return ("failed", problem) if problem else ("complete", None)


@dataclass(frozen=True)
class RunOutcome:
    """Where a run directory was written and whether it is usable."""

    path: Path
    status: str
    reason: str | None


def write_client_run(
    out: Path,
    run: ClientRun,
    *,
    manifest: dict[str, Any],
    server_log: str | None,
    step_log: StepLog = BUCKET_STEP_LOG,
    logs: Mapping[str, str] | None = None,
    problem: str | None = None,
) -> RunOutcome:
    """Write a replay as a run directory (docs/DESIGN.md §6); incomplete runs keep their
    reason. ``logs`` are further logs kept by name (a fleet's router and servers);
    ``problem`` a reason the caller found the run unusable (a complete replay then fails)."""
    try:
        steps = step_log.steps(server_log or "")
        status, reason = _outcome(run, steps, step_log)
        if status == "complete" and problem:
            status, reason = "failed", problem
    except StepLogError as exc:
        steps = step_log.steps("")
        status, reason = (
            ("failed", str(exc)) if run.status == "complete" else (run.status, run.reason)
        )
    metrics = {"before": dict(run.metrics_before), "after": dict(run.metrics_after)}
    write_run(
        out,
        requests=requests_frame(run.requests),
        steps=steps,
        metrics=metrics,
        manifest=finish_manifest(manifest, status=status, reason=reason),
        server_log=server_log,
        tokens=tokens_frame(run.tokens(), server_times=False),
        logs=logs,
    )
    return RunOutcome(out, status, reason)


async def _get_json(url: str) -> Any:
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        text = await _get_text(http, url)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise ClientError(
            f"GET {url}: not JSON; point the server URL at `rearrival emulate-server`"
        ) from None


async def fetch_server_log(url: str, *, since_bytes: int = 0) -> str:
    """The emulate-server's step log (``/rearrival/log``) from byte offset ``since_bytes``."""
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        text = await _get_text(http, f"{url.rstrip('/')}/rearrival/log")
    return text.encode()[since_bytes:].decode(errors="replace")


async def server_configuration(url: str) -> dict[str, Any]:
    """What an emulate-server serves (buckets, batch_size, slots, seed, time_scale)."""
    return dict(await _get_json(f"{url.rstrip('/')}/rearrival/config"))


def check_configuration(served: dict[str, Any], configuration: dict[str, Any], url: str) -> None:
    """Refuse to label a run with a configuration the server does not serve (the
    emulated server is the RBLN twin: its knobs are an RBLN configuration's)."""
    for key in knob_names("rbln"):
        if served.get(key) != configuration[key]:
            raise ClientError(
                f"server {url}: serves {key}={served.get(key)}, the run "
                f"asks for {configuration[key]}; restart emulate-server with the "
                "run's configuration or let the run start a fresh one"
            )


async def replay_url(
    plan: Plan,
    url: str,
    out: Path,
    *,
    variant: str,
    options: ReplayOptions,
    manifest: dict[str, Any],
) -> RunOutcome:
    """Replay against an already running emulate-server and write the run directory.

    The step log is the slice of the server's log written during this replay, so steps
    of earlier runs on the same server never leak into this one.
    """
    try:
        offset: int | None = len((await fetch_server_log(url)).encode())
    except ClientError:
        offset = None  # the replay reports the unreachable server as the run's reason
    run = await replay(plan, url, variant=variant, options=options)
    log = None
    if offset is not None:
        with contextlib.suppress(ClientError):
            log = await fetch_server_log(url, since_bytes=offset)
    return write_client_run(out, run, manifest=manifest, server_log=log)
