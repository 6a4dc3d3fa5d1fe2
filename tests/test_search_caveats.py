"""What a search's answer cannot tell (rearrival.search.caveats): sessions that never
overlap, candidates that tie within the input noise, no saving, an N beyond the paper's;
written to summary.json and the advice and printed as warnings (issue 29, items 3, 7)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import config_with_search
from typer.testing import CliRunner

from rearrival.cli import app
from rearrival.config.study import load_study_config
from rearrival.model.plans.plan import MultiRoundSession, Plan, PlanMeta, Round, write_plan
from rearrival.search.advise import advise
from rearrival.search.caveats import n_caveats, spread_caveats, tie_caveats

runner = CliRunner()
DAY = 86_400.0
SMALL = {"batch_sizes": [4, 6], "max_buckets": 3, "n": [3], "restricted_n": [], "top": 3}


def agents(starts: tuple[float, ...]) -> Plan:
    """Sessions of four rounds (long prompts, so reuse and padding matter when they
    share the instance) starting at ``starts``."""
    rounds = (Round(1500, 120, 2.0), Round(300, 120, 1.5), Round(300, 120, 0.5), Round(200, 80))
    sessions = tuple(MultiRoundSession(i, rounds, start) for i, start in enumerate(starts))
    return Plan(sessions, PlanMeta(n=len(sessions)))


def search_plans(tmp_path: Path, starts: tuple[float, ...]):
    plans = tmp_path / "plans"
    write_plan(agents(starts), plans / "plan.parquet")
    config = config_with_search(tmp_path, SMALL)
    out = tmp_path / "out"
    args = ["search", "--plans", str(plans), "--out", str(out), "--config", str(config)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result, json.loads((out / "summary.json").read_text())


def codes(caveats) -> list[str]:
    return [c["code"] for c in caveats]


def test_sessions_days_apart_are_said_to_never_overlap(tmp_path) -> None:
    """The README's sample imported with --time-origin first: its sessions start 72 days
    apart, every candidate scores the same, and the search says why."""
    result, summary = search_plans(tmp_path, (0.0, 72 * DAY, 140 * DAY))
    assert codes(summary["caveats"]) == ["no_difference", "no_overlap"]
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 2 and "--time-origin zero" in warnings[1]
    assert "all 8 candidates predict exactly the same cost" in warnings[0]


def test_sessions_that_share_the_instance_get_no_overlap_warning(tmp_path) -> None:
    _, summary = search_plans(tmp_path, (0.0, 0.0, 0.5))
    assert "no_overlap" not in codes(summary["caveats"])
    assert "no_difference" not in codes(summary["caveats"])


def table(scores, evaluation) -> list[dict]:
    """The rows of a ranked scores table, as much of them as the caveats read."""
    return [{"score": s, "evaluation_score": e} for s, e in zip(scores, evaluation, strict=True)]


def test_ties_within_the_input_noise() -> None:
    # the pick moves 0.003 between search and evaluation inputs: 0.9012 ties, 0.905 not
    found = tie_caveats(table([0.90, 0.9012, 0.905], [0.903, 0.90, 0.91]))
    assert codes(found) == ["tie"]
    assert found[0]["message"].startswith("2 of 3 candidates score within 0.0030")
    # without held-out evaluation inputs only exact ties count
    assert tie_caveats(table([0.90, 0.9012], [0.90, 0.9012]), held_out=False) == []
    assert codes(tie_caveats(table([0.9, 0.9, 0.95], [0.9, 0.9, 0.95]), False)) == ["tie"]


def test_no_saving_within_the_noise_of_the_baseline() -> None:
    assert codes(tie_caveats(table([0.998, 1.0], [1.001, 1.0]))) == ["tie", "no_saving"]
    assert tie_caveats(table([0.95, 1.0], [0.951, 1.0])) == []


def test_a_pick_worse_than_the_baseline_is_not_called_exactly_the_baselines() -> None:
    """issue 38: `--block-sizes 100000` gave a pick scoring above 1 and the text said it
    "is exactly the baseline's"."""
    (found,) = tie_caveats(table([1.37, 1.52], [1.37, 1.52]), held_out=False)
    assert found["code"] == "no_saving"
    assert found["message"].startswith("the pick's score 1.3700 is worse than the baseline's 1")
    assert "exactly" not in found["message"]


def test_the_paper_search_pick_is_not_flagged_as_no_saving() -> None:
    """The paper's pick saves about 8 %, far beyond its 0.0015 search-evaluation gap."""
    found = tie_caveats(table([0.9198, 0.9209, 0.9214], [0.9183, 0.9188, 0.9201]))
    assert codes(found) == ["tie"] and "2 of 3" in found[0]["message"]


def test_a_bootstrap_spread_that_reaches_zero_is_no_saving() -> None:
    spread = {"resamples": 100, "seed": 0, "p05": -0.004, "median": 0.01, "p95": 0.03}
    assert codes(spread_caveats(spread)) == ["no_saving"]
    assert spread_caveats({**spread, "p05": 0.002}) == []


def test_advice_beyond_the_papers_largest_n_carries_a_caveat(tmp_path) -> None:
    assert n_caveats([6, 8, 10, 16]) == []
    assert codes(n_caveats([16, 1000])) == ["extrapolated_n"]
    cfg = load_study_config(config_with_search(tmp_path, SMALL))
    advice = advise(cfg, n=[20], workers=1)
    assert "extrapolated_n" in codes(advice["caveats"])
    result = runner.invoke(app, ["advise", "--n", "20", "--config", str(cfg.source)])
    assert result.exit_code == 0, result.output
    assert "**Caveat:** N 20 is beyond the largest N the paper measured" in result.stdout
