"""The emulated model's token ids: its vocabulary and the tokenisation of chat text.

docs/DESIGN.md §5. The emulator has no real tokenizer and no weights, yet a chat client
must get exact ``usage`` (prompt, completion and cached tokens) and a conversation that
re-sends its previous assistant reply must extend its own token sequence, so that prefix
reuse is decided on real ids as on the completions route. The rule, chosen to be simple
to state and to reproduce by hand:

- **pieces**: a text splits into runs of non-whitespace characters, each with the
  whitespace before it (``"ls -la\\n"`` -> ``"ls"``, ``" -la"``, ``"\\n"``); trailing
  whitespace is a piece of its own. One piece is one token, about a word, which keeps
  token counts close to a BPE tokenizer's on prose.
- **ids**: a piece's id is the first 8 bytes of the SHA-256 of its UTF-8 bytes, as a
  big-endian integer, modulo ``ORDINARY_TOKENS``; so ordinary ids never meet the special
  ones, and the same text always gives the same ids.
- **messages** follow Qwen3's ChatML template: each message is ``<|im_start|>``, the
  pieces of ``role + "\\n"``, the pieces of its content, ``<|im_end|>``, the pieces of
  ``"\\n"`` (5 tokens beside the content), and the prompt ends with ``<|im_start|>`` and
  the pieces of ``"assistant\\n"`` (3 tokens), where the reply starts.
- **replies** are made of pieces too (a word of 2-7 lowercase letters, with one space
  before every word but the first), so the reply re-sent as an assistant message
  tokenises to exactly the ids that were generated: the next prompt is the previous
  prompt, the reply, ``<|im_end|>`` and ``"\\n"``, then the new messages.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

# Qwen3-4B, the paper's model (Section II-A): config.json's vocab_size, the embedding
# rows. vLLM refuses a prompt id above max(tokenizer's largest id, vocab_size - 1) with
# "Token id N is out of vocabulary" (vllm/renderers/base.py, validate_token_ids); so does
# the emulator.
VOCAB_SIZE = 151_936
# Qwen3's byte-level BPE tokens are ids 0-151,642; its special tokens start at 151,643
# (<|endoftext|>), so generated and text ids stay below it.
ORDINARY_TOKENS = 151_643
IM_START = 151_644  # <|im_start|> in Qwen3's tokenizer
IM_END = 151_645  # <|im_end|>
CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")
_PIECE = re.compile(r"\s*\S+|\s+")
_REPLY_WORD_LETTERS = (2, 7)


@lru_cache(maxsize=1 << 16)
def piece_id(piece: str) -> int:
    """The token id of one piece (see the module docstring)."""
    digest = hashlib.sha256(piece.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % ORDINARY_TOKENS


def pieces(text: str) -> list[str]:
    """The pieces of a text; joined again they give the text back."""
    return _PIECE.findall(text)


def text_ids(text: str) -> list[int]:
    return [piece_id(p) for p in pieces(text)]


@dataclass(frozen=True)
class ChatMessage:
    """One message of a chat request: its role and its text content."""

    role: str
    content: str


def chat_prompt(messages: Sequence[ChatMessage]) -> tuple[int, ...]:
    """The prompt ids of a conversation, ending where the assistant's reply starts."""
    ids: list[int] = []
    for message in messages:
        ids += [IM_START, *text_ids(message.role + "\n"), *text_ids(message.content), IM_END]
        ids += text_ids("\n")
    return (*ids, IM_START, *text_ids("assistant\n"))


def reply_pieces(seed: int, prompt: tuple[int, ...], count: int) -> list[str]:
    """``count`` reply pieces, a deterministic function of the server seed and the prompt
    (like greedy decoding); their ids are ``piece_id`` of each."""
    digest = hashlib.sha256(f"{seed}|chat|".encode() + json.dumps(prompt).encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    words = (
        "".join(rng.choices(string.ascii_lowercase, k=rng.randint(*_REPLY_WORD_LETTERS)))
        for _ in range(count)
    )
    return [word if k == 0 else " " + word for k, word in enumerate(words)]
