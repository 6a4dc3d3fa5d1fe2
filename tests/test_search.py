"""Configuration search (docs/DESIGN.md §12, paper V-A): candidates, plans, scores, shards, CLI."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import pandas as pd
import pytest
from conftest import config_with_search
from typer.testing import CliRunner

from rearrival.cli import app
from rearrival.config.search import SearchError, SearchSettings
from rearrival.model.configuration import ConfigurationError, RblnConfiguration
from rearrival.model.cost.memory import device_memory
from rearrival.model.cost.profile import ProfileError, measured_profile
from rearrival.model.simulator.rbln.sim import SimConfig, simulate
from rearrival.parquet import write_frame
from rearrival.search import evaluate as evaluate_module
from rearrival.search.candidates import (
    candidates,
    enumerate_candidates,
    search_candidates,
)
from rearrival.search.evaluate import CandidateArrays, Outcome, evaluate, run_shard, score_plan
from rearrival.search.inputs import PlanKey, make_plan, plan_keys
from rearrival.search.merge import combine_shards
from rearrival.search.outputs import OutputPaths, write_outputs
from rearrival.search.rank import compare_n_sets, score_table
from rearrival.search.space import space_size

CLI = Path(sys.executable).with_name("rearrival")
runner = CliRunner()
BASELINE = RblnConfiguration((1, 2, 4, 8), 8)

# A search small enough for tests: 8 candidates (batch 4 and 6, at most 3 buckets), N in
# {2, 3}, 1 seed x 2 blocks, so 4 search and 4 evaluation plans.
TINY = {
    "batch_sizes": [4, 6],
    "max_buckets": 3,
    "n": [2, 3],
    "seeds": 1,
    "blocks": 2,
    "search_seed_block": 100,
    "evaluation_seed_block": 200,
    "restricted_n": [[2], [3]],
    "top": 3,
    "shards": 2,
}


def tiny_settings() -> SearchSettings:
    return SearchSettings(
        batch_sizes=(4, 6),
        max_buckets=3,
        n=(2, 3),
        seeds=1,
        blocks=2,
        restricted_n=((2,), (3,)),
        top=3,
        shards=2,
    )


def tiny_plans(settings: SearchSettings):
    return [(key, make_plan(key, settings, 11, None)) for key in plan_keys(settings)]


def direct(plan, cand: RblnConfiguration) -> Outcome:
    r = simulate(plan, SimConfig.of(cand))
    return Outcome(
        r.device_s, r.decode_s, r.prefill_s, r.reuse_hits, r.re_arrivals, r.computed_prefill_tokens
    )


# --- candidates -------------------------------------------------------------------------


def test_enumeration_matches_the_paper_counts() -> None:
    cands = candidates()
    per_batch = {b: sum(1 for c in cands if c.batch_size == b) for b in (8, 10, 12, 16)}
    assert per_batch == {8: 57, 10: 163, 12: 386, 16: 1471}
    assert len(cands) == 2077
    # our --max-buckets counts buckets in total; the authors' default 6 (intermediates + 1)
    # is our 7
    assert len(enumerate_candidates(max_buckets=7)) == 4393


def test_order_is_stable_and_every_candidate_valid() -> None:
    cands = candidates()
    assert cands == candidates()
    keys = [(c.batch_size, c.buckets) for c in cands]
    assert keys == sorted(keys)
    assert len({c.id for c in cands}) == len(cands)
    for c in cands:
        assert c.buckets[0] == 1 and c.buckets[-1] == c.batch_size
        assert all(1 < b < c.batch_size for b in c.buckets[1:-1])
        assert all(a < b for a, b in pairwise(c.buckets))
        assert len(c.buckets) <= 6 and c.slots == c.batch_size
        assert RblnConfiguration.from_id(c.id) == c
    assert BASELINE in cands
    assert RblnConfiguration((1, 4, 6, 8, 10, 16), 16).id == "16:1,4,6,8,10,16"


def over_budget(candidate: RblnConfiguration, profile) -> bool:
    return profile.compile_seconds(candidate.n_buckets) > profile.compile_budget_s


def test_compile_budget_filter() -> None:
    profile = measured_profile()
    every = enumerate_candidates()
    assert not any(over_budget(c, profile) for c in every)  # paper: none of 2,077 excluded
    # 42.3 + 61.33 * 6 = 410.28 s for 5 buckets; a budget of 420 s drops the 6-bucket sets
    tight = replace(profile, compile_budget_s=420.0)
    kept = candidates(profile=tight)
    assert kept == [c for c in every if c.n_buckets <= 5]
    assert len(every) - len(kept) == 1 + 15 + 70 + 210 + 1001 - 1  # C(k,4) per batch size


def test_bad_candidate_space_is_rejected() -> None:
    with pytest.raises(SearchError, match="max_buckets"):
        enumerate_candidates(max_buckets=1)
    with pytest.raises(ConfigurationError, match="batch_size"):
        RblnConfiguration((1, 4), 8)


# --- plans ------------------------------------------------------------------------------


def test_search_and_evaluation_plans_are_distinct_and_disjoint() -> None:
    settings = SearchSettings()
    plans = [(key, make_plan(key, settings, 20260601, None)) for key in plan_keys(settings)]
    assert len(plans) == 54
    assert [k.inputs for k, _ in plans].count("search") == 27
    assert len({p.sha256() for _, p in plans}) == 54
    seeds = {
        inputs: {p.meta.seed for k, p in plans if k.inputs == inputs}
        for inputs in ("search", "evaluation")
    }
    assert len(seeds["search"]) == len(seeds["evaluation"]) == 27
    assert not seeds["search"] & seeds["evaluation"]


def test_settings_refuse_shared_seed_blocks() -> None:
    with pytest.raises(SearchError, match="evaluation_seed_block"):
        SearchSettings(search_seed_block=5, evaluation_seed_block=5)
    with pytest.raises(SearchError, match="restricted_n"):
        SearchSettings(restricted_n=((6, 12),))


# --- simulation and scores --------------------------------------------------------------


def test_batch_scores_with_reuse_equal_direct_simulation() -> None:
    """Every candidate's batch outcome (re-used or not) equals a direct ``simulate`` call,
    bit for bit, whatever order candidates come in; slots != batch_size included."""
    settings = SearchSettings(n=(6, 10), seeds=1, blocks=1, restricted_n=((6,),))
    cands = enumerate_candidates((8, 12, 16), 4)
    cands += [
        RblnConfiguration(c.buckets, c.batch_size, slots)
        for c in cands[:40:7]
        for slots in (3, c.batch_size + 5)
    ]
    rng = random.Random(3)
    for key in plan_keys(settings)[:2]:
        plan = make_plan(key, settings, 5, None)
        order = cands[:]
        rng.shuffle(order)
        scores = score_plan(plan, CandidateArrays(order, measured_profile()))
        assert scores.simulations < len(cands)  # re-use happened
        for index, cand in enumerate(order):
            assert scores.outcome(index) == direct(plan, cand), cand.id


def test_pool_starts_only_above_the_simulation_threshold(monkeypatch) -> None:
    """Workers are a maximum: a search with fewer distinct simulations than the threshold
    runs in this process (no spawn); above it the pool is asked for."""
    settings = tiny_settings()
    cands = candidates(settings.batch_sizes, settings.max_buckets)
    plans = tiny_plans(settings)

    class PoolAsked(Exception):
        pass

    def no_pool(method: str):
        raise PoolAsked(method)

    monkeypatch.setattr(evaluate_module.multiprocessing, "get_context", no_pool)
    frame, simulations = evaluate(cands, plans, workers=2)
    assert 0 < simulations < evaluate_module.POOL_MIN_SIMULATIONS
    assert len(frame) == len(cands) * len(plans)
    monkeypatch.setattr(evaluate_module, "POOL_MIN_SIMULATIONS", simulations)
    with pytest.raises(PoolAsked, match="spawn"):
        evaluate(cands, plans, workers=2)
    monkeypatch.setattr(evaluate_module, "POOL_MIN_SIMULATIONS", simulations + 1)
    assert evaluate(cands, plans, workers=2)[0].equals(frame)


def test_baseline_and_its_twin_score_exactly_one() -> None:
    settings = tiny_settings()
    plans = tiny_plans(settings)
    twin = RblnConfiguration((1, 2, 4, 8), 8)
    cands = [*enumerate_candidates(settings.batch_sizes, settings.max_buckets), twin]
    results, _ = evaluate(cands, plans)
    table, _ = score_table(results, cands, BASELINE, settings)
    row = table[table["id"] == twin.id].iloc[0]
    for column in (
        "score",
        "evaluation_score",
        "mean_ratio_score",
        "ratio_n2",
        "ratio_n3",
        "score_n2",
        "search_decode_ratio",
        "evaluation_prefill_ratio",
    ):
        assert row[column] == 1.0
    # the score is seconds summed first: check one candidate by hand
    other = cands[0]
    search = results[results["inputs"] == "search"]
    expected = (
        search[search["candidate"] == other.id]["device_s"].sum()
        / search[search["candidate"] == BASELINE.id]["device_s"].sum()
    )
    assert table[table["id"] == other.id].iloc[0]["score"] == pytest.approx(expected, 1e-12)
    assert sorted(table["rank"]) == list(range(1, len(cands) + 1))


def _merge(shard_frames, cands, settings, out: Path) -> dict[str, bytes]:
    write_outputs(combine_shards(shard_frames), cands, BASELINE, settings, OutputPaths.under(out))
    return {
        name: (out / name).read_bytes()
        for name in ("scores.parquet", "selected.json", "summary.json")
    }


def test_merged_files_do_not_depend_on_shard_count(tmp_path: Path) -> None:
    settings = tiny_settings()
    plans = tiny_plans(settings)
    cands = enumerate_candidates(settings.batch_sizes, settings.max_buckets)
    merged = {}
    for shards in (1, 3, 4):
        frames = []
        for k in range(shards):
            path = tmp_path / f"s{shards}" / f"shard_{k}.parquet"
            write_frame(run_shard(cands, plans, k, shards, BASELINE), path)
            frames.append((str(path), pd.read_parquet(path)))
        merged[shards] = _merge(list(reversed(frames)), cands, settings, tmp_path / f"m{shards}")
    assert merged[1] == merged[3] == merged[4]


def test_merge_refuses_a_missing_shard(tmp_path: Path) -> None:
    settings = tiny_settings()
    plans = tiny_plans(settings)
    cands = enumerate_candidates(settings.batch_sizes, settings.max_buckets)
    frames = [("shard_0", run_shard(cands, plans, 0, 2, BASELINE))]
    with pytest.raises(SearchError, match="no shard holds candidate"):
        _merge(frames, cands, settings, tmp_path)


def test_restricted_n_selection_on_a_hand_made_table() -> None:
    # per-N summed device seconds; baseline 10 s at every N
    base = {6: 10.0, 8: 10.0, 10: 10.0}
    totals = {
        "a": {6: 9.0, 8: 9.0, 10: 7.0},  # best overall (23), thanks to N=10
        "b": {6: 8.0, 8: 8.5, 10: 9.0},  # best on {6,8} (16.5)
        "c": {6: 9.5, 8: 9.5, 10: 9.5},
        "d": {6: 9.5, 8: 8.0, 10: 8.5},  # second on {6,8} and on {8,10}
    }
    tiebreak = {cid: (i,) for i, cid in enumerate(sorted(totals))}
    report = compare_n_sets(totals, base, tiebreak, [6, 8, 10], [[6, 8], [8, 10]], top=2)
    full, low, high = report["6,8,10"], report["6,8"], report["8,10"]
    assert full["selected"] == "a" and [t["id"] for t in full["top"]] == ["a", "b"]
    assert low["selected"] == "b"
    assert [t["id"] for t in low["top"]] == ["b", "d"]
    assert low["full_pick_rank"] == 3  # {6,8}: b 16.5, d 17.5, a 18, c 19
    assert low["top_overlap_with_full"] == 1 and low["shared_with_full_top"] == ["b"]
    assert high["selected"] == "a" and high["full_pick_rank"] == 1
    assert full["full_pick_rank"] == 1 and full["top_overlap_with_full"] == 2
    assert not full["mean_ratio_changes_selection"]  # equal baselines: same ranking


def test_mean_of_ratios_can_change_the_pick() -> None:
    base = {6: 1.0, 10: 100.0}
    totals = {"x": {6: 0.5, 10: 99.0}, "y": {6: 1.0, 10: 90.0}}
    report = compare_n_sets(totals, base, {"x": (0,), "y": (1,)}, [6, 10], [], top=2)
    # summed seconds: y (91/101) beats x (99.5/101); mean of ratios: x (0.745) beats y
    assert report["6,10"]["selected"] == "y"
    assert report["6,10"]["mean_ratio_selected"] == "x"
    assert report["6,10"]["mean_ratio_changes_selection"]


# --- CLI --------------------------------------------------------------------------------


def tiny_config(tmp_path: Path) -> Path:
    return config_with_search(tmp_path, TINY)


def test_cli_sharded_and_single_process_agree(tmp_path: Path) -> None:
    config = str(tiny_config(tmp_path))
    plans = tmp_path / "plans"
    result = runner.invoke(app, ["search", "plans", "--config", config, "--out", str(plans)])
    assert result.exit_code == 0, result.output
    assert len(list((plans / "search").glob("n*_s*_b*.parquet"))) == 4
    assert len(list((plans / "evaluation").glob("*.parquet"))) == 4
    shards = []
    for k in range(2):
        out = tmp_path / f"shard_{k}.parquet"
        result = runner.invoke(
            app,
            [
                "search",
                "shard",
                "--config",
                config,
                "--plans",
                str(plans),
                "--shard",
                str(k),
                "--out",
                str(out),
            ],
        )
        assert result.exit_code == 0, result.output
        shards.append(str(out))
    merged = tmp_path / "merged"
    result = runner.invoke(
        app, ["search", "merge", "--config", config, "--out-dir", str(merged), *shards]
    )
    assert result.exit_code == 0, result.output
    single = tmp_path / "single"
    result = runner.invoke(
        app, ["search", "--out", str(single), "--config", config, "--workers", "1"]
    )
    assert result.exit_code == 0, result.output
    for name in ("scores.parquet", "selected.json", "summary.json"):
        assert (merged / name).read_bytes() == (single / name).read_bytes()
    selected = json.loads((merged / "selected.json").read_text())
    summary = json.loads((merged / "summary.json").read_text())
    assert selected["id"] == summary["selected"]["id"] in result.output
    assert selected["slots"] == selected["batch_size"] == selected["buckets"][-1]
    assert summary["candidates"]["searched"] == 8
    assert summary["candidates"]["excluded_by_compile_budget"] == 0
    assert set(summary["restricted"]) == {"2", "3"}
    scores = pd.read_parquet(merged / "scores.parquet")
    assert list(scores["rank"]) == list(range(1, 9))
    assert scores.iloc[0]["id"] == selected["id"]


def test_cli_writes_exactly_the_files_it_is_given(tmp_path: Path) -> None:
    """Every file the search writes is a path the caller names (a workflow declares them);
    the defaults under --out hold the same bytes."""
    config = str(tiny_config(tmp_path))
    named = tmp_path / "named"
    files = {
        "--scores": named / "a" / "ranking.parquet",
        "--selected": named / "b" / "pick.json",
        "--summary": named / "c" / "about.json",
    }
    options = [str(part) for flag, path in files.items() for part in (flag, path)]
    base = ["search", "--config", config, "--workers", "1", *options]
    refused = runner.invoke(app, base)
    assert refused.exit_code != 0 and "--plans-out" in str(refused.exception or refused.output)
    assert not named.exists()
    result = runner.invoke(app, [*base, "--plans-out", str(named / "inputs")])
    assert result.exit_code == 0, result.output
    written = {p for p in named.rglob("*") if p.is_file()}
    plans = {p for p in written if (named / "inputs") in p.parents}
    assert written - plans == set(files.values())
    assert len(plans) == 8
    default = tmp_path / "default"
    result = runner.invoke(
        app, ["search", "--config", config, "--workers", "1", "--out", str(default)]
    )
    assert result.exit_code == 0, result.output
    for path, name in zip(
        files.values(), ("scores.parquet", "selected.json", "summary.json"), strict=True
    ):
        assert path.read_bytes() == (default / name).read_bytes()


def test_merge_writes_the_named_files(tmp_path: Path) -> None:
    """``search merge`` with each file named (as a workflow rule passes its declared
    outputs) writes those files and nothing else, with the bytes of ``--out-dir``."""
    config = str(tiny_config(tmp_path))
    plans, shard = tmp_path / "plans", tmp_path / "shard.parquet"
    one = ["--shards", "1", "--out", str(shard)]
    for args in (
        ["search", "plans", "--config", config, "--out", str(plans)],
        ["search", "shard", "--config", config, "--plans", str(plans), "--shard", "0", *one],
        ["search", "merge", "--config", config, "--out-dir", str(tmp_path / "dir"), str(shard)],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
    named = tmp_path / "named"
    files = {
        "--scores": named / "s.parquet",
        "--selected": named / "pick.json",
        "--summary": named / "sub" / "about.json",
    }
    options = [str(part) for flag, path in files.items() for part in (flag, path)]
    result = runner.invoke(app, ["search", "merge", "--config", config, *options, str(shard)])
    assert result.exit_code == 0, result.output
    assert {p for p in named.rglob("*") if p.is_file()} == set(files.values())
    for path, name in zip(
        files.values(), ("scores.parquet", "selected.json", "summary.json"), strict=True
    ):
        assert path.read_bytes() == (tmp_path / "dir" / name).read_bytes()
    partial = runner.invoke(
        app, ["search", "merge", "--config", config, "--scores", str(tmp_path / "x"), str(shard)]
    )
    assert partial.exit_code != 0 and not (tmp_path / "x").exists()
    assert "--selected, --summary" in str(partial.exception or partial.output)


def test_cli_bad_input_is_one_line(tmp_path: Path) -> None:
    config = str(tiny_config(tmp_path))
    done = subprocess.run(
        [str(CLI), "search", "--config", config], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "--out" in done.stderr
    done = subprocess.run(
        [
            str(CLI),
            "search",
            "shard",
            "--config",
            config,
            "--plans",
            str(tmp_path / "nowhere"),
            "--shard",
            "0",
            "--out",
            str(tmp_path / "s.parquet"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and "search plans" in done.stderr


def test_plan_key_names() -> None:
    key = PlanKey("evaluation", 10, 2, 1)
    assert key.relpath == "evaluation/n10_s2_b1.parquet"


# --- memory filter and search options ---------------------------------------------------


def test_device_memory_matches_the_paper() -> None:
    memory = device_memory()
    assert memory.slot_gib == 1.125  # 144 KiB x 8,192 tokens (Table XV)
    assert memory.slot_gib / memory.num_devices == 0.28125
    assert memory.per_device_gib == 15.7  # Section II-A
    assert memory.fits(32)  # the slot-32 configuration loaded (Section V-C)
    assert memory.max_slots() == int((4 * 15.7 - memory.weights_gib) // 1.125)
    assert not memory.fits(memory.max_slots() + 1)


def test_memory_filter_excludes_and_counts(tmp_path: Path) -> None:
    tree = {"memory": {"per_device_gib": {"value": 5.0}, "weights_gib": {"value": 7.45}}}
    small = device_memory(tree=tree, source="small.yaml")
    assert small.max_slots() == 11  # (4 x 5.0 - 7.45) // 1.125
    every = enumerate_candidates((8, 10, 12, 16), 3)
    kept = candidates((8, 10, 12, 16), 3, memory=small)
    assert kept == [c for c in every if c.batch_size <= 11]
    counted = space_size((8, 10, 12, 16), 3, measured_profile(), small)
    assert counted.filter_counts() == {
        "excluded_by_compile_budget": 0,
        "excluded_by_memory": sum(not small.fits(c.slots) for c in every),
    }
    assert counted.enumerated == len(every) and counted.searched == len(kept)
    assert candidates((8, 10, 12, 16), 3, memory=small, memory_filter=False) == every
    with pytest.raises(ProfileError, match=r"small.yaml: missing field 'memory.weights_gib'"):
        device_memory(tree={"memory": {"per_device_gib": 5.0}}, source="small.yaml")


def test_cli_search_options_override_the_config(tmp_path: Path) -> None:
    config = str(tiny_config(tmp_path))
    out = tmp_path / "out"
    result = runner.invoke(
        app,
        [
            "search",
            "--n",
            "3",
            "--batch-sizes",
            "4,5",
            "--max-buckets",
            "2",
            "--no-memory-filter",
            "--out",
            str(out),
            "--config",
            config,
            "--workers",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["inputs"]["n"] == [3]
    assert summary["candidates"]["per_batch_size"] == {"4": 1, "5": 1}
    assert summary["candidates"]["memory_filter"] is False
    assert summary["restricted"] == {}  # [[2], [3]] minus sets outside --n 3, minus {3}
    assert sorted(p.name for p in (out / "plans" / "search").iterdir()) == [
        "n3_s0_b0.parquet",
        "n3_s0_b1.parquet",
    ]
    bad = runner.invoke(app, ["search", "--n", "3,x", "--out", str(out), "--config", config])
    assert bad.exit_code != 0 and "--n" in str(bad.exception or bad.output)


def test_batch_scores_without_the_compiled_core_are_the_same(monkeypatch) -> None:
    """No numba: the search falls back to the Python core and gets the same outcomes."""
    import rearrival.model.simulator.rbln.sim as sim

    settings = SearchSettings(n=(6,), seeds=1, blocks=1, restricted_n=())
    plan = make_plan(plan_keys(settings)[0], settings, 9, None)
    arrays = CandidateArrays(enumerate_candidates((8, 10), 3), measured_profile())
    compiled = score_plan(plan, arrays)
    monkeypatch.setattr(sim.CORE_CHOICE, "loaded", True)  # as when numba cannot be imported
    monkeypatch.setattr(sim.CORE_CHOICE, "module", None)
    fallback = score_plan(plan, arrays)
    assert (fallback.times == compiled.times).all()
    assert (fallback.counts == compiled.counts).all()


def test_batch_core_matches_single_calls_on_random_plans() -> None:
    """run_batch over many configurations of one plan equals one call per configuration,
    bit for bit (random plans up to N=40, slots below and above batch_size)."""
    from conftest import random_plan

    rng = random.Random(12)
    cands = [
        RblnConfiguration(c.buckets, c.batch_size, rng.choice([None, 1, 5, 40]))
        for c in enumerate_candidates((1, 4, 8, 16, 33), 3)
    ]
    arrays = CandidateArrays(cands, measured_profile())
    for _ in range(12):
        plan = random_plan(
            rng, rng.randint(1, 40), max_gen=rng.choice([5, 40]), max_wait_s=rng.choice([0.05, 2.0])
        )
        scores = score_plan(plan, arrays)
        for index in rng.sample(range(len(cands)), 25):
            assert scores.outcome(index) == direct(plan, cands[index]), cands[index].id


def test_cli_search_options_reach_the_subcommands(tmp_path: Path) -> None:
    config = str(tiny_config(tmp_path))
    plans = tmp_path / "plans"
    result = runner.invoke(
        app, ["search", "--n", "3", "plans", "--config", config, "--out", str(plans)]
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (plans / "evaluation").iterdir()) == [
        "n3_s0_b0.parquet",
        "n3_s0_b1.parquet",
    ]
    out = tmp_path / "shard.parquet"
    result = runner.invoke(
        app,
        [
            "search",
            "--n",
            "3",
            "--batch-sizes",
            "5",
            "--max-buckets",
            "2",
            "shard",
            "--config",
            config,
            "--plans",
            str(plans),
            "--shard",
            "0",
            "--shards",
            "1",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert sorted(pd.read_parquet(out)["candidate"].unique()) == ["5:1,5", BASELINE.id]


def test_empty_candidate_space_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    """Batch size 56 needs 56 KV slots; at most 49 fit the shipped devices, so the memory
    filter removes every candidate: the search refuses before writing DIR/plans."""
    config = str(tiny_config(tmp_path))
    out = tmp_path / "out"
    args = ["search", "--n", "3", "--batch-sizes", "56", "--max-buckets", "3"]
    done = subprocess.run(
        [str(CLI), *args, "--out", str(out), "--config", config],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().count("\n") == 0
    assert "memory filter removed all 55" in done.stderr and "--no-memory-filter" in done.stderr
    assert not out.exists()


def test_empty_candidate_space_names_the_compile_budget() -> None:
    tight = replace(measured_profile(), compile_budget_s=100.0)
    with pytest.raises(SearchError, match=r"compile budget \(100 s\) removed all 7 .*max-buckets"):
        search_candidates(SearchSettings(batch_sizes=(4, 5), max_buckets=3), tight)
