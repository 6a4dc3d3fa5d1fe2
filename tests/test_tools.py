"""Tool-latency mixture (docs/DESIGN.md §2, paper II-C): inverse CDF, sampler, loaders, default."""

from __future__ import annotations

import gzip
import itertools
import json
import math
import random
import statistics
from pathlib import Path

import pytest
from conftest import TRACELAB_SAMPLE as TRACE

from rearrival.model.plans.tools import (
    CAP_S,
    HUMAN_WAITING_TOOLS,
    ToolStats,
    ToolTable,
    ToolTableError,
    build_summary_from_trace,
    default_tool_table,
    load_summary_json,
    table_from_summary,
)

ROWS = (
    ToolStats("Bash", 500, 0.187, 0.7254, 0.8465),
    ToolStats("WebSearch", 300, 12.0, 18.65, 40.0),
    ToolStats("Flat", 200, 2.0, 2.0, 5.0),  # p50 == p90: sigma 0
)


def _analytic_share(row: ToolStats, seconds: float) -> float:
    """P(latency < seconds) for one row, from the piecewise definition in docs/DESIGN.md §2."""
    x = seconds
    if x <= row.p50_s:
        return statistics.NormalDist().cdf(math.log(x / row.p50_s) / row.sigma)
    if x <= row.p90_s:
        return 0.5 + 0.4 * math.log(x / row.p50_s) / math.log(row.p90_s / row.p50_s)
    if x <= row.p99_s:
        return 0.9 + 0.09 * math.log(x / row.p90_s) / math.log(row.p99_s / row.p90_s)
    return 1.0


def _within(observed: float, p: float, draws: int, z: float = 4.5) -> bool:
    return abs(observed - p) <= z * math.sqrt(p * (1 - p) / draws)


@pytest.mark.parametrize("row", (*ROWS, ToolStats("agg", 1, 0.22, 10.05, 151.6)))
def test_inverse_cdf_exact_at_quantiles_and_monotone(row: ToolStats) -> None:
    assert row.quantile_s(0.5) == row.p50_s
    assert row.quantile_s(0.9) == row.p90_s
    assert row.quantile_s(0.99) == row.p99_s
    assert row.quantile_s(0.999) == row.p99_s  # flat above 0.99
    grid = [i / 10_000 for i in range(10_001)]
    values = [row.quantile_s(q) for q in grid]
    assert all(a <= b for a, b in itertools.pairwise(values))
    # The log-normal lower half meets the median continuously.
    assert row.quantile_s(0.5 - 1e-9) == pytest.approx(row.p50_s, rel=1e-6)


def test_lower_half_is_lognormal_with_p50_p90_spread() -> None:
    row = ROWS[1]
    sigma = math.log(row.p90_s / row.p50_s) / 1.2816
    expected = math.exp(math.log(row.p50_s) + sigma * statistics.NormalDist().inv_cdf(0.1))
    assert row.quantile_s(0.1) == pytest.approx(expected, rel=1e-4)
    assert ROWS[2].quantile_s(0.01) == ROWS[2].p50_s  # sigma 0: flat below the median


def test_sampler_reproduces_each_tools_quantiles_and_weights() -> None:
    table = ToolTable(ROWS, "test")
    draws = 200_000
    sample = table.sample(random.Random(11), draws)
    assert not any(sample.capped)
    total = sum(r.calls for r in ROWS)
    for row in ROWS:
        mine = [x for x, t in zip(sample.latencies_s, sample.tools, strict=True) if t == row.tool]
        assert _within(len(mine) / draws, row.calls / total, draws)
        if row.p50_s == row.p90_s:
            continue  # an atom at p50: the share below it is not a continuous quantile
        for q, x in ((0.5, row.p50_s), (0.9, row.p90_s), (0.99, row.p99_s)):
            # strict "<": the flat top puts 1 % of the mass exactly at p99
            assert _within(sum(v < x for v in mine) / len(mine), q, len(mine))


def test_cap_applies_at_60_s_and_is_flagged() -> None:
    table = ToolTable((ToolStats("slow", 1, 30.0, 90.0, 200.0),), "test")
    sample = table.sample(random.Random(3), 20_000)
    assert max(sample.latencies_s) == CAP_S
    assert all((x == CAP_S) == c for x, c in zip(sample.latencies_s, sample.capped, strict=True))
    assert _within(sample.cap_fraction, 1 - _analytic_share(table.rows[0], CAP_S), 20_000)


def test_default_table_is_the_labelled_published_aggregate() -> None:
    table = default_tool_table()
    assert [(r.tool, r.calls, r.p50_s, r.p90_s, r.p99_s) for r in table.rows] == [
        ("aggregate", 743_819, 0.22, 10.05, 151.6)
    ]
    assert "AGGREGATE" in table.source and "not public" in table.source


def _default_shares(draws: int, seed: int) -> tuple[float, float]:
    sample = default_tool_table().sample(random.Random(seed), draws)
    return sample.share_below(1.0), sample.cap_fraction


def test_default_table_sampler_matches_its_own_inverse_cdf() -> None:
    """The sampler is faithful: 200k draws match the analytic shares of the aggregate row
    (0.6585 under 1 s, 0.0407 capped)."""
    row = default_tool_table().rows[0]
    under, capped = _default_shares(200_000, 20260101)
    assert _within(under, _analytic_share(row, 1.0), 200_000)
    assert _within(capped, 1 - _analytic_share(row, CAP_S), 200_000)


@pytest.mark.xfail(
    strict=True,
    reason="one aggregate row gives 0.658 under 1 s and 4.07% "
    "capped; the published 0.67-0.71 and 2.5-4% come from the 43-tool "
    "mixture, whose per-tool table is not public",
)
def test_default_table_meets_published_checks() -> None:
    under, capped = _default_shares(200_000, 20260101)
    assert 0.67 <= under <= 0.71
    assert 0.025 <= capped <= 0.04


@pytest.mark.slow
def test_default_table_shares_million_draws() -> None:
    row = default_tool_table().rows[0]
    under, capped = _default_shares(1_000_000, 1)
    assert _within(under, _analytic_share(row, 1.0), 1_000_000)
    assert _within(capped, 1 - _analytic_share(row, CAP_S), 1_000_000)


def test_human_waiting_tools_are_excluded() -> None:
    rows = ROWS + tuple(
        ToolStats(name, 10_000, 60.0, 600.0, 3600.0) for name in sorted(HUMAN_WAITING_TOOLS)
    )
    table = ToolTable(rows, "test")
    assert [r.tool for r in table.rows] == [r.tool for r in ROWS]
    assert table.excluded == tuple(sorted(HUMAN_WAITING_TOOLS))
    assert set(table.sample(random.Random(0), 2_000).tools) <= {r.tool for r in ROWS}
    with pytest.raises(ToolTableError, match="human-waiting"):
        ToolTable(rows[len(ROWS) :], "only-humans")


def _write(tmp_path: Path, body: object) -> Path:
    path = tmp_path / "summary.json"
    path.write_text(body if isinstance(body, str) else json.dumps(body))
    return path


def test_load_summary_json_converts_ms_to_seconds(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        {
            "tool_by_name": {
                "Bash": {"n": 10, "p50": 100, "p90": 2000, "p99": 30000},
                "AskUserQuestion": {"n": 5, "p50": 1, "p90": 2, "p99": 3},
            }
        },
    )
    table = load_summary_json(path)
    assert table.rows == (ToolStats("Bash", 10, 0.1, 2.0, 30.0),)
    assert table.excluded == ("AskUserQuestion",)
    assert "summary.json" in table.source and "sha256" in table.source


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("{not json", "not valid JSON"),
        ({"tools": {}}, "'tool_by_name'"),
        ({"tool_by_name": {"Bash": {"n": 3, "p50": 1, "p90": 2}}}, "lacks field 'p99'"),
        ({"tool_by_name": {"Bash": {"n": 3, "p50": 5, "p90": 2, "p99": 9}}}, "p50 <= p90 <= p99"),
        ({"tool_by_name": {"Bash": {"n": 3, "p50": -1, "p90": 2, "p99": 9}}}, "negative"),
        ({"tool_by_name": {"Bash": {"n": 0, "p50": 1, "p90": 2, "p99": 9}}}, "field 'n'"),
        ({"tool_by_name": {"Bash": {"n": 3, "p50": "x", "p90": 2, "p99": 9}}}, "must be a number"),
        ({"tool_by_name": {}}, "no tools"),
    ],
)
def test_bad_summary_json_is_one_line_naming_file_and_field(
    tmp_path: Path, body: object, fragment: str
) -> None:
    path = _write(tmp_path, body)
    with pytest.raises(ToolTableError) as info:
        load_summary_json(path)
    message = str(info.value)
    assert fragment in message and str(path) in message and "\n" not in message


def test_missing_summary_file(tmp_path: Path) -> None:
    with pytest.raises(ToolTableError, match="cannot read"):
        load_summary_json(tmp_path / "absent.json")


def _effective_latencies(tool: str) -> list[float]:
    """Independent reading of the sample trace: internal if not null, else wall."""
    values = []
    for line in TRACE.read_text().splitlines():
        for call in json.loads(line)["tools"]:
            if call["tool_name"] == tool:
                internal = call["tool_internal_latency_ms"]
                values.append(call["tool_wall_latency_ms"] if internal is None else internal)
    return values


@pytest.mark.parametrize("tool", ["WebSearch", "Bash", "exec_command"])
def test_build_summary_matches_independent_quantiles(tool: str) -> None:
    summary = build_summary_from_trace(TRACE)
    effective = _effective_latencies(tool)
    positive = sorted(v for v in effective if v > 0)
    cuts = statistics.quantiles(positive, n=100, method="inclusive")  # = numpy 'linear'
    row = summary["tool_by_name"][tool]
    assert row["n"] == len(effective)
    assert row["p50"] == pytest.approx(max(statistics.median(positive), 0.5))
    assert row["p90"] == pytest.approx(cuts[89])
    assert row["p99"] == pytest.approx(cuts[98])


def test_build_summary_counts_and_rules() -> None:
    summary = build_summary_from_trace(TRACE)
    by_name = summary["tool_by_name"]
    # exec_command: 8 calls, internal 0 ms on 6 of them -> quantiles over the other two.
    assert by_name["exec_command"]["n"] == 8
    assert by_name["exec_command"]["p50"] == pytest.approx((1002 + 10) / 2)
    assert by_name["WebSearch"]["p50"] == 16109  # internal, not wall (16113)
    assert sum(r["n"] for r in by_name.values()) == summary["provenance"]["calls"] == 19
    assert summary["provenance"]["rounds"] == 19
    table = table_from_summary(summary, "built", "built")
    assert {r.tool for r in table.rows} == set(by_name)


def test_build_summary_floors_p50_and_skips_unmeasured(tmp_path: Path) -> None:
    calls = [
        {"tool_name": "tiny", "tool_wall_latency_ms": 3, "tool_internal_latency_ms": 0.2}
    ] * 5 + [{"tool_name": "never", "tool_wall_latency_ms": 0, "tool_internal_latency_ms": None}]
    path = tmp_path / "trace.jsonl"
    path.write_text(json.dumps({"tools": calls}) + "\n")
    summary = build_summary_from_trace(path)
    assert summary["tool_by_name"] == {"tiny": {"n": 5, "p50": 0.5, "p90": 0.5, "p99": 0.5}}
    assert summary["provenance"]["skipped_tools"] == ["never"]


def test_build_summary_reads_gzip_and_rejects_truncated(tmp_path: Path) -> None:
    data = gzip.compress(TRACE.read_bytes())
    good = tmp_path / "trace.jsonl.gz"
    good.write_bytes(data)
    assert build_summary_from_trace(good) == build_summary_from_trace(TRACE) | {
        "provenance": build_summary_from_trace(TRACE)["provenance"] | {"trace": good.name}
    }
    bad = tmp_path / "cut.jsonl.gz"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(ToolTableError) as info:
        build_summary_from_trace(bad)
    assert str(bad) in str(info.value) and "\n" not in str(info.value)


def test_build_summary_rejects_non_trace_lines(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text('{"tools": []}\n{"rounds": 1}\n')
    with pytest.raises(ToolTableError, match="line 2: field 'tools'"):
        build_summary_from_trace(path)
