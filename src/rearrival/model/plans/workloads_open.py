"""Open and closed agent traffic from a pool of sessions (docs/DESIGN.md §2 "Open
traffic, shared prefixes and renewal").

**Open** (``open_plan``): sessions start over a horizon H by a Poisson process of rate
lambda sessions/s, by Gamma inter-arrival times of a given coefficient of variation (mean
1/lambda), or at the pool's own start times scaled by a factor (a trace replayed, each of
its sessions at its own start); every start is before H. **Closed** (``closed_plan``): C
sessions start at t = 0 and each, when it finishes, is followed by a fresh one after a think
gap (``after`` links), L sessions in all.

Sessions are drawn with replacement from the pool and keep their rounds and prefix (the
plan's prefix table holds the ones drawn); a pool session's own start or ``after`` is not
carried over. Two generators, each a numpy ``default_rng`` seeded from a SHA-256 of (seed,
stream), keep the choice of sessions apart from the times: the same pool and seed draw the
same sessions in the same order at every rate and arrival law, and only the times change.
The times are unit-rate gaps, drawn in fixed blocks and summed in order, divided by the rate,
so the k-th start at rate 2 lambda is exactly half the k-th at lambda (before the rounding
to 1 us that keeps a last-ulp difference between platforms out of the plan's bytes). The
same inputs give byte-identical plans.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from rearrival.errors import RearrivalError
from rearrival.limits import (
    MAX_WORKLOAD_REQUESTS,
    MAX_WORKLOAD_SESSIONS,
    WORKLOAD_REQUESTS_WHY,
    WORKLOAD_SESSIONS_WHY,
    bound_problem,
)
from rearrival.model.plans.plan import After, MultiRoundSession, Plan, PlanMeta, Prefix

WORKLOAD_VERSION = "rearrival-workloads/1"
SEED_SCHEME = "rearrival-workload-seed/1"
ARRIVALS = ("poisson", "gamma", "trace")
BLOCK = 4096  # unit gaps drawn per call: fixed, so every rate reads the same stream
START_DECIMALS = 6  # starts and gaps stored at 1 us, as plangen stores tool waits


class WorkloadError(RearrivalError, ValueError):
    """Arguments that cannot define a workload; ``argument`` names the one at fault, so the
    CLI can name its option."""

    def __init__(self, message: str, argument: str | None = None) -> None:
        super().__init__(message)
        self.argument = argument


@dataclass(frozen=True)
class Arrivals:
    """The arrival law of an open workload: ``poisson``, ``gamma`` (with ``cv``) or
    ``trace`` (the pool's own starts)."""

    kind: str = "poisson"
    cv: float = 1.0

    @classmethod
    def parse(cls, value: str | tuple[str, float] | Arrivals) -> Arrivals:
        """``"poisson"``, ``"gamma:CV"``, ``("gamma", CV)`` or ``"trace"``."""
        if isinstance(value, Arrivals):
            return value
        if isinstance(value, tuple):
            kind, cv = value
            return cls(kind, float(cv)).checked()
        kind, _, cv = str(value).partition(":")
        if kind == "gamma" and cv:
            try:
                number = float(cv)
            except ValueError:
                number = math.nan
            return cls("gamma", number).checked()
        if not cv and kind in ("poisson", "trace"):
            return cls(kind)
        raise WorkloadError(
            f"arrivals {value!r}: use poisson, gamma:CV (e.g. gamma:2, CV > 0) or trace",
            "arrivals",
        )

    def checked(self) -> Arrivals:
        """This law, after refusing an unknown kind or a CV that is not a number > 0."""
        if self.kind not in ARRIVALS:
            raise WorkloadError(
                f"arrivals {self.kind!r}: use one of poisson, gamma, trace", "arrivals"
            )
        if self.kind == "gamma" and not (math.isfinite(self.cv) and self.cv > 0):
            raise WorkloadError(
                "arrivals gamma: the coefficient of variation must be a number > 0, e.g. "
                "gamma:2 (gamma:1 is Poisson)",
                "arrivals",
            )
        return self

    @property
    def label(self) -> str:
        return f"gamma:{self.cv:g}" if self.kind == "gamma" else self.kind


def stream(seed: int, name: str) -> np.random.Generator:
    """The generator of one stream (``choice``, ``times-poisson``, ...) of ``seed``: a
    SHA-256 of the two, stable across machines (never ``hash()``)."""
    text = f"{SEED_SCHEME}|seed={seed}|stream={name}"
    return np.random.default_rng(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big"))


def draw_indices(pool_size: int, count: int, seed: int) -> list[int]:
    """``count`` pool indices drawn with replacement; the first k are the same for every
    count (one double per draw, read in order)."""
    u = stream(seed, "choice").random(count)
    return [min(int(x * pool_size), pool_size - 1) for x in u]


class UnitTimes:
    """Arrival times of a unit-rate process (in units of the mean gap): partial sums of
    unit-mean gaps, drawn in BLOCKs and summed in order, as far as asked and kept, so the
    times below any horizon are read from one draw (the sums do not depend on how far
    they are drawn)."""

    def __init__(self, arrivals: Arrivals, seed: int) -> None:
        self.arrivals = arrivals
        self._rng = stream(seed, f"times-{arrivals.kind}")
        self._sums: list[float] = []
        self._total = 0.0

    def below(self, horizon: float) -> list[float]:
        """The sums below ``horizon``; over the session bound refused as a draw that
        stops there would be, after each whole block below ``horizon``."""
        while not self._sums or self._sums[-1] < horizon:
            _check_drawn(len(self._sums))  # every sum so far is below the horizon
            self._draw_block()
        count = bisect.bisect_left(self._sums, horizon)
        _check_drawn(count)
        return self._sums[:count]

    def _draw_block(self) -> None:
        if self.arrivals.kind == "poisson":
            gaps = self._rng.standard_exponential(BLOCK)
        else:
            shape = 1.0 / self.arrivals.cv**2
            gaps = self._rng.standard_gamma(shape, BLOCK) / shape
        total, sums = self._total, self._sums
        for gap in gaps.tolist():
            total += gap
            sums.append(total)
        self._total = total


def _check_drawn(count: int) -> None:
    """The session bound as a draw of ``count`` sums below the horizon meets it: checked
    after each whole block, the first block over the bound named."""
    for drawn in range(BLOCK, count + 1, BLOCK):
        _check_sessions(drawn, "sessions drawn")


def open_plan(
    pool: Sequence[MultiRoundSession],
    prefixes: Sequence[Prefix],
    rate: float | None,
    horizon_s: float,
    seed: int,
    arrivals: str | tuple[str, float] | Arrivals = "poisson",
    time_scale: float = 1.0,
    notes: dict[str, Any] | None = None,
) -> Plan:
    """Open traffic over ``horizon_s`` (see the module docstring); ``rate`` (sessions/s)
    for poisson and gamma, ``time_scale`` for trace."""
    law = Arrivals.parse(arrivals)
    _check_pool(pool)
    horizon = _positive(horizon_s, "horizon_s", "a horizon in seconds")
    if law.kind == "trace":
        starts, picks = _replay(pool, horizon, time_scale, rate)
    else:
        rate = _positive(rate, "rate", "sessions per second")
        if time_scale != 1.0:
            raise WorkloadError(
                f"time_scale {time_scale}: scales a trace's own starts (arrivals trace); "
                f"with {law.label} arrivals set the rate instead",
                "time_scale",
            )
        check_rate(pool, rate, horizon)
        starts, picks = OpenDraws(len(pool), horizon, seed, law).at(rate)
    check_started(starts, horizon)
    sessions = [
        _drawn(pool[j], i, start=start)
        for i, (j, start) in enumerate(zip(picks, starts, strict=True))
    ]
    workload = {
        "kind": "open",
        "arrivals": law.label,
        "rate": rate,
        "horizon_s": horizon,
        "seed": seed,
        "time_scale": time_scale,
        "pool_sessions": len(pool),
    }
    return _plan(sessions, prefixes, seed, workload | (notes or {}))


def closed_plan(
    pool: Sequence[MultiRoundSession],
    prefixes: Sequence[Prefix],
    concurrency: int,
    sessions: int,
    think_s: float,
    seed: int,
    notes: dict[str, Any] | None = None,
) -> Plan:
    """Closed-loop traffic: sessions 0..C-1 start at 0, session j >= C follows session j - C
    after ``think_s`` (C chains, one per concurrent user), L = ``sessions`` in all."""
    _check_pool(pool)
    _check_count(sessions, "sessions", 1)
    _check_count(concurrency, "concurrency", 1)
    if concurrency > sessions:
        raise WorkloadError(
            f"concurrency {concurrency} is more than sessions {sessions}; C sessions start at "
            "t = 0 out of L in all, so give C <= L",
            "concurrency",
        )
    _check_sessions(sessions, "sessions", "sessions")
    _check_requests(pool, sessions, "sessions")
    if isinstance(think_s, bool) or not isinstance(think_s, int | float):
        raise WorkloadError(f"think_s {think_s!r}: give seconds >= 0", "think_s")
    if not (math.isfinite(think_s) and think_s >= 0):
        raise WorkloadError(f"think_s {think_s}: give seconds >= 0", "think_s")
    gap = round(float(think_s), START_DECIMALS)
    picks = draw_indices(len(pool), sessions, seed)
    drawn = [
        _drawn(pool[j], i, after=None if i < concurrency else After(i - concurrency, gap))
        for i, j in enumerate(picks)
    ]
    workload = {
        "kind": "closed",
        "concurrency": concurrency,
        "sessions": sessions,
        "think_s": gap,
        "seed": seed,
        "pool_sessions": len(pool),
    }
    return _plan(drawn, prefixes, seed, workload | (notes or {}))


def check_rate(pool: Sequence[MultiRoundSession], rate: float, horizon: float) -> None:
    """Refuse a rate whose sessions or expected requests over ``horizon`` are over the
    bounds (``rearrival.limits``), before anything is drawn."""
    _check_sessions(math.ceil(rate * horizon), "sessions (rate x horizon_s)", "rate")
    _check_requests(pool, rate * horizon, "rate")


def check_started(starts: Sequence[float], horizon: float) -> None:
    """Refuse a workload in which no session starts before the horizon."""
    if not starts:
        raise WorkloadError(
            f"no session starts within horizon_s {horizon:g}; raise the rate or the horizon",
            "horizon_s",
        )


class OpenDraws:
    """The starts and pool sessions ``open_plan`` draws for one pool size, horizon, seed
    and law (poisson or gamma) at any rate. Both streams are read in order whatever the
    rate (module docstring), so one draw, kept and extended as a higher rate asks, answers
    every rate: a capacity search's bisection reads it instead of drawing anew."""

    def __init__(self, pool_size: int, horizon: float, seed: int, law: Arrivals) -> None:
        self.pool_size = pool_size
        self.horizon = horizon
        self.seed = seed
        self._units = UnitTimes(law, seed)
        self._picks: list[int] = []

    def at(self, rate: float) -> tuple[list[float], list[int]]:
        """The session starts (rounded to 1 us, before the horizon) and the pool index of
        each, at ``rate`` (checked by the caller: ``check_rate``)."""
        horizon = self.horizon
        starts = [t / rate for t in self._units.below(rate * horizon)]
        starts = [t for t in (round(t, START_DECIMALS) for t in starts) if t < horizon]
        count = len(starts)
        if count > len(self._picks):
            self._picks = draw_indices(self.pool_size, max(count, 2 * len(self._picks)), self.seed)
        return starts, self._picks[:count]


def _drawn(
    s: MultiRoundSession, index: int, start: float = 0.0, after: After | None = None
) -> MultiRoundSession:
    """Pool session ``s`` as session ``index`` of the workload, with its rounds and prefix."""
    return replace(s, session=index, start_s=start, after=after)


def _replay(
    pool: Sequence[MultiRoundSession], horizon: float, time_scale: float, rate: float | None
) -> tuple[list[float], list[int]]:
    """The pool's own sessions at their own starts times ``time_scale``, before H."""
    if rate is not None:
        raise WorkloadError(
            "arrivals trace replays the pool's own starts, at no rate; leave the rate out "
            "and scale the starts with time_scale",
            "rate",
        )
    _positive(time_scale, "time_scale", "a factor (0.5 replays twice as fast)")
    renewed = [s.session for s in pool if s.after is not None]
    if renewed:
        raise WorkloadError(
            f"arrivals trace: pool session {renewed[0]} follows another ('after') and has no "
            "start of its own to replay; use poisson or gamma arrivals with this pool",
            "arrivals",
        )
    order = sorted(range(len(pool)), key=lambda j: (pool[j].start_s, j))
    origin = pool[order[0]].start_s
    timed = [(round((pool[j].start_s - origin) * time_scale, START_DECIMALS), j) for j in order]
    kept = [(t, j) for t, j in timed if t < horizon]
    _check_sessions(len(kept), "sessions replayed", "horizon_s")
    return [t for t, _ in kept], [j for _, j in kept]


def _plan(
    sessions: list[MultiRoundSession],
    prefixes: Sequence[Prefix],
    seed: int,
    workload: dict[str, Any],
) -> Plan:
    """The workload as a plan: the prefix table holds the prefixes drawn, in pool order."""
    used = {s.prefix for s in sessions}
    table = tuple(p for p in prefixes if p.id in used)
    meta = PlanMeta(
        seed=seed,
        n=len(sessions),
        generator_version=WORKLOAD_VERSION,
        source=f"{workload['kind']}-workload",
        notes={"workload": workload},
    )
    return Plan(tuple(sessions), meta, table)


def _check_pool(pool: Sequence[MultiRoundSession]) -> None:
    if not pool:
        raise WorkloadError("the pool holds no sessions; pass a plan, a folder or a trace", "pool")


def _positive(value: Any, name: str, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WorkloadError(f"{name} {value!r}: give {what} > 0", name)
    if not (math.isfinite(value) and value > 0):
        raise WorkloadError(f"{name} {value}: give {what} > 0", name)
    return float(value)


def _check_count(value: Any, name: str, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise WorkloadError(f"{name} {value!r}: give an integer >= {low}", name)


def _check_sessions(count: int, what: str, argument: str = "rate") -> None:
    """Refuse more sessions than rearrival.limits allows, before they cost memory."""
    problem = bound_problem(what, count, MAX_WORKLOAD_SESSIONS, WORKLOAD_SESSIONS_WHY)
    if problem is not None:
        raise WorkloadError(problem, argument)


def _check_requests(pool: Sequence[MultiRoundSession], sessions: float, argument: str) -> None:
    """Refuse a workload whose expected requests (sessions x the pool's mean rounds) are
    over the bound: each request is a row of the plan file."""
    mean_rounds = sum(len(s.rounds) for s in pool) / len(pool)
    expected = math.ceil(sessions * mean_rounds)
    problem = bound_problem(
        "the expected requests (sessions x the pool's mean rounds)",
        expected,
        MAX_WORKLOAD_REQUESTS,
        WORKLOAD_REQUESTS_WHY,
    )
    if problem is not None:
        raise WorkloadError(problem, argument)
