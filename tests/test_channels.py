"""Channels A and B (paper II-D, docs/DESIGN.md §7) against hand computations and an oracle."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rearrival.cli import app
from rearrival.judge.channels import ChannelError, channel_a, channel_b, channels, union_length
from rearrival.measure import records
from rearrival.measure.records import read_run, write_run
from rearrival.model.configuration import RblnConfiguration

runner = CliRunner()

# Hand-built step log: (n, b) per decode step and the cost of each with the published
# constants, t = f(b) + 0.501 ms + 0.0413 ms * n (f from Table VII), written out by hand.
PAIRS = [(2, 2), (3, 4), (3, 4), (1, 1), (5, 8)]
DECODE_BY_HAND_S = (
    10.420
    + 0.501
    + 2 * 0.0413
    + 2 * (10.825 + 0.501 + 3 * 0.0413)
    + 9.870
    + 0.501
    + 0.0413
    + 12.970
    + 0.501
    + 5 * 0.0413
) / 1000
# T(q) = ceil(q/128) * (0.021206 + 6.399e-7 q): T(1000) = 8 * 0.0218459, T(104) = 1 * ...
PREFILL_BY_HAND_S = 8 * (0.021206 + 6.399e-7 * 1000) + (0.021206 + 6.399e-7 * 104) + 0.0


def _run(
    tmp_path: Path,
    *,
    pairs=PAIRS,
    computed=(1000, 104, 0),
    log_only=False,
    intervals=((0.0, 1.0), (0.5, 2.0), (3.0, 4.0)),
) -> Path:
    count = len(computed)
    requests = pd.DataFrame(
        {
            "session": list(range(count)),
            "turn": [0] * count,
            "send_s": [s for s, _ in intervals],
            "first_token_s": [s for s, _ in intervals],
            "complete_s": [e for _, e in intervals],
            "prompt_tokens": [1000] * count,
            "cached_tokens": pd.array([None] * count, dtype="Int64"),
            "computed_tokens": pd.array(list(computed), dtype="Int64"),
            "generated_tokens": [3] * count,
            "prefill_s": [float("nan")] * count,
        }
    )
    kinds = ["prefill"] * count + ([] if log_only else ["decode"] * len(pairs))
    step_pairs = [(1, None)] * count + ([] if log_only else list(pairs))
    steps = pd.DataFrame(
        {
            "step": list(range(len(kinds))),
            "kind": kinds,
            "n": [n for n, _ in step_pairs],
            "b": pd.array([b for _, b in step_pairs], dtype="Int64"),
            "start_s": [float("nan")] * len(kinds),
            "end_s": [float("nan")] * len(kinds),
        }
    )
    log = "".join(
        f"DEBUG 01-02 03:04:05 [model_base.py:412] [BUCKET] request_nums={n} "
        f"padded_batch_size={b}\nINFO unrelated line\n"
        for n, b in pairs
    )
    manifest = records.finish_manifest(
        records.manifest_template(
            study="t",
            backend="rbln" if log_only else "emulated",
            configuration=RblnConfiguration((1, 2, 4, 8), 8),
            variant="wait",
            condition="c",
            replicate=0,
            n=count,
            plan_path="p",
            plan_sha256="0" * 64,
            plan_seed=None,
            run_seed=0,
            condition_order=["c"],
        )
    )
    return write_run(
        tmp_path / "run",
        requests=requests,
        steps=steps,
        metrics={"before": {}, "after": {}},
        manifest=manifest,
        server_log=log,
    )


@pytest.mark.parametrize(
    ("intervals", "expected"),
    [
        ([], 0.0),
        ([(0.0, 1.0), (0.5, 2.0)], 2.0),  # overlap
        ([(0.0, 10.0), (2.0, 3.0), (4.0, 5.0)], 10.0),  # nesting
        ([(0.0, 1.0), (1.0, 2.5)], 2.5),  # touching
        ([(1.0, 1.0), (3.0, 3.0)], 0.0),  # zero length
        ([(5.0, 6.0), (0.0, 1.0), (0.5, 0.75)], 2.0),  # unsorted
        ([(0.0, 1.0), (2.0, 3.0), (2.5, 2.5)], 2.0),  # gap and a point inside
    ],
)
def test_union_length_cases(intervals, expected) -> None:
    assert union_length(intervals) == pytest.approx(expected, abs=1e-15)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), max_size=12))
def test_union_length_matches_covered_unit_cells(raw) -> None:
    """Integer intervals: the union's measure is the number of unit cells some interval
    covers, an oracle that shares nothing with the merge sweep."""
    intervals = [(min(a, b), max(a, b)) for a, b in raw]
    cells = {k for a, b in intervals for k in range(a, b)}
    assert union_length(intervals) == len(cells)


@pytest.mark.parametrize("bad", [[(2.0, 1.0)], [(0.0, float("nan"))], [(0.0, float("inf"))]])
def test_union_length_refuses_bad_intervals(bad) -> None:
    with pytest.raises(ValueError):
        union_length(bad)


def test_channel_a_equals_hand_computation(tmp_path: Path) -> None:
    record = read_run(_run(tmp_path))
    a = channel_a(record)
    assert a.decode_s == pytest.approx(DECODE_BY_HAND_S, rel=1e-12)
    assert a.prefill_s == pytest.approx(PREFILL_BY_HAND_S, rel=1e-12)
    assert a.decode_steps == len(PAIRS) and a.step_source == "steps.parquet"


def test_channel_a_from_server_log_when_steps_have_no_decode_rows(tmp_path: Path) -> None:
    record = read_run(_run(tmp_path, log_only=True))
    a = channel_a(record)
    assert a.step_source == "server.log" and a.decode_steps == len(PAIRS)
    assert a.decode_s == pytest.approx(DECODE_BY_HAND_S, rel=1e-12)


def test_unknown_computed_tokens_is_an_error_not_zero(tmp_path: Path) -> None:
    record = read_run(_run(tmp_path, computed=(1000, None, 0)))
    with pytest.raises(ChannelError) as excinfo:
        channel_a(record)
    message = str(excinfo.value)
    assert "requests.parquet: row 1 column 'computed_tokens' is unknown" in message


def test_missing_decode_steps_are_an_error(tmp_path: Path) -> None:
    record = read_run(_run(tmp_path, pairs=[], log_only=True))
    with pytest.raises(ChannelError, match="no decode steps recorded"):
        channel_a(record)


def test_channels_dict_and_r(tmp_path: Path) -> None:
    record = read_run(_run(tmp_path))
    values = channels(record)
    assert list(values) == ["a_s", "a_decode_s", "a_prefill_s", "b_s", "r_s"]
    assert values["b_s"] == pytest.approx(3.0) == channel_b(record)
    assert values["a_s"] == pytest.approx(DECODE_BY_HAND_S + PREFILL_BY_HAND_S, rel=1e-12)
    assert values["r_s"] == pytest.approx(values["b_s"] - values["a_s"], rel=1e-12)


def test_cli_channels_json_one_line_per_run(tmp_path: Path) -> None:
    first = _run(tmp_path / "x")
    second = _run(tmp_path / "y", intervals=((0.0, 4.0), (1.0, 2.0), (5.0, 5.5)))
    result = runner.invoke(app, ["channels", str(first), str(second), "--json"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert [json.loads(line)["b_s"] for line in lines] == [pytest.approx(3.0), pytest.approx(4.5)]
    assert json.loads(lines[0]) == pytest.approx(channels(read_run(first)))


def test_cli_channels_refuses_an_incomplete_run(tmp_path: Path) -> None:
    run = _run(tmp_path)
    (run / records.MANIFEST_FILE).unlink()
    result = runner.invoke(app, ["channels", str(run), "--json"])
    assert result.exit_code != 0 and "never finished" in str(result.exception)
