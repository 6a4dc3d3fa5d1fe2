"""The Section V-D "what should I compile" summary (rearrival.search.advise, `rearrival advise`)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
from conftest import config_with_search
from typer.testing import CliRunner

from rearrival.atomic import atomic_write_json
from rearrival.cli import app
from rearrival.config.search import SearchError, SearchSettings
from rearrival.config.study import load_study_config
from rearrival.model.configuration import RblnConfiguration
from rearrival.model.cost.profile import measured_profile
from rearrival.model.plans.plan import write_plan
from rearrival.model.plans.plangen import MultiRoundSpec, generate_multi_round_plan
from rearrival.model.simulator.rbln.sim import SimConfig, simulate
from rearrival.search.advise import (
    advise,
    full_reuse_tokens,
    larger_candidate,
    predict,
    to_markdown,
)
from rearrival.search.candidates import candidate_record, search_candidates
from rearrival.search.plan_files import load_plan_dir
from rearrival.search.settings import override_settings

TINY_SEARCH = {
    "batch_sizes": [4, 6],
    "max_buckets": 3,
    "n": [2, 3],
    "seeds": 1,
    "blocks": 2,
    "restricted_n": [[2]],
    "top": 3,
    "shards": 2,
}
runner = CliRunner()

BASELINE = RblnConfiguration((1, 2, 4, 8), 8)


@pytest.fixture
def tiny_config(tmp_path: Path) -> Path:
    return config_with_search(tmp_path, TINY_SEARCH)


@pytest.fixture
def plans_dir(tmp_path: Path, make_random_plan) -> Path:
    rng = random.Random(21)
    out = tmp_path / "plans"
    for i in range(3):
        write_plan(make_random_plan(rng, 4, max_gen=30, max_wait_s=0.3), out / f"p{i}.parquet")
    return out


def selected_dir(tmp_path: Path, cand: RblnConfiguration) -> Path:
    out = tmp_path / "search"
    atomic_write_json(out / "selected.json", {**candidate_record(cand), "search_score": 0.95})
    return out


def test_larger_candidate_keeps_buckets_and_moves_the_top() -> None:
    pick = RblnConfiguration((1, 4, 6, 8, 10, 16), 16)
    assert larger_candidate(pick, (8, 10, 12, 16)) == RblnConfiguration((1, 4, 6, 8, 10, 24), 24)
    assert larger_candidate(
        RblnConfiguration((1, 3, 10), 10), (8, 10, 12, 16)
    ) == RblnConfiguration((1, 3, 12), 12)


def test_full_reuse_floor_by_hand(plans_dir: Path) -> None:
    profile = measured_profile()
    plans = load_plan_dir(plans_dir)
    floor = 0
    for plan in plans:
        for s in plan.sessions:
            l1 = s.prompt_tokens + s.gen_tokens + s.appended_tokens
            floor += l1 - min(s.prompt_tokens, l1 - 1) // 128 * 128
    assert full_reuse_tokens(plans, profile) == floor
    # the baseline can only compute more than the floor, never less
    assert predict(plans, BASELINE)["computed_prefill_tokens"] >= floor


def test_baseline_pick_predicts_no_saving(
    tiny_config: Path, plans_dir: Path, tmp_path: Path
) -> None:
    cfg = load_study_config(tiny_config)
    advice = advise(cfg, plans_dir=plans_dir, search_dir=selected_dir(tmp_path, BASELINE))
    assert advice["predicted_saving"] == 0.0
    assert advice["decode_ratio"] == advice["prefill_ratio"] == 1.0
    assert advice["selected"]["configuration"]["id"] == BASELINE.id
    base = advice["baseline"]
    assert base["reuse_misses"] == base["re_arrivals"] - base["reuse_hits"]
    assert base["kv_gib"] == 9.0 and base["kv_gib_per_device"] == 2.25  # Table XV
    assert base["compile_s"] == pytest.approx(42.3 + 61.33 * 5)


def test_enough_slots_means_complete_reuse_and_no_gain_from_more(
    tiny_config: Path, plans_dir: Path, tmp_path: Path
) -> None:
    # 4 sessions hold at most 8 slots (first request + re-arrival each): with 16 slots
    # nothing is ever evicted, so every re-arrival reuses and 24 slots change nothing
    pick = RblnConfiguration((1, 2, 4, 16), 16)
    cfg = load_study_config(tiny_config)
    advice = advise(cfg, plans_dir=plans_dir, search_dir=selected_dir(tmp_path, pick))
    # (a prompt under 128 tokens caches nothing, so hits can stay below re-arrivals; the
    # reuse test is the token floor)
    assert advice["selected"]["extra_prefill_tokens"] == 0
    assert advice["larger"]["configuration"]["id"] == "24:1,2,4,24"
    assert advice["further_saving_larger"] == 0.0
    assert advice["more_slots_verdict"].startswith("more slots would not help")
    text = to_markdown(advice)
    assert "## 1. Baseline losses" in text and "`16:1,2,4,16`" in text


def test_advise_runs_the_search_when_no_result_is_given(tiny_config: Path) -> None:
    cfg = load_study_config(tiny_config)
    advice = advise(cfg, n=[3], workers=1)
    assert "search run now" in advice["recommendation_source"]
    assert advice["selected"]["configuration"]["batch_size"] in (4, 6)
    assert advice["inputs"].startswith("2 evaluation plans of the config at N 3")
    assert "search run now at N 3" in advice["recommendation_source"]


def test_cli_json_and_markdown(tiny_config: Path, plans_dir: Path, tmp_path: Path) -> None:
    search = selected_dir(tmp_path, RblnConfiguration((1, 4, 8), 8))
    args = [
        "advise",
        "--config",
        str(tiny_config),
        "--plans",
        str(plans_dir),
        "--search",
        str(search),
    ]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["selected"]["configuration"]["id"] == "8:1,4,8"
    result = runner.invoke(app, args)
    assert result.exit_code == 0 and result.stdout.startswith("# What to compile")


def test_search_option_takes_the_directory_or_selected_json(
    tiny_config: Path, plans_dir: Path, tmp_path: Path
) -> None:
    """README and --help say selected.json; the search directory works too."""
    search = selected_dir(tmp_path, RblnConfiguration((1, 4, 8), 8))
    for given in (search, search / "selected.json"):
        result = runner.invoke(
            app,
            [
                "advise",
                "--config",
                str(tiny_config),
                "--plans",
                str(plans_dir),
                "--search",
                str(given),
                "--json",
            ],
        )
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        assert data["selected"]["configuration"]["id"] == "8:1,4,8"
        assert data["recommendation_source"].startswith(str(search / "selected.json"))


def test_bad_inputs_name_the_input(tiny_config: Path, tmp_path: Path) -> None:
    cfg = load_study_config(tiny_config)
    (tmp_path / "empty").mkdir()
    with pytest.raises(SearchError, match="plans directory"):
        advise(cfg, plans_dir=tmp_path / "empty", search_dir=tmp_path)
    with pytest.raises(SearchError, match=r"selected\.json"):
        advise(cfg, n=[2], search_dir=tmp_path / "missing")


def test_advise_evaluates_at_the_search_n_set_or_refuses(tiny_config: Path, tmp_path: Path) -> None:
    """Issue: given the fleet search (N 16/32/48), advise evaluated at N=8 silently."""
    search = tmp_path / "search"
    pick = RblnConfiguration((1, 4, 16, 32, 48), 48)
    atomic_write_json(
        search / "selected.json",
        {**candidate_record(pick), "search_score": 0.9, "search_n": [16, 48]},
    )
    cfg = load_study_config(tiny_config)
    with pytest.raises(SearchError, match="N 8 differs from the N set 16,48"):
        advise(cfg, n=[8], search_dir=search)
    advice = advise(cfg, search_dir=search)
    assert advice["n"] == [16, 48] and "N 16,48" in advice["inputs"]
    assert advise(cfg, n=[48, 16], search_dir=search)["n"] == [16, 48]


def test_advise_checks_memory_of_everything_it_names(tiny_config: Path, tmp_path: Path) -> None:
    """48 slots fit the 15.7 GiB devices with 0.34 GiB to spare (README); 56 do not."""
    search = selected_dir(tmp_path, RblnConfiguration((1, 4, 16, 32, 48), 48))
    cfg = load_study_config(tiny_config)
    advice = advise(cfg, n=[16], search_dir=search)
    chosen, larger = advice["selected"], advice["larger"]
    assert chosen["fits_memory"] and chosen["headroom_gib_per_device"] == pytest.approx(
        15.7 - (7.45 + 48 * 1.125) / 4
    )
    assert larger["configuration"]["slots"] == 56 and not larger["fits_memory"]
    assert larger["memory_gib_per_device"] == pytest.approx((7.45 + 56 * 1.125) / 4)
    assert advice["more_slots_verdict"].startswith("more slots do not fit: 56:")
    assert advice["max_slots_in_memory"] == 49
    text = to_markdown(advice)
    assert "leaves 0.34 GiB per device" in text
    assert "17.61 GiB per device of 15.70 GiB" in text  # weights + 56 x 1.125 GiB, over 4
    assert advice["baseline"]["fits_memory"] and "(no fit)" in text


# --- agent sessions under --plans: the advice searches on them (issue 29, item 10) --------


def multi_round_dir(out: Path, blocks: range) -> Path:
    spec = MultiRoundSpec(rounds=(3, 5), new_tokens=(50, 300), start_spread_s=1.0)
    for block in blocks:
        plan = generate_multi_round_plan(5, study_seed=3, replicate=0, block=block, spec=spec)
        write_plan(plan, out / f"b{block}.parquet")
    return out


def best_by_hand(plans, cands) -> RblnConfiguration:
    """The V-A rule directly: least summed device time relative to the baseline, ties to
    fewer buckets and slots."""

    def total(cand: RblnConfiguration) -> float:
        return math.fsum(simulate(p, SimConfig.of(cand)).device_s for p in plans)

    base = total(BASELINE)
    return min(cands, key=lambda c: (total(c) / base, c.tiebreak()))


def test_advise_on_agent_session_plans_searches_those_plans(tiny_config, tmp_path) -> None:
    cfg = load_study_config(tiny_config)
    plans_dir = multi_round_dir(tmp_path / "agents", range(2))
    advice = advise(cfg, plans_dir=plans_dir, workers=1)
    source = advice["recommendation_source"]
    assert source.startswith(f"a search over the 2 plan files under {plans_dir}")
    assert "not held out" in source and advice["n"] == [5]
    plans = load_plan_dir(plans_dir)
    cands = search_candidates(override_settings(SearchSettings.from_config(cfg), n=(5,)))
    assert advice["selected"]["configuration"]["id"] == best_by_hand(plans, cands).id
    # every round after a session's first is a re-arrival of the plans themselves
    assert advice["baseline"]["re_arrivals"] == sum(p.requests - p.n for p in plans)


def test_agent_session_plans_split_into_search_and_evaluation(tiny_config, tmp_path) -> None:
    cfg = load_study_config(tiny_config)
    root = tmp_path / "split"
    multi_round_dir(root / "search", range(2))
    multi_round_dir(root / "evaluation", range(5, 8))
    result = runner.invoke(app, ["advise", "--config", str(tiny_config), "--plans", str(root)])
    assert result.exit_code == 0, result.output
    assert f"under {root}/search (evaluation/ held out)" in result.stdout
    advice = advise(cfg, plans_dir=root, workers=1)
    held_out = load_plan_dir(root / "evaluation")
    assert advice["baseline"]["re_arrivals"] == sum(p.requests - p.n for p in held_out)
    assert advice["inputs"] == f"3 plan files under {root}"


def test_a_pick_predicted_worse_than_the_baseline_is_not_recommended(
    tiny_config: Path, plans_dir: Path, tmp_path: Path
) -> None:
    """Issue 36: a pick predicted slower than the baseline was still the advice; the
    advice now recommends the baseline and says why (a 1-slot pick on 4 sessions)."""
    search = tmp_path / "search"
    worse = RblnConfiguration((1,), 1)
    atomic_write_json(search / "selected.json", {**candidate_record(worse), "search_n": [4]})
    cfg = load_study_config(tiny_config)
    advice = advise(cfg, plans_dir=plans_dir, search_dir=search, profile=measured_profile())
    assert advice["predicted_saving"] < 0
    assert advice["recommendation"]["keep_baseline"]
    assert advice["recommendation"]["id"] == BASELINE.id
    text = to_markdown(advice)
    assert f"**Recommended: `{BASELINE.id}`**" in text and "keep the baseline" in text


def test_the_saving_outside_its_own_spread_is_said() -> None:
    from rearrival.search.verdict import deploy_choice, outside_spread

    spread = {"p05": 0.0001, "median": 0.0007, "p95": 0.0015}
    (caveat,) = outside_spread(-0.0034, spread)
    assert caveat["code"] == "outside_spread" and "-0.34 %" in caveat["message"]
    assert outside_spread(0.0007, spread) == []
    assert deploy_choice("a", "b", 0.01)["id"] == "a"
    assert deploy_choice("a", "b", 0.0)["keep_baseline"]


def test_advise_takes_the_search_axes(tiny_config: Path) -> None:
    """Issue 36: "more slots still help: 24 ..." could not be followed from advise, which
    had no --batch-sizes; it takes the search's axes, and says the command to run."""
    from rearrival.search.advise import next_search

    args = ["advise", "--config", str(tiny_config), "--json"]
    result = runner.invoke(app, [*args, "--batch-sizes", "2,3", "--max-buckets", "2"])
    assert result.exit_code == 0, result.output
    advice = json.loads(result.stdout)
    assert advice["selected"]["configuration"]["batch_size"] in (2, 3)
    assert len(advice["selected"]["configuration"]["buckets"]) <= 2
    settings = SearchSettings.from_config(load_study_config(tiny_config))
    helps = {"more_slots_verdict": "more slots still help: 14:1,14 saves a further 2.00 %"}
    larger = RblnConfiguration((1, 14), 14)
    assert next_search(helps, settings, larger) == "rearrival advise --batch-sizes 4,6,14 --n 2,3"
    assert (
        next_search({"more_slots_verdict": "more slots would not help"}, settings, larger) is None
    )
    refused = runner.invoke(app, [*args, "--substrate", "vllm", "--batch-sizes", "8"])
    assert "--batch-sizes: only for --substrate rbln" in str(refused.exception)


def test_a_calibration_of_the_emulated_twin_says_so(tiny_config: Path, tmp_path: Path) -> None:
    """Issue 36: "calibrated" was visible only inside calibrated/emulated/<digest>; the
    profile line and the advice say it is a calibration of the twin, not of hardware."""
    import yaml

    from rearrival.model.cost.profile import load_profile, profile_bytes

    tree = yaml.safe_load(profile_bytes(None))
    tree["profile_version"] = "calibrated/emulated/dbadc5433fa0"
    path = tmp_path / "twin.yaml"
    path.write_text(yaml.safe_dump(tree))
    assert "not on RBLN hardware" in load_profile(path).description()
    cfg = load_study_config(tiny_config)
    text = to_markdown(advise(cfg, profile=load_profile(path)))
    assert "calibrated on the emulated backend (the virtual twin" in text
