"""The agent-session report section (tables A1-A3, the multi-wait timeline) on a tiny
but real results tree: multi-round plans, predictions and emulated runs of a study with
a workload block, its own search's pick as 'selected' (docs/DESIGN.md "Agent sessions")."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from rearrival.config.study import load_study_config, resolve_configurations
from rearrival.judge.collect import collect_channels
from rearrival.judge.decisions import decision_table
from rearrival.measure.backends import BackendSettings, RunRequest, run_backend
from rearrival.report.render import render_tree
from rearrival.report.tables import table_family
from rearrival.workflow.plans import make_plans, plan_file, read_study_plan
from rearrival.workflow.predict import PredictionFiles, predict
from rearrival.workflow.run import run_slots

PICK = {"id": "6:1,2,6", "buckets": [1, 2, 6], "batch_size": 6, "slots": 6}
CONFIG = {
    "backend": "emulated",
    "study_seed": 77,
    "replicates": 2,
    "configurations": {
        "baseline": {"buckets": [1, 2, 4], "batch_size": 4},
        "slots8": {"buckets": [1, 2, 4, 8], "batch_size": 8},
    },
    "studies": {
        "agents": {
            "kind": "validation",
            "description": "agents",
            "n": [5],
            "configurations": ["baseline", "slots8", "selected"],
            "variants": ["wait"],
            "seed_block": 3,
            "workload": {
                "kind": "multi_round",
                "rounds": [3, 4],
                "first_prompt_tokens": [200, 400],
                "new_tokens": [20, 80],
                "gen_tokens": [8, 24],
                "start_spread_s": 0.5,
            },
            "search": {"search_seed_block": 110, "evaluation_seed_block": 210, "n": [5]},
        }
    },
    "decision": {"confirmatory_n": [5], "exploratory_n": [6]},
}


def _capped_waits(plans_dir: Path) -> None:
    """Waits cut to at most 1.5 s so the runs stay short (inputs stay valid)."""
    from dataclasses import replace

    from rearrival.model.plans.plan import load_plan, write_plan

    for path in sorted(plans_dir.glob("*.parquet")):
        plan = load_plan(path)
        sessions = tuple(
            s.with_gaps(tuple(min(r.gap_after_s, 1.5) for r in s.rounds)) for s in plan.sessions
        )
        write_plan(replace(plan, sessions=sessions), path)


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("agents")
    (root / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    cfg = load_study_config(root / "config.yaml")
    results = root / "results"
    selected = results / "study_search" / "agents" / "selected.json"
    selected.parent.mkdir(parents=True)
    selected.write_text(json.dumps(PICK))
    study = cfg.study("agents")
    configurations = resolve_configurations(cfg, study, selected)
    plans_dir = results / "plans" / "agents"
    make_plans(cfg, "agents", plans_dir)
    _capped_waits(plans_dir)
    predictions = results / "predictions" / "agents.parquet"
    files = PredictionFiles(
        predictions,
        results / "predictions" / "agents.requests.parquet",
        results / "predictions" / "agents.evictions.parquet",
    )
    predict(cfg, "agents", plans_dir, files, selected)
    prereg = {"study": "agents", "commit": "a" * 40, "committed_at": "2026-01-01T00:00:00+00:00"}
    (results / "prereg").mkdir()
    (results / "prereg" / "agents.json").write_text(json.dumps(prereg | {"history": [prereg]}))
    for replicate in range(cfg.replicates):
        plan = read_study_plan(plans_dir, 5, replicate)
        slots = run_slots(cfg, study, 5, replicate)
        for slot in slots:
            run = RunRequest(
                study="agents",
                plan=plan,
                plan_path=plan_file(plans_dir, 5, replicate),
                configuration=configurations[slot.configuration],
                variant=slot.variant,
                label=slot.label,
                replicate=replicate,
                seed=slot.seed,
                condition_order=[s.label for s in slots],
                prereg=prereg,
            )
            out = results / "runs" / "agents" / f"n5_r{replicate}" / slot.label
            run_backend(BackendSettings.from_study_config(cfg), run, out)
    channels = results / "channels" / "agents.parquet"
    collect_channels(sorted((results / "runs" / "agents").iterdir()), channels)
    text, _ = decision_table(
        study,
        cfg.replicates,
        cfg.study_seed,
        pd.read_parquet(channels),
        pd.read_parquet(predictions),
        cfg.decision,
    )
    (results / "decisions").mkdir()
    (results / "decisions" / "agents.csv").write_text(text)
    render_tree(load_study_config(root / "config.yaml"), results, root / "reports")
    return root


def _csv(tree: Path, table: str) -> pd.DataFrame:
    return pd.read_csv(tree / "reports" / "tables" / f"table_{table}.csv")


def test_agent_tables_are_written_in_three_formats(tree):
    index = json.loads((tree / "reports" / "tables" / "index.json").read_text())
    for table in ("A1", "A2", "A3"):
        assert index["tables"][table] == [
            f"tables/table_{table}.{suffix}" for suffix in ("csv", "md", "tex")
        ]
        assert table_family(table) == "agents"
    # the paper's tables leave the agents study out
    assert _csv(tree, "IX").empty and _csv(tree, "III").empty


def test_a1_counts_every_round_after_the_first_as_a_re_arrival(tree):
    a1 = _csv(tree, "A1")
    assert list(a1["configuration"]) == ["baseline", "slots8", "selected"]
    assert list(a1["label"]) == ["{1,2,4}/4/4", "{1,2,4,8}/8/8", "{1,2,6}/6/6"]
    cfg = load_study_config(tree / "config.yaml")
    requests = 0
    for replicate in range(cfg.replicates):
        plan = read_study_plan(tree / "results" / "plans" / "agents", 5, replicate)
        requests += plan.requests - plan.n
    for row in a1.itertuples():
        hits, arrivals = map(int, row.reuse.split("/"))
        assert arrivals == requests and 0 <= hits <= arrivals
        assert row.predicted_reuse.endswith(f"/{requests}")
        assert len(row.run_ids.split()) == cfg.replicates
    assert a1.loc[0, "a_ratio"] == 1.0 and a1.loc[0, "ratio_pred"] == 1.0
    # twice the slots on the same plans: at least as many re-arrivals find their KV
    hits = [int(r.split("/")[0]) for r in a1["reuse"]]
    assert hits[1] >= hits[0]


def test_a2_splits_reuse_by_round_index_and_sums_to_a1(tree):
    a1, a2 = _csv(tree, "A1"), _csv(tree, "A2")
    assert set(a2["round"]) == {1, 2, 3}  # 3-4 rounds: re-arrivals at rounds 1..3
    for row in a1.itertuples():
        part = a2[a2["configuration"] == row.configuration]
        assert f"{part['reuse_hits'].sum()}/{part['re_arrivals'].sum()}" == row.reuse
        assert part["computed_tokens"].sum() == row.rearrival_tokens
    # a later round resends a longer transcript
    base = a2[a2["configuration"] == "baseline"].set_index("round")
    means = base["prompt_tokens"] / base["re_arrivals"]
    assert means.is_monotonic_increasing


def test_a3_holds_the_registered_comparisons(tree):
    a3 = _csv(tree, "A3")
    assert list(a3["comparison"]) == ["slots8 vs baseline", "selected vs baseline"]
    assert set(a3["verdict"]) <= {"pass", "fail", "withheld"}


def test_the_section_and_the_multi_wait_timeline_are_in_the_report(tree):
    html = (tree / "reports" / "report.html").read_text()
    assert '<h2 id="agents">Beyond the paper: agent sessions with many tool calls</h2>' in html
    assert "agents, baseline at N=5, reuse by round: round 1 " in html
    svg = (tree / "reports" / "figures" / "timeline-agents.svg").read_text()
    assert "tool wait" in svg and "reuse hit" in svg
    assert 'id="figure-timeline-agents"' in html


def test_the_timeline_axis_ends_with_its_last_bar() -> None:
    """Issue 36: the timeline's x-axis ran to 175 s while its bars ended near 90 s."""
    from rearrival.report.agents import timeline_extent

    rows = [
        {
            "session": 0,
            "spans": [("decode", 0.0, 40.0), ("tool wait", 40.0, 88.0)],
            "marks": [(88.0, True)],
        },
        {"session": 1, "spans": [("prefill", 5.0, float("nan"))], "marks": []},
    ]
    assert timeline_extent(rows) == pytest.approx(88.0 * 1.02)
    assert timeline_extent([]) == 1.0
