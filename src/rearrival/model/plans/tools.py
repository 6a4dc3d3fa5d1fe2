"""Tool-latency mixture (docs/DESIGN.md §2, paper Section II-C): how long a session waits.

A tool table holds, per tool, the call count and the p50/p90/p99 latency that TraceLab
publishes. A wait is drawn by picking a tool in proportion to its calls and reading a
latency off an inverse CDF that passes exactly through those three quantiles, then
capping it at 60 s. Tools that wait for a human are excluded: their latency is think
time, not tool execution, and the paper models an agent's own tool calls.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import random
from bisect import bisect_right
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from rearrival.errors import RearrivalError

HUMAN_WAITING_TOOLS = frozenset(
    {"AskUserQuestion", "ExitPlanMode", "request_user_input", "TaskOutput"}
)
CAP_S = 60.0
_STD_NORMAL = NormalDist()
# Phi^-1(0.9), often written rounded as 1.2816.
Z90 = _STD_NORMAL.inv_cdf(0.9)
# A p50 of 0 ms (sub-millisecond tools logged as 0) has no logarithm; TraceLab's
# resolution is 1 ms, so half of it is the smallest latency the data can support.
MIN_P50_MS = 0.5
QUANTILE_METHOD = "linear"  # numpy.quantile default (Hyndman-Fan type 7)
DEFAULT_TABLE = "tool_table_tracelab_v002_aggregate.json"


class ToolTableError(RearrivalError, ValueError):
    """A tool table or trace that cannot be used; the message names file, field and fix."""


@dataclass(frozen=True)
class ToolStats:
    """One tool's call count and latency quantiles (seconds), as TraceLab reports them."""

    tool: str
    calls: int
    p50_s: float
    p90_s: float
    p99_s: float

    def __post_init__(self) -> None:
        where = f"tool '{self.tool}'"
        if isinstance(self.calls, bool) or not isinstance(self.calls, int) or self.calls < 1:
            raise ToolTableError(
                f"{where}: field 'n' (calls) must be a positive integer, got {self.calls!r}"
            )
        for name in ("p50_s", "p90_s", "p99_s"):
            value = getattr(self, name)
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if not (number and math.isfinite(value) and value > 0):
                raise ToolTableError(
                    f"{where}: field '{name[:3]}' must be a positive finite latency, got {value!r}"
                )
        if not self.p50_s <= self.p90_s <= self.p99_s:
            raise ToolTableError(
                f"{where}: quantiles must satisfy p50 <= p90 <= p99, got "
                f"{self.p50_s}, {self.p90_s}, {self.p99_s} s; fix the table"
            )

    @property
    def sigma(self) -> float:
        """Log-spread of the p50-p90 segment, reused for the log-normal lower half."""
        return math.log(self.p90_s / self.p50_s) / Z90

    def quantile_s(self, q: float) -> float:
        """Inverse CDF, uncapped: exact at p50, p90, p99 (paper Section II-C).

        Below the median a log-normal with the p50-p90 log-spread (TraceLab publishes no
        lower quantiles); log-linear between p50-p90 and p90-p99; flat at p99 above 0.99,
        because nothing is known beyond p99 and the 60 s cap applies there anyway.
        """
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile level {q} outside [0, 1]")
        if q < 0.5:
            if q == 0.0:
                return 0.0 if self.sigma > 0 else self.p50_s
            return math.exp(math.log(self.p50_s) + self.sigma * _STD_NORMAL.inv_cdf(q))
        if q <= 0.9:
            return _log_interp(q, 0.5, self.p50_s, 0.9, self.p90_s)
        if q <= 0.99:
            return _log_interp(q, 0.9, self.p90_s, 0.99, self.p99_s)
        return self.p99_s


def _log_interp(q: float, q0: float, x0: float, q1: float, x1: float) -> float:
    if q == q1:  # exact at the upper knot, not exp(log(x)) rounding
        return x1
    return math.exp(math.log(x0) + (q - q0) / (q1 - q0) * math.log(x1 / x0))


@dataclass(frozen=True)
class Draw:
    """One sampled wait: which tool, how long (capped), and whether the cap applied."""

    tool: str
    latency_s: float
    capped: bool


@dataclass(frozen=True)
class Draws:
    """Many sampled waits, e.g. to report the cap fraction of a table."""

    latencies_s: tuple[float, ...]
    tools: tuple[str, ...]
    capped: tuple[bool, ...]

    @property
    def cap_fraction(self) -> float:
        return sum(self.capped) / len(self.capped)

    def share_below(self, seconds: float) -> float:
        return sum(x < seconds for x in self.latencies_s) / len(self.latencies_s)


@dataclass(frozen=True)
class ToolTable:
    """The tools a wait is drawn from; human-waiting tools are dropped at construction."""

    rows: tuple[ToolStats, ...]
    source: str
    excluded: tuple[str, ...] = field(init=False)
    _cum_calls: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = [r.tool for r in self.rows]
        duplicate = next((n for n in names if names.count(n) > 1), None)
        if duplicate is not None:
            raise ToolTableError(f"tool '{duplicate}' appears twice; keep one row per tool")
        kept = tuple(r for r in self.rows if r.tool not in HUMAN_WAITING_TOOLS)
        if not kept:
            raise ToolTableError(
                f"no tools to draw from after excluding "
                f"human-waiting tools ({', '.join(sorted(HUMAN_WAITING_TOOLS))}"
                "); the table needs at least one agent tool with latencies"
            )
        object.__setattr__(
            self, "excluded", tuple(sorted(n for n in names if n in HUMAN_WAITING_TOOLS))
        )
        object.__setattr__(self, "rows", kept)
        cum, total = [], 0
        for row in kept:
            total += row.calls
            cum.append(total)
        object.__setattr__(self, "_cum_calls", tuple(cum))

    @property
    def calls(self) -> int:
        return self._cum_calls[-1]

    def draw(self, rng: random.Random, cap_s: float = CAP_S) -> Draw:
        """One wait: a tool in proportion to its calls, then a latency from its inverse CDF.

        Uses exactly two ``rng.random()`` calls (tool, then quantile level): ``random()``
        is the one generator output Python guarantees across versions, so plans stay
        byte-identical where ``choices``/``randint`` internals might change.
        """
        pick = bisect_right(self._cum_calls, rng.random() * self.calls)
        row = self.rows[min(pick, len(self.rows) - 1)]
        latency = row.quantile_s(rng.random())
        return Draw(row.tool, min(latency, cap_s), latency > cap_s)

    def sample(self, rng: random.Random, count: int, cap_s: float = CAP_S) -> Draws:
        draws = [self.draw(rng, cap_s) for _ in range(count)]
        return Draws(
            tuple(d.latency_s for d in draws),
            tuple(d.tool for d in draws),
            tuple(d.capped for d in draws),
        )


def _number(raw: dict[str, Any], key: str, where: str) -> float:
    if key not in raw:
        raise ToolTableError(f"{where} lacks field '{key}'; each tool needs n, p50, p90, p99 (ms)")
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ToolTableError(f"{where}: field '{key}' must be a number, got {value!r}")
    if value < 0:
        raise ToolTableError(
            f"{where}: field '{key}' is negative ({value}); latencies and counts are >= 0"
        )
    return value


def table_from_summary(data: Any, source: str, label: str) -> ToolTable:
    """Tool table from the TraceLab ``summary.json`` shape (latencies in ms)."""
    if not isinstance(data, dict) or not isinstance(data.get("tool_by_name"), dict):
        raise ToolTableError(
            f"{source}: expected an object with field 'tool_by_name' "
            "({tool: {n, p50, p90, p99}}); build one with `rearrival tools "
            "build`"
        )
    rows = []
    for tool, raw in data["tool_by_name"].items():
        where = f"{source}: tool_by_name['{tool}']"
        if not isinstance(raw, dict):
            raise ToolTableError(f"{where} must be an object with n, p50, p90, p99 (ms)")
        calls = _number(raw, "n", where)
        p50, p90, p99 = (_number(raw, k, where) / 1000.0 for k in ("p50", "p90", "p99"))
        if calls != int(calls):
            raise ToolTableError(f"{where}: field 'n' must be an integer call count")
        try:
            rows.append(ToolStats(str(tool), int(calls), float(p50), float(p90), float(p99)))
        except ToolTableError as exc:
            raise ToolTableError(f"{source}: {exc}") from exc
    try:
        return ToolTable(tuple(rows), label)
    except ToolTableError as exc:
        raise ToolTableError(f"{source}: {exc}") from exc


def load_summary_json(path: str | Path) -> ToolTable:
    """Read a TraceLab-style ``summary.json``; the label names the file and its hash."""
    path = Path(path)
    try:
        body = path.read_bytes()
    except OSError as exc:
        raise ToolTableError(
            f"{path}: cannot read tool table ({exc.strerror}); pass an existing summary.json"
        ) from exc
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ToolTableError(
            f"{path}: not valid JSON ({exc}); rebuild it with `rearrival tools build`"
        ) from exc
    digest = hashlib.sha256(body).hexdigest()[:12]
    label = f"TraceLab summary '{path.name}' (sha256 {digest})"
    return table_from_summary(data, str(path), label)


def default_tool_table() -> ToolTable:
    """The published TraceLab v0.0.2 AGGREGATE row (the per-tool table is not public)."""
    text = resources.files("rearrival.data").joinpath(DEFAULT_TABLE).read_text()
    data = json.loads(text)
    return table_from_summary(data, DEFAULT_TABLE, data["label"])


def _read_rounds(path: Path):
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            for lineno, line in enumerate(handle, start=1):
                if line.strip():
                    yield lineno, line
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise ToolTableError(
            f"{path}: cannot read trace ({exc}); the file is missing, "
            "truncated or not JSONL[.gz] — download it again"
        ) from exc


def _effective_ms(call: dict[str, Any]) -> float | None:
    """Executor-reported internal latency when present, else wall clock (II-C)."""
    for key in ("tool_internal_latency_ms", "tool_wall_latency_ms"):
        value = call.get(key)
        if value is not None:
            return float(value)
    return None


def _quantiles_ms(values: list[float]) -> tuple[float, float, float]:
    p50, p90, p99 = np.quantile(np.asarray(values), [0.5, 0.9, 0.99], method=QUANTILE_METHOD)
    # Flooring p50 alone could put it above p90; keep the three ordered.
    p50 = max(float(p50), MIN_P50_MS)
    return p50, max(float(p90), p50), max(float(p99), p50)


def build_summary_from_trace(path: str | Path) -> dict[str, Any]:
    """TraceLab ``summary.json`` dict from a normalized round trace (JSONL, optionally .gz).

    ``n`` counts every call of a tool (the sampling weight is how often agents call it,
    as in TraceLab's own tables); quantiles use only positive effective latencies, since
    0 ms and missing values say "not measured", not "instant". A tool with no positive
    latency gets no row (nothing to draw from) and is listed under ``skipped_tools``.
    """
    path = Path(path)
    calls: dict[str, int] = {}
    latencies: dict[str, list[float]] = {}
    rounds = 0
    for lineno, line in _read_rounds(path):
        where = f"{path}: line {lineno}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ToolTableError(
                f"{where}: not valid JSON ({exc.msg}); the trace is damaged "
                "or not TraceLab's normalized JSONL"
            ) from exc
        tools = record.get("tools") if isinstance(record, dict) else None
        if not isinstance(tools, list):
            raise ToolTableError(
                f"{where}: field 'tools' missing or not a list; expected "
                "TraceLab's normalized round trace"
            )
        rounds += 1
        for call in tools:
            name = call.get("tool_name") if isinstance(call, dict) else None
            if not isinstance(name, str):
                raise ToolTableError(f"{where}: a tools[] entry lacks field 'tool_name'")
            calls[name] = calls.get(name, 0) + 1
            value = _effective_ms(call)
            if value is not None and value > 0:
                latencies.setdefault(name, []).append(value)
    if not calls:
        raise ToolTableError(
            f"{path}: no tool calls found; pass a TraceLab round trace with tools[]"
        )
    by_name = {}
    for name in sorted(latencies):
        p50, p90, p99 = _quantiles_ms(latencies[name])
        by_name[name] = {"n": calls[name], "p50": p50, "p90": p90, "p99": p99}
    return {
        "tool_by_name": by_name,
        "provenance": {
            "trace": path.name,
            "rounds": rounds,
            "calls": sum(calls.values()),
            "latency": "tool_internal_latency_ms when not null, else tool_wall_latency_ms; "
            "values <= 0 excluded from quantiles; n counts all calls",
            "quantile_method": f"numpy.quantile method='{QUANTILE_METHOD}'",
            "p50_floor_ms": MIN_P50_MS,
            "skipped_tools": sorted(set(calls) - set(latencies)),
        },
    }
