"""Goodput by bisection on the session arrival rate (docs/DESIGN.md §17).

Why a separate module: the search is a property of any function "does the run at rate r
meet the SLO", so it is written and tested once, apart from the simulator.

The bracket: from ``start`` the rate doubles until a run fails (a run that meets is the
lower end); if ``start`` already fails the goodput is below the smallest rate tried and is
reported as 0. Bisection at the geometric midpoint then narrows the bracket until
``high / low - 1 <= tolerance``. Every rate tried is rounded to ``DIGITS`` significant
digits, so the rate a row reports prints exactly (``repr``) and ``rearrival plans open
--rate`` given that text rebuilds the same plan.

Then the answer is checked just above: the rate ``low x (1 + 2 x tolerance)`` must fail.
If it meets, the curve is not monotone there; the search goes on upwards from it (a new
bracket, a new bisection), at most ``MAX_RESTARTS`` times, so the reported rate meets, the
rate just above fails, and the curve is flagged. ``monotone`` is judged on every rate
evaluated (bracket, bisection, check and the caller's grid): false when some rate meets
the SLO above a rate that fails.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

DIGITS = 6  # significant digits of every rate tried (module docstring)
MAX_RESTARTS = 4  # searches upwards after a check just above the answer met the SLO
MAX_DOUBLINGS = 40  # 2**40 x the start: beyond any bound on the sessions of a plan


def rounded(rate: float) -> float:
    """``rate`` at ``DIGITS`` significant digits (the float its shortest text gives)."""
    return float(f"{rate:.{DIGITS}g}")


@dataclass(frozen=True)
class Trial:
    """One rate evaluated and whether its run met the SLO."""

    rate: float
    meets: bool


@dataclass(frozen=True)
class Goodput:
    """The bisection's answer: ``rate`` meets the SLO (0.0: even ``start`` failed),
    ``above`` = rate x (1 + 2 x tolerance) was checked and fails unless ``above_meets``
    (the restarts ran out), ``bounded`` false when no rate up to ``ceiling`` failed."""

    rate: float
    above: float
    above_meets: bool
    bounded: bool
    tolerance: float
    trials: tuple[Trial, ...]

    @property
    def monotone(self) -> bool:
        return is_monotone(self.trials)


def is_monotone(trials: Iterable[Trial]) -> bool:
    """No rate meets the SLO above a rate that fails (ties in rate: failing first)."""
    failed = False
    for trial in sorted(trials, key=lambda t: (t.rate, t.meets)):
        if trial.meets and failed:
            return False
        failed = failed or not trial.meets
    return True


def find_goodput(
    meets: Callable[[float], bool],
    *,
    start: float,
    tolerance: float,
    ceiling: float = math.inf,
) -> Goodput:
    """The goodput of ``meets`` (module docstring). ``ceiling``: the largest rate the
    caller can evaluate (a plan's session bound); no bracket above it is sought."""
    tried: dict[float, bool] = {}

    def trial(rate: float) -> bool:
        if rate not in tried:
            tried[rate] = meets(rate)
        return tried[rate]

    low = rounded(start)
    if not trial(low):
        return _answer(0.0, low, False, True, tolerance, tried)
    for _ in range(MAX_RESTARTS + 1):
        high = _bracket(trial, low, ceiling)
        if high is None:
            return _answer(
                max(r for r, ok in tried.items() if ok), math.inf, True, False, tolerance, tried
            )
        low = _bisect(trial, low, high, tolerance)
        above = low * (1 + 2 * tolerance)
        if above > ceiling or not trial(above):
            return _answer(low, above, False, True, tolerance, tried)
        low = above
    return _answer(low, low * (1 + 2 * tolerance), True, True, tolerance, tried)


def _bracket(trial: Callable[[float], bool], low: float, ceiling: float) -> float | None:
    """The first doubling of ``low`` (a rate that meets) that fails; None if none does
    up to ``ceiling``."""
    rate = low
    for _ in range(MAX_DOUBLINGS):
        rate = rounded(2 * rate)
        if rate > ceiling:
            return None
        if not trial(rate):
            return rate
    return None


def _bisect(trial: Callable[[float], bool], low: float, high: float, tolerance: float) -> float:
    """Narrow [low meets, high fails] until high / low - 1 <= tolerance; returns low."""
    while high / low - 1 > tolerance:
        middle = rounded(math.sqrt(low * high))
        if middle <= low or middle >= high:  # the rounding cannot split it further
            break
        if trial(middle):
            low = middle
        else:
            high = middle
    return low


def _answer(
    rate: float,
    above: float,
    above_meets: bool,
    bounded: bool,
    tolerance: float,
    tried: dict[float, bool],
) -> Goodput:
    trials = tuple(Trial(r, ok) for r, ok in sorted(tried.items()))
    return Goodput(rate, above, above_meets, bounded, tolerance, trials)
