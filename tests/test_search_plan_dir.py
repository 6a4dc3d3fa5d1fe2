"""`rearrival search --plans DIR`: the configuration search over any plan directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import config_with_search
from test_trace_import import _round, _three_sessions, _write
from typer.testing import CliRunner

from rearrival.cli import app
from rearrival.config.search import SearchError
from rearrival.config.study import load_study_config
from rearrival.model.configuration import RblnConfiguration
from rearrival.model.plans.plan import PlanError, write_plan
from rearrival.model.plans.tracelab_import import plans_from_trace
from rearrival.search.advise import predict
from rearrival.search.candidates import candidates
from rearrival.search.outputs import OutputPaths
from rearrival.search.plan_dir import search_plan_dir

runner = CliRunner()
SMALL = {
    "batch_sizes": [2, 4],
    "max_buckets": 3,
    "n": [3],
    "seeds": 1,
    "blocks": 1,
    "restricted_n": [],
    "top": 3,
    "shards": 1,
}


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path]:
    config = config_with_search(tmp_path, SMALL)
    trace = _three_sessions(tmp_path / "trace.jsonl")
    plans = tmp_path / "plans"
    for seed in range(2):
        result = plans_from_trace(trace, sessions=2, seed=seed, time_origin="zero")
        write_plan(result.plan, plans / f"s{seed}.parquet")
    write_plan(plans_from_trace(trace, time_origin="zero").plan, plans / "all.parquet")
    return config, plans


def test_search_over_a_plan_directory_ranks_by_summed_seconds(
    setup: tuple[Path, Path], tmp_path: Path
) -> None:
    config, plans = setup
    cfg = load_study_config(config)
    summary = search_plan_dir(cfg, plans, OutputPaths.under(tmp_path / "out"), workers=1)
    selected = json.loads((tmp_path / "out" / "selected.json").read_text())
    assert selected["search_n"] == [2, 3] and summary["inputs"]["n"] == [2, 3]
    assert summary["inputs"]["evaluation_held_out"] is False
    assert summary["inputs"]["search_plans"] == 3 and summary["inputs"]["multi_round_plans"] == 6
    # oracle: the score is sum of the pick's device seconds / the baseline's, over the plans
    from rearrival.search.plan_files import load_plan_dir

    loaded = load_plan_dir(plans)
    base = predict(loaded, RblnConfiguration((1, 2, 4, 8), 8))["device_s"]
    scores = {c.id: predict(loaded, c)["device_s"] / base for c in candidates((2, 4), 3)}
    assert selected["search_score"] == pytest.approx(min(scores.values()), rel=1e-12)
    assert scores[selected["id"]] == pytest.approx(min(scores.values()), rel=1e-12)


def test_split_directory_and_n_option(setup: tuple[Path, Path], tmp_path: Path) -> None:
    config, plans = setup
    split = tmp_path / "split"
    for inputs in ("search", "evaluation"):
        (split / inputs).mkdir(parents=True)
        (split / inputs / "all.parquet").write_bytes((plans / "all.parquet").read_bytes())
    out = tmp_path / "out"
    args = ["search", "--config", str(config), "--workers", "1", "--out", str(out)]
    result = runner.invoke(app, [*args, "--plans", str(split)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["inputs"]["evaluation_held_out"] is True
    assert summary["inputs"]["n"] == [3]
    result = runner.invoke(app, ["search", "--n", "8", *args[1:], "--plans", str(split)])
    assert result.exit_code != 0 and "plans under" in str(result.exception or result.output)


def test_empty_directory_is_refused(setup: tuple[Path, Path], tmp_path: Path) -> None:
    config, _ = setup
    (tmp_path / "none").mkdir()
    with pytest.raises(SearchError, match=r"no \.parquet or \.json plan files"):
        search_plan_dir(
            load_study_config(config), tmp_path / "none", OutputPaths.under(tmp_path / "out")
        )


def test_plans_longer_than_the_profile_are_refused(
    setup: tuple[Path, Path], tmp_path: Path
) -> None:
    """The profile's costs were measured at 8,192 tokens; a plan imported for a longer
    context is refused, never priced by extrapolation."""
    config, _ = setup
    long_trace = _write(tmp_path / "long.jsonl", [_round("a", 0, 0.0, 9000, 100)])
    plans = tmp_path / "long"
    write_plan(plans_from_trace(long_trace, max_seq_len=16_384).plan, plans / "p.parquet")
    with pytest.raises(PlanError, match=r"9100 tokens, over the maximum sequence length 8192"):
        search_plan_dir(load_study_config(config), plans, OutputPaths.under(tmp_path / "out"))
    assert not (tmp_path / "out").exists()
