"""vLLM's own step log (docs/DESIGN.md §15): one line per engine iteration, written by the
API server's stat logger when the server runs with ``--enable-logging-iteration-details``:

``Engine 000: Iteration(37): 0 context requests, 0 context tokens, 1 generation requests,
1 generation tokens, iteration elapsed time: 4.85 ms, CPU KV cache usage: 8.7%``

vLLM counts a request as *context* when it is new in the step or still in its prefill
(a later chunk of a chunked prefill too), else as *generation* (a decode). The elapsed
time is the engine core's step, from scheduling to the sampled tokens. Iterations are
numbered from 0 by the engine core; a step with nothing scheduled is never logged.

A line that carries the iteration words but cannot be read, a gap or repeat in the
numbering, or a log whose iterations do not cover the run's requests is one clear error,
never a silently dropped step: channel A prices exactly these steps.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from rearrival.measure.records.contract import (
    DECODE,
    MIXED,
    PREFILL,
    RequestRecord,
    StepRecord,
)
from rearrival.measure.records.frames import steps_frame
from rearrival.measure.steplog import StepLogError
from rearrival.model.buckets import capture_padded

PREEMPTIONS_COUNTER = "vllm:num_preemptions_total"
# Words only vLLM's iteration line holds: a line with them is meant to be one, so it must parse.
_SIGNS = ("Iteration(", "context requests", "generation requests")
_LINE = re.compile(
    r"Iteration\((?P<iteration>\d+)\): (?P<context_requests>\d+) context requests, "
    r"(?P<context_tokens>\d+) context tokens, (?P<generation_requests>\d+) generation "
    r"requests, (?P<generation_tokens>\d+) generation tokens, iteration elapsed time: "
    r"(?P<elapsed_ms>\d+(?:\.\d+)?) ms(?P<dummy> \(dummy\))?, (?:\w+ )?KV cache usage: "
    r"(?P<kv_percent>\d+(?:\.\d+)?)%"
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_EXPECTED = (
    "expected vLLM's 'Iteration(<i>): <x> context requests, <y> context tokens, <z> "
    "generation requests, <w> generation tokens, iteration elapsed time: <t> ms, ... KV "
    "cache usage: <u>%'"
)


@dataclass(frozen=True)
class Iteration:
    """One logged engine iteration; ``kv_cache_usage`` is a fraction of the pool (0-1)."""

    iteration: int
    context_requests: int
    context_tokens: int
    generation_requests: int
    generation_tokens: int
    elapsed_s: float
    kv_cache_usage: float

    @property
    def kind(self) -> str:
        if self.context_requests and self.generation_requests:
            return MIXED
        return PREFILL if self.context_requests else DECODE


def _source_text(text_or_path: str | Path) -> tuple[str, str]:
    if isinstance(text_or_path, Path):
        try:
            return str(text_or_path), text_or_path.read_text(errors="replace")
        except OSError as exc:
            raise StepLogError(
                f"{text_or_path}: cannot read the server log ({exc.strerror})"
            ) from None
    return "<server log text>", text_or_path


def _iteration(match: re.Match[str], where: str, raw: str) -> Iteration:
    if match.group("dummy"):
        raise StepLogError(
            f"{where}: {raw.strip()!r} is a data-parallel dummy iteration; the vllm "
            "backend serves one engine (no --data-parallel-size)"
        )
    counts = {
        name: int(match.group(name))
        for name in (
            "iteration",
            "context_requests",
            "context_tokens",
            "generation_requests",
            "generation_tokens",
        )
    }
    step = Iteration(
        **counts,
        elapsed_s=float(match.group("elapsed_ms")) / 1000.0,
        kv_cache_usage=float(match.group("kv_percent")) / 100.0,
    )
    if (
        step.context_tokens < step.context_requests
        or step.generation_tokens < step.generation_requests
        or not (step.context_requests or step.generation_requests)
        or not math.isfinite(step.elapsed_s)
    ):
        raise StepLogError(
            f"{where}: iteration line {raw.strip()!r} has impossible counts (each scheduled "
            "request computes at least one token, and an iteration schedules something); "
            f"{_EXPECTED}"
        )
    return step


def parse_iterations(text_or_path: str | Path) -> list[Iteration]:
    """Every iteration line of a vLLM server log, checked to be numbered 0, 1, 2, ...

    Accepts log text or a path; the engine's other lines are skipped. A line with the
    iteration words that does not parse, impossible counts, or a number out of sequence
    raises :class:`StepLogError` naming the file (or text) and line.
    """
    source, text = _source_text(text_or_path)
    steps: list[Iteration] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not any(sign in raw for sign in _SIGNS):
            continue
        where = f"{source}:{lineno}"
        line = _ANSI.sub("", raw)
        match = _LINE.search(line)
        if match is None or line.count("Iteration(") != 1:
            raise StepLogError(f"{where}: malformed iteration line {raw.strip()!r}; {_EXPECTED}")
        step = _iteration(match, where, raw)
        if step.iteration != len(steps):
            raise StepLogError(
                f"{where}: iteration {step.iteration} follows "
                f"{'the start of the log' if not steps else steps[-1].iteration}; vLLM "
                "numbers iterations 0, 1, 2, ... and logs every one, so lines are missing, "
                "repeated or from another server (one fresh server per run)"
            )
        steps.append(step)
    return steps


def step_record(step: Iteration, capture_sizes: Sequence[int]) -> StepRecord:
    """The steps.parquet row of one iteration: ``n`` its decode requests, ``b`` its decode
    tokens as run (padded to the next capture size; eager above the largest or without
    any), unknown when nothing decodes; start and end unknown (the log's clock has 1 s
    resolution, the elapsed time is the step's own)."""
    decode = step.generation_tokens
    padded = capture_padded(decode, tuple(capture_sizes)) if decode else None
    return StepRecord(step.kind, step.generation_requests, padded, iteration=asdict(step))


@dataclass(frozen=True)
class IterationStepLog:
    """The replay client's ``StepLog`` on the vllm backend: vLLM's iteration lines as
    steps.parquet, with the configuration's capture sizes for the decode padding."""

    capture_sizes: tuple[int, ...] = ()

    def steps(self, log_text: str) -> pd.DataFrame:
        return steps_frame([step_record(s, self.capture_sizes) for s in parse_iterations(log_text)])

    def coverage_problem(
        self,
        steps: pd.DataFrame,
        requests: Sequence[RequestRecord],
        counters: Mapping[str, float],
    ) -> str | None:
        """The iterations must be the ones that served the requests: every generated
        token after a request's first is one decode token (sum of G - 1), and the prefill
        tokens are the requests' computed tokens (more of either only when a preemption
        recomputed some: vLLM logs a resumed request's recomputed output as generation)."""
        if requests and steps.empty:
            return (
                f"the server log holds no iteration line although {len(requests)} requests "
                "finished; start vLLM with --enable-logging-iteration-details (and its "
                "default stat logging on: no --disable-log-stats)"
            )
        decode = int(steps["generation_tokens"].sum()) if not steps.empty else 0
        needed = sum(r.generated_tokens - 1 for r in requests)
        # a preempted request that had output recomputes it as generation tokens
        preempted = counters.get(PREEMPTIONS_COUNTER, 0.0) > 0
        if decode < needed or (decode > needed and not preempted):
            return (
                f"the server log's iterations decode {decode} tokens, the requests needed "
                f"{needed} (generated tokens after each first) with no preemption to "
                "recompute more; the log does not cover the run"
            )
        prefill = int(steps["context_tokens"].sum()) if not steps.empty else 0
        computed = sum(int(r.computed_tokens or 0) for r in requests)
        if prefill < computed or (prefill > computed and not preempted):
            return (
                f"the server log's iterations prefill {prefill} tokens, the requests computed "
                f"{computed} (prompt minus cached) with no preemption to recompute more; the "
                "log does not cover the run"
            )
        return None
