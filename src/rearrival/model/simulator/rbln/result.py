"""What the RBLN cores return (``sim``, docs/DESIGN.md §4): ``SimResult`` holds what a
core returned and builds records (``PredictedRequest``), stretches and evictions on first
access; the configuration it ran is ``config.SimConfig``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rearrival.model.buckets import select_bucket
from rearrival.model.simulator.plan_arrays import PlanArrays
from rearrival.model.simulator.rbln.config import SimConfig
from rearrival.model.simulator.rbln.slots import NO_OWNER, Eviction
from rearrival.vocabulary import EVICTION_CAUSES


@dataclass(frozen=True, slots=True)
class PredictedRequest:
    """One request's predicted outcome (a run's measured request is the run records'
    ``RequestRecord``). ``turn`` is the round index within the session (0: the first
    request; 1 the follow-up of a two-round session; k the k-th re-arrival of a
    multi-round one); ``round`` is the same number under its multi-round name.

    ``evicted_slot``/``evicted_session``/``evicted_turn`` name the KV this admission
    destroyed to get its slot (None when it took a free slot); ``running_at_admission`` is
    the K of W (requests decoding while this prefill ran).
    """

    session: int
    turn: int
    arrival_s: float
    admit_s: float
    first_token_s: float
    complete_s: float
    prompt_tokens: int
    cached_tokens: int
    computed_tokens: int
    prefill_s: float
    slot: int
    evicted_slot: int | None
    evicted_session: int | None
    evicted_turn: int | None
    running_at_admission: int

    @property
    def round(self) -> int:
        return self.turn

    @property
    def hit(self) -> bool:
        return self.cached_tokens > 0


@dataclass(frozen=True, slots=True)
class Stretch:
    """Consecutive decode steps with the same n and no prefill between them."""

    n: int
    b: int
    steps: int
    start_s: float
    end_s: float


# Per-request arrays both simulators fill, indexed by request id rid in (session, round)
# order (``PlanArrays``).
# first_token_s (= admit_s + prefill_s), computed_tokens and evicted_slot are derived when
# records are built; evicted_tag is the victim's rid or NO_OWNER.
REQUEST_COLUMNS = (
    "arrival_s",
    "admit_s",
    "complete_s",
    "prompt_tokens",
    "cached_tokens",
    "prefill_s",
    "slot",
    "evicted_tag",
    "running_at_admission",
)
_CACHED = REQUEST_COLUMNS.index("cached_tokens")
_PROMPT = REQUEST_COLUMNS.index("prompt_tokens")


class SimResult:
    """Outcome of one simulation; records are built on first access (the search only
    reads the scalars).

    The compiled core hands over its arrays (``raw``); the per-request columns, stretch
    and eviction rows are converted to plain lists only when a caller asks for them.
    """

    __slots__ = (
        "_columns",
        "_counts",
        "_eviction_rows",
        "_hist",
        "_histogram",
        "_raw",
        "_records",
        "_stretch_rows",
        "arrays",
        "config",
        "decode_s",
        "device_s",
        "interference_s",
        "makespan_s",
        "prefill_s",
    )

    def __init__(
        self,
        config: SimConfig,
        arrays: PlanArrays,
        histogram_nb: dict[tuple[int, int], int] | None,
        decode_s: float,
        prefill_s: float,
        interference_s: float,
        makespan_s: float,
        columns: tuple[list[Any], ...] | None,
        stretch_rows: list[list[Any]] | None,
        eviction_rows: list[tuple[float, int, int, str]] | None,
        counts: tuple[int, int, int, int, int] | None = None,
        raw: Any = None,
        hist: tuple[Any, list[int], list[str]] | None = None,
    ) -> None:
        self.config = config
        self.arrays = arrays  # the plan's per-request lists (rid order, round indices)
        self._histogram = histogram_nb  # {(n, b): decode steps}, sorted by (n, b)
        # or (steps per n array, b(n) list, "n->b" label list) from the compiled core
        self._hist = hist
        self.decode_s = decode_s
        self.prefill_s = prefill_s
        self.device_s = decode_s + prefill_s
        self.interference_s = interference_s
        self.makespan_s = makespan_s
        self._columns = columns
        self._stretch_rows = stretch_rows
        self._eviction_rows = eviction_rows
        # (reuse hits, re-arrival computed tokens, decode steps, sum b*steps, sum n*steps)
        self._counts = counts
        self._raw = raw  # (core module, its arguments) to rebuild records
        self._records: tuple[PredictedRequest, ...] | None = None

    def _materialize(self) -> None:
        """Lists from the compiled core, on first detailed access: the core runs the same
        simulation again with records kept (deterministic, so the same run)."""
        core, args = self._raw
        prompt = self.arrays.prompt
        req_f, req_i, st_i, st_f, ev_f, ev_i = core.run_records(*args)
        arrival, admit, complete, prefill = req_f.tolist()
        cached, slot, tag, running = req_i.tolist()
        self._columns = (arrival, admit, complete, prompt, cached, prefill, slot, tag, running)
        self._stretch_rows = [
            [n, k, a, b] for (n, k), (a, b) in zip(st_i.T.tolist(), st_f.T.tolist(), strict=True)
        ]
        self._eviction_rows = [
            (time, s, victim, EVICTION_CAUSES[cause])
            for time, (s, victim, cause) in zip(ev_f.tolist(), ev_i.T.tolist(), strict=True)
        ]
        self._raw = None

    @property
    def columns(self) -> tuple[list[Any], ...]:
        """Per-request columns (``REQUEST_COLUMNS``), indexed by request id in (session,
        round) order (``PlanArrays``)."""
        if self._columns is None:
            self._materialize()
        return self._columns

    @property
    def histogram_nb(self) -> dict[tuple[int, int], int]:
        """{(n, b): decode steps at n running on bucket b}, sorted by (n, b)."""
        if self._histogram is None:
            steps_at, bucket_of, _ = self._hist
            self._histogram = {
                (n, bucket_of[n]): steps for n, steps in enumerate(steps_at.tolist()) if steps and n
            }
        return self._histogram

    @property
    def decode_steps(self) -> int:
        if self._counts is not None:
            return self._counts[2]
        return sum(self.histogram_nb.values())

    @property
    def sessions(self) -> int:
        return self.arrays.sessions

    @property
    def prefill_steps(self) -> int:
        """One prefill per request (every round of every session)."""
        return self.arrays.requests

    @property
    def padding_ratio(self) -> float:
        """sum(b - n) / sum(b) over decode steps (0 when nothing decoded)."""
        if self._counts is not None:
            padded, used = self._counts[3], self._counts[4]
            return (padded - used) / padded if padded else 0.0
        padded = sum(b * steps for (_, b), steps in self.histogram_nb.items())
        used = sum(n * steps for (n, _), steps in self.histogram_nb.items())
        return (padded - used) / padded if padded else 0.0

    @property
    def re_arrivals(self) -> int:
        """Every round after a session's first."""
        return self.arrays.requests - self.arrays.sessions

    @property
    def reuse_hits(self) -> int:
        if self._counts is not None:
            return self._counts[0]
        return sum(1 for c in self.columns[_CACHED] if c > 0)  # round 0 never reuses

    @property
    def computed_prefill_tokens(self) -> int:
        """Re-arrival computed prefill tokens: sum of q = L - C over rounds >= 1 (paper
        Section IV). First rounds never reuse anything; their tokens are in
        ``total_computed_tokens``.
        """
        if self._counts is not None:
            return self._counts[1]
        prompt, cached = self.columns[_PROMPT], self.columns[_CACHED]
        return sum(prompt[rid] - cached[rid] for rid, k in enumerate(self.arrays.round_of) if k)

    @property
    def total_computed_tokens(self) -> int:
        """Computed prefill tokens of every request (first requests and re-arrivals)."""
        return sum(self.columns[_PROMPT]) - sum(self.columns[_CACHED])

    @property
    def requests(self) -> tuple[PredictedRequest, ...]:
        """Per-request records in (session, round) order."""
        if self._records is None:
            records = []
            session_of, round_of = self.arrays.session_of, self.arrays.round_of
            for rid, (
                arrival,
                admit,
                complete,
                prompt,
                cached,
                prefill,
                slot,
                tag,
                running,
            ) in enumerate(zip(*self.columns, strict=True)):
                evicted = tag != NO_OWNER
                records.append(
                    PredictedRequest(
                        session_of[rid],
                        round_of[rid],
                        arrival,
                        admit,
                        admit + prefill,
                        complete,
                        prompt,
                        cached,
                        prompt - cached,
                        prefill,
                        slot,
                        slot if evicted else None,
                        session_of[tag] if evicted else None,
                        round_of[tag] if evicted else None,
                        running,
                    )
                )
            self._records = tuple(records)
        return self._records

    @property
    def stretches(self) -> tuple[Stretch, ...]:
        """Decode stretches in time order, for timelines and step reconstruction."""
        buckets = self.config.buckets
        if self._stretch_rows is None:
            self._materialize()
        return tuple(
            Stretch(n, select_bucket(n, buckets), steps, start, end)
            for n, steps, start, end in self._stretch_rows
        )

    @property
    def evictions(self) -> tuple[Eviction, ...]:
        """Every KV eviction in time order (admissions and dummy-block pre-evictions)."""
        if self._eviction_rows is None:
            self._materialize()
        prompt = self.columns[_PROMPT]  # a slot holds its request's prompt KV
        session_of, round_of = self.arrays.session_of, self.arrays.round_of
        return tuple(
            Eviction(time, slot, session_of[tag], prompt[tag], cause, round_of[tag])
            for time, slot, tag, cause in self._eviction_rows
        )

    def summary(self) -> dict[str, Any]:
        """The docs/DESIGN.md §4 summary; ``computed_prefill_tokens`` counts re-arrivals only."""
        return {
            "decode_steps": self.decode_steps,
            "prefill_steps": self.prefill_steps,
            "padding_ratio": self.padding_ratio,
            "reuse_hits": self.reuse_hits,
            "re_arrivals": self.re_arrivals,
            "computed_prefill_tokens": self.computed_prefill_tokens,
            "decode_s": self.decode_s,
            "prefill_s": self.prefill_s,
            "device_s": self.device_s,
            "interference_s": self.interference_s,
            "makespan_s": self.makespan_s,
            "histogram": self._labelled_histogram(),
        }

    def _labelled_histogram(self) -> dict[str, int]:
        """{"n->b": steps}; from the compiled core's per-n counts without the tuple keys."""
        if self._histogram is None and self._hist is not None:
            steps_at, _, labels = self._hist
            return {labels[n]: steps for n, steps in enumerate(steps_at.tolist()) if steps and n}
        return {histogram_label(n, b): steps for (n, b), steps in self.histogram_nb.items()}


_HISTOGRAM_LABELS: dict[tuple[int, int], str] = {}


def histogram_label(n: int, b: int) -> str:
    """The summary's histogram key ``"n->b"``, formatted once per pair."""
    text = _HISTOGRAM_LABELS.get((n, b))
    if text is None:
        text = _HISTOGRAM_LABELS[(n, b)] = f"{n}->{b}"
    return text
