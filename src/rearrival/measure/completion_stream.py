"""One streamed completion as the client reads it (the OpenAI-compatible server-sent
events): the generated token ids, the time each reached the client, and the usage block
that reports the request's cached prompt tokens."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from rearrival.measure.client_http import ClientError


@dataclass
class CompletionStream:
    """Mutable state of one streamed completion while it is being read."""

    token_ids: list[int] = field(default_factory=list)
    token_times: list[float] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    done: bool = False


def absorb_chunk(stream: CompletionStream, payload: str, now: float, url: str) -> None:
    """One ``data:`` payload into ``stream``; a chunk the client cannot use is one line."""
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


def cached_from_usage(usage: dict[str, Any] | None) -> int | None:
    """``usage.prompt_tokens_details.cached_tokens``, None when the server sent none."""
    details = (usage or {}).get("prompt_tokens_details") or {}
    value = details.get("cached_tokens")
    return None if value is None else int(value)
