"""Check (f) of `rearrival audit` on the fleet study, without servers: the decision
tables equal their recomputation from the registration commit and the sealed run records
(every comparison re-run from the records, never read from its folder), and a table or a
record changed after the decision is named. The runs are the fleet predictor's own
observations (tests/fleet_synthetic.py); config/fleet.yaml's study as registered."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from fleet_synthetic import synthetic_fleet_run

from rearrival.config.study import load_study_config
from rearrival.judge.fleet_agreement import compare_fleet_run, write_fleet_agreement
from rearrival.measure.records import read_run
from rearrival.model.cost.vllm_profile import load_vllm_profile
from rearrival.model.plans.plan import write_plan
from rearrival.prereg.audit.fleet_decisions import fleet_decision_rows
from rearrival.prereg.audit.history import Auditor
from rearrival.prereg.audit.report import OK, VIOLATION
from rearrival.prereg.fleet import register_fleet
from rearrival.prereg.registration import open_repo
from rearrival.workflow.fleet import decide_fleet, fleet_plan

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def decided(tmp_path, monkeypatch, no_git_identity) -> Path:
    """A scratch repository where the fleet study was registered, run (synthetically),
    compared and decided as rules/fleet.smk lays it out."""
    import git

    repo = tmp_path / "repo"
    git.Repo.init(repo)
    monkeypatch.chdir(repo)
    cfg = load_study_config(REPO / "config" / "fleet.yaml")
    fleet = cfg.fleet
    profile_path = REPO / "src/rearrival/data/profile_vllm_tiny_qwen3_cpu.yaml"
    results = repo / "results"
    plans = []
    for rep in range(fleet.replicates):
        plan = fleet_plan(cfg, rep, REPO / "config" / "fleet_pool.json")
        plans.append((write_plan(plan, results / "fleet" / "plans" / f"r{rep}.json"), plan))
    register_fleet(repo, cfg, [p for _, p in plans], profile_path, results / "fleet" / "prereg")
    profile = load_vllm_profile(profile_path)
    comparisons = {}
    for rep, (plan_path, plan) in enumerate(plans):
        for c in fleet.conditions():
            run = synthetic_fleet_run(
                results / "runs" / fleet.study / f"{c.label}_r{rep}" / c.label,
                plan,
                plan_path,
                cfg.configurations[c.configuration],
                profile,
                router_model=c.router_model,
                policy=c.policy,
                study=fleet.study,
                condition=c.label,
                replicate=rep,
            )
            agreement = compare_fleet_run(read_run(run), plan, profile, str(plan_path))
            folder = results / "fleet" / "compare" / f"{c.label}_r{rep}"
            comparisons[f"r{rep}/{c.label}"] = write_fleet_agreement(agreement, folder)
    decide_fleet(cfg, comparisons, repo, results / "fleet" / "decisions")
    return repo


def _rows(repo: Path) -> list:
    return list(fleet_decision_rows(Auditor(open_repo(repo), []), repo / "results"))


def test_decisions_equal_their_recomputation_from_the_records(decided: Path) -> None:
    [row] = _rows(decided)
    assert row.verdict == OK, row.reason
    assert row.study == "fleet_open" and "every comparison re-run" in row.reason


def test_a_decision_edited_after_the_fact_is_named(decided: Path) -> None:
    path = decided / "results" / "fleet" / "decisions" / "decisions.csv"
    rows = list(csv.DictReader(path.open()))
    rows[1]["verdict"] = "fails" if rows[1]["verdict"] == "holds" else "holds"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    [row] = _rows(decided)
    assert row.verdict == VIOLATION
    assert f"decisions.csv row 2 (replicate 0, name {rows[1]['name']})" in row.reason
    assert "verdict" in row.reason


def test_a_comparison_folder_that_disagrees_with_the_records_is_not_trusted(
    decided: Path,
) -> None:
    """The decision stage reads the comparison folders; the audit re-runs each comparison
    from the run's records, so a folder changed before the decision (one request's
    observed cached tokens) shows as a conditions row that differs."""
    import pandas as pd

    folder = decided / "results" / "fleet" / "compare" / "round_robin-small_pool_r0"
    frame = pd.read_parquet(folder / "requests.parquet")
    frame.loc[frame.index[-1], "cached_tokens_observed"] += 32
    frame.to_parquet(folder / "requests.parquet")
    cfg = load_study_config(REPO / "config" / "fleet.yaml")
    compare = decided / "results" / "fleet" / "compare"
    comparisons = {
        f"r{d.name.rpartition('_r')[2]}/{d.name.rpartition('_r')[0]}": d for d in compare.iterdir()
    }
    decide_fleet(cfg, comparisons, decided, decided / "results" / "fleet" / "decisions")
    [row] = _rows(decided)
    assert row.verdict == VIOLATION
    assert "(replicate 0, condition round_robin-small_pool)" in row.reason
    assert "cached_tokens_per_request_observed" in row.reason


def test_a_run_record_changed_after_the_seal_cannot_be_recomputed(decided: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = decided / "results/runs/fleet_open/round_robin-small_pool_r0"
    path = path / "round_robin-small_pool" / "requests.parquet"
    table = pq.read_table(path)
    column = table.schema.get_field_index("cached_tokens")
    cached = table.column(column).to_pylist()
    cached[-1] += 32
    field = table.schema.field(column)
    pq.write_table(table.set_column(column, field, pa.array(cached, field.type)), path)
    [row] = _rows(decided)
    assert row.verdict == VIOLATION
    assert "cannot be recomputed" in row.reason and "restore the measured file" in row.reason
