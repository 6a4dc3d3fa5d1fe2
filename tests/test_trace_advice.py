"""`rearrival advise --trace`: the Section V-D procedure on workloads drawn from a trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import TRACELAB_SAMPLE, config_with_search
from test_trace_import import _call, _round, _write
from typer.testing import CliRunner

from rearrival.atomic import atomic_write_json
from rearrival.cli import app
from rearrival.config.search import SearchError
from rearrival.config.study import load_study_config
from rearrival.model.configuration import RblnConfiguration
from rearrival.model.plans.plan import MultiRoundSession
from rearrival.search.advise import to_markdown
from rearrival.search.candidates import candidate_record, candidates
from rearrival.search.trace_advice import advise_trace, import_trace, workload_plans

runner = CliRunner()
SMALL = {
    "batch_sizes": [2, 4],
    "max_buckets": 3,
    "n": [3, 5],
    "seeds": 2,
    "blocks": 1,
    "restricted_n": [[3]],
    "top": 3,
    "shards": 1,
}


@pytest.fixture
def small_config(tmp_path: Path) -> Path:
    return config_with_search(tmp_path, SMALL)


@pytest.fixture
def two_round_trace(tmp_path: Path) -> Path:
    """Four sessions of two rounds each, tool waits of 1-12 s (a shape the simulator of
    every build runs)."""
    rows = []
    for i, (tokens, wait) in enumerate([(1500, 1.0), (2600, 12.0), (900, 4.0), (3100, 7.0)]):
        start = 10.0 * i
        rows.append(_round(f"s{i}", 0, start, tokens, 60, [_call("Bash", start + 1, wait)]))
        rows.append(_round(f"s{i}", 1, start + 2 + wait, tokens + 60 + 300, 40))
    return _write(tmp_path / "trace.jsonl", rows)


def test_workloads_draw_sessions_with_replacement_at_time_zero(two_round_trace: Path) -> None:
    from rearrival.model.cost.profile import measured_profile

    pool = import_trace(two_round_trace, 1.0, measured_profile()).plan
    plans = workload_plans(pool, [3, 5], 2, seed=0, inputs="search")
    assert [p.n for p in plans] == [3, 3, 5, 5]
    rounds = {s.rounds for s in pool.sessions}
    for plan in plans:
        for s in plan.sessions:
            assert s.start_s == 0.0
            if isinstance(s, MultiRoundSession):
                assert s.rounds in rounds
    again = workload_plans(pool, [3, 5], 2, seed=0, inputs="search")
    assert [p.sha256() for p in plans] == [p.sha256() for p in again]
    other = workload_plans(pool, [3, 5], 2, seed=0, inputs="evaluation")
    assert [p.sha256() for p in plans] != [p.sha256() for p in other]


def test_advise_trace_runs_the_procedure(small_config: Path, two_round_trace: Path) -> None:
    cfg = load_study_config(small_config)
    advice = advise_trace(cfg, two_round_trace, resamples=20, workload="drawn")
    assert advice["n"] == [3, 5]
    searched = {c.id for c in candidates((2, 4), 3)}
    assert advice["selected"]["configuration"]["id"] in searched
    assert "never used to select" in advice["inputs"]
    assert "candidates" in advice["recommendation_source"]
    # every drawn session re-arrives once (round 1): 2 draws x (3 + 5) sessions
    (row,) = advice["baseline_per_round"]
    assert row["round"] == 1 and row["re_arrivals"] == 16
    assert row["extra_prefill_tokens"] == advice["baseline"]["extra_prefill_tokens"]
    spread = advice["saving_spread"]
    assert spread["p05"] <= spread["median"] <= spread["p95"] and spread["resamples"] == 20
    assert advice["selected"]["fits_memory"] and advice["larger"]["fits_memory"]
    assert advice["import"]["trace_sha256"] and advice["import"]["flags"]["time_origin"] == "zero"
    text = to_markdown(advice)
    assert "| round | re-arrivals | KV misses | extra prefill tokens |" in text
    assert "Over 20 resampled session sets" in text and "leaves" in text
    assert advise_trace(cfg, two_round_trace, resamples=20, workload="drawn") == advice  # seeded


def test_advise_trace_refuses_n_other_than_the_search(
    small_config: Path, two_round_trace: Path, tmp_path: Path
) -> None:
    search = tmp_path / "search"
    atomic_write_json(
        search / "selected.json",
        {**candidate_record(RblnConfiguration((1, 4), 4)), "search_n": [3]},
    )
    cfg = load_study_config(small_config)
    with pytest.raises(SearchError, match="N 5 differs from the N set 3"):
        advise_trace(cfg, two_round_trace, n=[5], search_dir=search, resamples=5, workload="drawn")
    advice = advise_trace(cfg, two_round_trace, search_dir=search, resamples=5, workload="drawn")
    assert advice["n"] == [3] and advice["selected"]["configuration"]["id"] == "4:1,4"


def test_cli_json_and_malformed_trace(small_config: Path, two_round_trace: Path) -> None:
    args = ["advise", "--config", str(small_config), "--resamples", "5", "--workload", "drawn"]
    result = runner.invoke(app, [*args, "--trace", str(two_round_trace), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["n"] == [3, 5]
    bad = two_round_trace.with_name("bad.jsonl")
    bad.write_text('{"session_id": "a"}\n')
    result = runner.invoke(app, [*args, "--trace", str(bad)])
    assert result.exit_code == 2 and "line 1" in result.output


def test_sample_without_scale_says_how_to_proceed(small_config: Path) -> None:
    args = ["advise", "--config", str(small_config), "--trace", str(TRACELAB_SAMPLE)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "nothing fits" in result.output and "--token-scale 0.16" in result.output


def test_sample_with_token_scale_recommends(small_config: Path) -> None:
    """The issue's done-when: the 19-round sample at --token-scale 0.15 gives a pick."""
    args = ["advise", "--config", str(small_config), "--trace", str(TRACELAB_SAMPLE)]
    drawn = ["--workload", "drawn", "--resamples", "10"]
    result = runner.invoke(app, [*args, "--token-scale", "0.15", *drawn])
    assert result.exit_code == 0, result.output
    text = result.output
    assert "2 sessions, 19 rounds" in text and "WHAT-IF" in text
    assert "## 2. Recommended configuration" in text and "Pick: `" in text
    assert "Over 10 resampled session sets" in text and "leaves" in text
    # rounds 1..9 appear in the per-round table (the longer session has 10 rounds)
    assert "| 9 |" in text and "| 10 |" not in text


def test_advise_trace_shows_its_long_steps_on_a_terminal_only(
    small_config: Path, two_round_trace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The search over drawn workloads and the bootstrap spread draw progress bars on a
    terminal's stderr and print nothing into a log."""
    import io
    import sys

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    cfg = load_study_config(small_config)
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    quiet = advise_trace(cfg, two_round_trace, resamples=5, workload="drawn")
    assert log.getvalue() == ""
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert advise_trace(cfg, two_round_trace, resamples=5, workload="drawn") == quiet
    shown = terminal.getvalue()
    assert "advise: simulating the candidates" in shown
    assert "advise: spread of the saving" in shown


def _advice_json(small_config: Path, *args: str) -> dict:
    result = runner.invoke(app, ["advise", "--config", str(small_config), *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


ANSWER = ("n", "predicted_saving", "more_slots_verdict", "baseline", "selected", "larger")


@pytest.mark.parametrize("origin", ["first", "zero"])
def test_advise_trace_and_advise_plans_give_one_answer(
    small_config: Path, two_round_trace: Path, tmp_path: Path, origin: str
) -> None:
    """Issue 36: on one trace `advise --plans` (the import with its timestamps) kept the
    baseline while `advise --trace` (6-10 sessions started together) recommended a
    compile. The trace's own timing is now --trace's default, and the same options give
    the same answer; starting every session together is a what-if the output names."""
    plans = tmp_path / f"plans-{origin}"
    imported = runner.invoke(
        app,
        ["plans", "from-trace", str(two_round_trace), "--time-origin", origin, "--out", str(plans)],
    )
    assert imported.exit_code == 0, imported.output
    on_plans = _advice_json(small_config, "--plans", str(plans))
    on_trace = _advice_json(small_config, "--trace", str(two_round_trace), "--time-origin", origin)
    assert {k: on_trace[k] for k in ANSWER} == {k: on_plans[k] for k in ANSWER}
    assert on_trace["workload"]["kind"] == "trace"
    assert (on_trace["workload"]["what_if"] is None) == (origin == "first")
    drawn = _advice_json(small_config, "--trace", str(two_round_trace), "--workload", "drawn")
    assert "not the trace's own timing" in drawn["workload"]["what_if"]
    assert drawn["workload"]["trace_peak_sessions"] == 2  # sessions 10 s apart, 2-14 s long
    text = runner.invoke(
        app,
        [
            "advise",
            "--config",
            str(small_config),
            "--trace",
            str(two_round_trace),
            "--workload",
            "drawn",
            "--resamples",
            "5",
        ],
    ).output
    assert "**What-if:** --workload drawn" in text and "at most 2 sessions" in text


def test_advise_refuses_an_unknown_workload(small_config: Path, two_round_trace: Path) -> None:
    args = ["advise", "--config", str(small_config), "--trace", str(two_round_trace)]
    result = runner.invoke(app, [*args, "--workload", "together"])
    assert isinstance(result.exception, SearchError)
    assert "--workload 'together': give trace" in str(result.exception)


def test_advise_plans_repeats_the_imports_truncation(small_config: Path, tmp_path: Path) -> None:
    """Issue 36: `advise --plans` did not repeat the import's warning that sessions were
    cut at the maximum sequence length; it now says how many, and that the limit counts
    prompts plus generated tokens."""
    rows = []
    for i, second in enumerate([2000, 9000, 2500]):
        start = 10.0 * i
        rows.append(_round(f"s{i}", 0, start, 1500, 60, [_call("Bash", start + 1, 2.0)]))
        rows.append(_round(f"s{i}", 1, start + 4, second, 40))
    trace = _write(tmp_path / "long.jsonl", rows)
    plans = tmp_path / "plans"
    done = runner.invoke(app, ["plans", "from-trace", str(trace), "--out", str(plans)])
    assert done.exit_code == 0, done.output
    advice = _advice_json(small_config, "--plans", str(plans))
    (cut,) = [c for c in advice["caveats"] if c["code"] == "truncated"]
    assert "1 of 3 sessions" in cut["message"] and "prompts plus generated" in cut["message"]
    assert "1 rounds removed" in cut["message"]


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--resamples", "20"], "--seed, --resamples: only with --trace --workload drawn"),
        (["--workload", "drawn", "--time-origin", "zero"], "drawn workloads start every"),
    ],
)
def test_options_the_chosen_workload_ignores_are_refused(
    small_config: Path, two_round_trace: Path, extra: list[str], words: str
) -> None:
    args = ["advise", "--config", str(small_config), "--trace", str(two_round_trace), *extra]
    result = runner.invoke(app, args)
    assert isinstance(result.exception, SearchError) and words in str(result.exception)
    alone = runner.invoke(app, ["advise", "--config", str(small_config), "--workload", "drawn"])
    assert "--workload, --time-origin: only with --trace" in str(alone.exception)
