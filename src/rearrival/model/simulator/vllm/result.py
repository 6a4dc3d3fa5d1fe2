"""What a vLLM simulation returns (docs/DESIGN.md §15 "Interfaces"): per-request records
and the summary that ``rearrival simulate --substrate vllm --json`` prints."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rearrival.model.configuration import VllmConfiguration
from rearrival.model.simulator.vllm.inputs import VllmInputs


@dataclass(frozen=True)
class RawRun:
    """What a core fills: per-request columns in request id ((session, round)) order and
    the run's totals. ``cached_tokens`` is the prefix hit at a request's first admission;
    ``steps`` the engine steps that computed any of its tokens."""

    cached_tokens: list[int]
    preemptions: list[int]
    steps: list[int]
    arrival_s: list[float]
    first_scheduled_s: list[float]
    first_token_s: list[float]
    finish_s: list[float]
    total_steps: int
    decode_tokens: int
    prefill_tokens: int
    device_s: float
    makespan_s: float


@dataclass(frozen=True, slots=True)
class VllmRequestRecord:
    """One request's outcome on the vLLM substrate."""

    session: int
    round: int
    prompt_tokens: int
    gen_tokens: int
    cached_tokens: int  # prefix hit at its first admission
    preemptions: int
    steps: int  # engine steps that computed any of its tokens
    arrival_s: float
    first_scheduled_s: float  # start of the first step computing any of its tokens
    first_token_s: float  # end of the step that sampled its first token (docs/DESIGN.md §16)
    finish_s: float  # end of the step that sampled its last token

    def row(self) -> dict[str, Any]:
        """The summary's ``requests`` row."""
        return {
            "session": self.session,
            "round": self.round,
            "cached_tokens": self.cached_tokens,
            "preemptions": self.preemptions,
            "arrival_s": self.arrival_s,
            "first_scheduled_s": self.first_scheduled_s,
            "first_token_s": self.first_token_s,
            "finish_s": self.finish_s,
        }


class VllmResult:
    """One plan on one vLLM configuration."""

    def __init__(self, inputs: VllmInputs, configuration: VllmConfiguration, run: RawRun) -> None:
        self.inputs = inputs
        self.configuration = configuration
        self.run = run
        self._records: tuple[VllmRequestRecord, ...] | None = None

    @property
    def requests(self) -> tuple[VllmRequestRecord, ...]:
        """Per-request records in (session, round) order."""
        if self._records is None:
            a, r = self.inputs.arrays, self.run
            self._records = tuple(
                VllmRequestRecord(
                    a.session_of[rid],
                    a.round_of[rid],
                    a.prompt[rid],
                    a.gen[rid],
                    r.cached_tokens[rid],
                    r.preemptions[rid],
                    r.steps[rid],
                    r.arrival_s[rid],
                    r.first_scheduled_s[rid],
                    r.first_token_s[rid],
                    r.finish_s[rid],
                )
                for rid in range(a.requests)
            )
        return self._records

    @property
    def device_s(self) -> float:
        return self.run.device_s

    @property
    def makespan_s(self) -> float:
        return self.run.makespan_s

    @property
    def re_arrivals(self) -> int:
        return self.inputs.arrays.requests - self.inputs.arrays.sessions

    def cacheable_tokens(self, rid: int) -> int:
        """What a re-arrival would hit on a pool that never evicts
        (``VllmInputs.cacheable_tokens``)."""
        return self.inputs.cacheable_tokens(rid)

    @property
    def never_evicted_prefill(self) -> int:
        """The prefill tokens of the same plan and knobs on a pool that never evicts: there
        nothing is preempted and every request hits what the round before it left
        cacheable, so it computes its prompt less that.

        A shared prefix's full blocks (docs/DESIGN.md §16) count as computed once per plan: by the
        first session naming it (in session order), while every other session's round 0
        hits them, capped at its prompt - 1 (rule 2). vLLM computes a prefix block twice
        when two round 0s naming it prefill at once (a look-up sees only the blocks already
        scheduled), so even that pool may prefill more than this; never less, since some
        round 0 computes each prefix block."""
        inputs = self.inputs
        a, bs = inputs.arrays, inputs.block_size
        total = sum(a.prompt[rid] - self.cacheable_tokens(rid) for rid in range(a.requests))
        seen: set[int] = set()
        for s, prefix in enumerate(a.prefix_of):
            if prefix < 0:
                continue
            if prefix in seen:
                rid = a.first[s]
                total -= min(inputs.shared_blocks[rid], (a.prompt[rid] - 1) // bs) * bs
            seen.add(prefix)
        return total

    @property
    def re_arrivals_lost(self) -> int:
        """Re-arrivals whose hit fell below what the round before them left cacheable:
        part of their transcript was evicted during the tool wait (or at a preemption).
        Rounds >= 1 only: a round 0's shared-prefix hit (docs/DESIGN.md §16) is not a re-arrival."""
        a, cached = self.inputs.arrays, self.run.cached_tokens
        return sum(
            1
            for rid in range(a.requests)
            if a.round_of[rid] and cached[rid] < self.cacheable_tokens(rid)
        )

    def summary(self) -> dict[str, Any]:
        """docs/DESIGN.md §15 "Interfaces": totals and one row per request."""
        r = self.run
        return {
            "steps": r.total_steps,
            "decode_tokens": r.decode_tokens,
            "prefill_tokens": r.prefill_tokens,
            "cached_tokens": sum(r.cached_tokens),
            "preemptions": sum(r.preemptions),
            "re_arrivals": self.re_arrivals,
            "re_arrivals_lost": self.re_arrivals_lost,
            "recomputed_prefill_tokens": r.prefill_tokens - self.never_evicted_prefill,
            "device_s": r.device_s,
            "makespan_s": r.makespan_s,
            "requests": [record.row() for record in self.requests],
        }
