"""One predicted-request record for both substrates (docs/DESIGN.md §16): the times
the engine records once per request, from which every latency is derived
(``rearrival.model.fleet.latency``), and the quantities both rule sets predict."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class RequestOutcome:
    """One (session, round) request served by replica ``replica``.

    ``arrival_s`` its send; ``first_scheduled_s`` the start of the first step that computes
    any of its tokens (RBLN: its admission's prefill); ``first_token_s`` the end of the step
    that emits its first generated token (RBLN: the prefill's end); ``finish_s`` the end of
    the step that emits its last; ``cached_tokens`` the prefix reused at its (first)
    admission; ``preemptions`` 0 on RBLN, which never preempts."""

    session: int
    round: int
    replica: int
    prompt_tokens: int
    gen_tokens: int
    cached_tokens: int
    preemptions: int
    arrival_s: float
    first_scheduled_s: float
    first_token_s: float
    finish_s: float

    def row(self) -> dict[str, Any]:
        """The ``simulate --json`` request row."""
        return asdict(self)
