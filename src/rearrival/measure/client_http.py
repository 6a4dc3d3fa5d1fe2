"""The replay client's errors and its reads of a server (docs/DESIGN.md §5): GET with
retries (a read is idempotent), every failure one line naming the URL and the fix."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from rearrival.errors import RearrivalError

GET_RETRIES = 3


class ClientError(RearrivalError):
    """A request or scrape that failed; the message says which URL and what happened."""


class UnreachableError(ClientError):
    """Nothing answered at the URL (connection refused or timed out on every retry)."""


def describe(exc: BaseException | None) -> str:
    """An exception as its type and the first line of its message."""
    if exc is None:
        return "unknown error"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def get_text(session: aiohttp.ClientSession, url: str) -> str:
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
            raise ClientError(f"GET {url} failed ({describe(exc)}); fix the server URL") from None
    raise UnreachableError(
        f"cannot reach {url} ({describe(last)}); start the server or fix the server URL"
    )


async def served_model(session: aiohttp.ClientSession, url: str) -> str:
    """The first model id from /v1/models (what `vllm serve` registered)."""
    body = await get_text(session, f"{url}/v1/models")
    try:
        return str(json.loads(body)["data"][0]["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise ClientError(
            f"GET {url}/v1/models: no model listed; name the model explicitly or check the server"
        ) from None


async def get_json(url: str) -> Any:
    """GET ``url`` as JSON (the emulate-server's own endpoints)."""
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        text = await get_text(http, url)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise ClientError(
            f"GET {url}: not JSON; point the server URL at `rearrival emulate-server`"
        ) from None
