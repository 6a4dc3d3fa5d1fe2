"""What ``rearrival emulate-server`` takes from an OpenAI request, and what it refuses.

docs/DESIGN.md §5. The emulator models how many tokens a request computes, reuses and
generates and when; it generates exactly ``max_tokens`` ids that are a fixed function of
its seed and the prompt (like greedy decoding with ``ignore_eos``). So a request field
falls in one of three kinds:

- **used**: the prompt (token ids, or chat messages tokenised by
  :mod:`rearrival.measure.emulate.tokens`), ``max_tokens`` (chat:
  ``max_completion_tokens`` too), ``stream`` and ``stream_options.include_usage``;
- **accepted, no effect** (``NO_EFFECT``): sampling parameters choose which tokens a
  real model emits, never how many, and the emulator's tokens carry no meaning; the
  model name and bookkeeping fields change nothing either;
- **refused unless it asks for nothing** (``REFUSED``): a field that would change the
  shape, the number or the content of what comes back (more choices, log-probabilities,
  the prompt echoed, stop strings, tool calls, a response format) is answered with
  HTTP 400 naming it, unless its value is the default; so is any field not listed here.

A field given as ``null`` asks for nothing and is always accepted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rearrival.measure.emulate.tokens import CHAT_ROLES, VOCAB_SIZE, ChatMessage, chat_prompt

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's and vLLM's default on /v1/completions

_NUMBER = (int, float)
# Field -> the JSON types it may have. Accepted and without effect on what is generated.
NO_EFFECT: dict[str, tuple[type, ...]] = {
    "model": (str,),
    "temperature": _NUMBER,
    "top_p": _NUMBER,
    "top_k": (int,),
    "min_p": _NUMBER,
    "seed": (int,),
    "frequency_penalty": _NUMBER,
    "presence_penalty": _NUMBER,
    "repetition_penalty": _NUMBER,
    "user": (str,),
    "metadata": (dict,),
    "store": (bool,),
    "safety_identifier": (str,),
    "prompt_cache_key": (str,),
    "parallel_tool_calls": (bool,),
    "ignore_eos": (bool,),  # the emulated model emits no EOS, so it holds either way
    "return_token_ids": (bool,),  # /v1/completions always returns them
}
_ONE_CHOICE = "the emulator returns one choice"
_NO_LOGPROBS = "the emulator computes no log-probabilities"
_NO_STOP = "the emulator never stops early: it generates exactly max_tokens tokens"
_TEXT_ONLY = "the emulator generates plain text, never tool calls or structured output"
# Field -> (the values that ask for nothing, why any other value is refused).
REFUSED: dict[str, tuple[tuple[Any, ...], str]] = {
    "n": ((1,), _ONE_CHOICE),
    "best_of": ((1,), _ONE_CHOICE),
    "logprobs": ((False,), _NO_LOGPROBS),
    "top_logprobs": ((), _NO_LOGPROBS),
    "prompt_logprobs": ((), _NO_LOGPROBS),
    "echo": ((False,), "the emulator does not return the prompt"),
    "suffix": (("",), "the emulator does not insert text"),
    "stop": (("", []), _NO_STOP),
    "stop_token_ids": (([],), _NO_STOP),
    "logit_bias": (({},), "the emulator's tokens follow no bias"),
    "tools": (([],), _TEXT_ONLY),
    "tool_choice": (("none",), _TEXT_ONLY),
    "functions": (([],), _TEXT_ONLY),
    "function_call": (("none",), _TEXT_ONLY),
    "response_format": (({"type": "text"},), _TEXT_ONLY),
    "modalities": ((["text"],), _TEXT_ONLY),
}
# Message fields: role and text are what the template renders, name and tool_call_id
# change nothing; any other must ask for nothing (null or empty).
MESSAGE_NO_EFFECT = frozenset({"role", "content", "name", "tool_call_id"})
MESSAGE_TOOL_FIELDS = frozenset({"tool_calls", "function_call"})
_TEMPLATE = "the emulator renders a message's role and text content only"


class RequestError(Exception):
    """A request answered with HTTP 400; ``param`` names the offending field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Generation:
    """What one request asks the engine for."""

    prompt: tuple[int, ...]
    max_tokens: int
    stream: bool
    include_usage: bool


def _same(value: Any, default: Any) -> bool:
    """Equal and of the same JSON type (so ``true`` is not ``1`` and ``0`` not ``false``)."""
    return type(value) is type(default) and value == default


def _is_type(value: Any, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool):
        return bool in types
    return isinstance(value, types)


def _check_fields(body: dict[str, Any], used: frozenset[str]) -> None:
    """Refuse every field outside ``used`` that asks for something not emulated."""
    for field, value in body.items():
        if field in used or value is None:
            continue
        if field in NO_EFFECT:
            if not _is_type(value, NO_EFFECT[field]):
                kinds = " or ".join(sorted({t.__name__ for t in NO_EFFECT[field]}))
                raise RequestError(f"field '{field}' must be {kinds}, got {value!r}", field)
            continue
        if field in REFUSED:
            defaults, reason = REFUSED[field]
            if any(_same(value, d) for d in defaults):
                continue
            raise RequestError(f"field '{field}' = {value!r} is not supported: {reason}", field)
        raise RequestError(
            f"field '{field}' is not supported by the emulator; omit it (docs/DESIGN.md §5 "
            "lists the fields emulate-server takes)",
            field,
        )


def _positive(body: dict[str, Any], field: str) -> int:
    value = body[field]
    if type(value) is not int or value < 1:
        raise RequestError(f"field '{field}' must be a positive integer", field)
    return value


def _streaming(body: dict[str, Any]) -> tuple[bool, bool]:
    """(stream, include_usage); usage is sent once, after the last token."""
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise RequestError("field 'stream' must be true or false", "stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise RequestError("field 'stream_options' must be an object", "stream_options")
    for key, value in options.items():
        if key == "include_usage" or value is None or value is False:
            continue
        if key != "include_obfuscation":  # OpenAI's padding field; the emulator pads nothing
            raise RequestError(
                f"field 'stream_options.{key}' is not supported: the emulator sends usage "
                "once, after the last token (stream_options.include_usage)",
                f"stream_options.{key}",
            )
    return bool(stream), bool(options.get("include_usage", False))


def parse_completion(body: Any) -> Generation:
    """A ``/v1/completions`` request: a token-id prompt below the vocabulary."""
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    prompt = body.get("prompt")
    if (
        not isinstance(prompt, list)
        or not prompt
        or any(type(t) is not int or t < 0 for t in prompt)
    ):
        raise RequestError(
            "field 'prompt' must be a non-empty list of token ids "
            "(non-negative integers); this server takes token-id prompts",
            "prompt",
        )
    too_large = max(prompt)
    if too_large >= VOCAB_SIZE:
        raise RequestError(
            f"field 'prompt': token id {too_large} is out of vocabulary; the emulated "
            f"model (Qwen3-4B) has {VOCAB_SIZE:,} ids, 0 to {VOCAB_SIZE - 1:,}",
            "prompt",
        )
    _check_fields(body, frozenset({"prompt", "max_tokens", "stream", "stream_options"}))
    body = {"max_tokens": COMPLETIONS_DEFAULT_MAX_TOKENS} | body
    return Generation(tuple(prompt), _positive(body, "max_tokens"), *_streaming(body))


def _content(message: dict[str, Any], where: str) -> str:
    """A message's text: a string, or text parts joined by newlines."""
    content = message.get("content")
    if content is None and message.get("role") == "assistant":
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise RequestError(f"field '{where}.content' must be text", f"{where}.content")
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind != "text" or not isinstance(part.get("text"), str):
            raise RequestError(
                f"field '{where}.content[{j}].type' is {kind!r}: the emulator takes text "
                "parts only ({'type': 'text', 'text': ...})",
                f"{where}.content[{j}].type",
            )
        texts.append(part["text"])
    return "\n".join(texts)


def _message(message: Any, i: int) -> ChatMessage:
    where = f"messages[{i}]"
    if not isinstance(message, dict):
        raise RequestError(f"field '{where}' must be an object", where)
    role = message.get("role")
    if role not in CHAT_ROLES:
        raise RequestError(
            f"field '{where}.role' is {role!r}; use one of {', '.join(CHAT_ROLES)}",
            f"{where}.role",
        )
    for field, value in message.items():
        if field not in MESSAGE_NO_EFFECT and value not in (None, [], {}):
            reason = _TEXT_ONLY if field in MESSAGE_TOOL_FIELDS else _TEMPLATE
            raise RequestError(
                f"field '{where}.{field}' is not supported: {reason}", f"{where}.{field}"
            )
    return ChatMessage(role, _content(message, where))


def _chat_max_tokens(body: dict[str, Any]) -> int:
    """``max_completion_tokens`` or ``max_tokens`` (equal when both are given); required,
    because the emulated model never ends a reply on its own."""
    given = [f for f in ("max_completion_tokens", "max_tokens") if body.get(f) is not None]
    if not given:
        raise RequestError(
            "field 'max_completion_tokens' is required: the emulated model never ends a reply "
            "on its own, it generates exactly the tokens asked for",
            "max_completion_tokens",
        )
    values = {_positive(body, f) for f in given}
    if len(values) > 1:
        raise RequestError(
            "fields 'max_completion_tokens' and 'max_tokens' differ; give one of them",
            "max_tokens",
        )
    return values.pop()


def parse_chat(body: Any) -> Generation:
    """A ``/v1/chat/completions`` request: text messages, tokenised by the documented rule."""
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("field 'messages' must be a non-empty list of messages", "messages")
    chat = [_message(m, i) for i, m in enumerate(messages)]
    used = {"messages", "max_tokens", "max_completion_tokens", "stream", "stream_options"}
    _check_fields(body, frozenset(used))
    return Generation(chat_prompt(chat), _chat_max_tokens(body), *_streaming(body))
