"""A study of agent sessions (a ``workload`` block): config, registered design, params,
plans, and its own search over the same workload (docs/DESIGN.md "Agent sessions")."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from conftest import TRACELAB_SAMPLE as TRACE

from rearrival.config.errors import StudyConfigError
from rearrival.config.search import SearchError, SearchSettings
from rearrival.config.study import (
    config_schema_path,
    study_config_from_mapping,
    validate_against_schema,
)
from rearrival.model.plans.plan import load_plan
from rearrival.model.plans.plangen import MultiRoundSpec, generate_multi_round_plan, generate_plan
from rearrival.search.candidates import baseline_of
from rearrival.search.inputs import make_plans as search_plans
from rearrival.workflow.params import workflow_params
from rearrival.workflow.plans import make_plans, plan_file
from rearrival.workflow.preregister import design_changes, registered_design

REPO = Path(__file__).resolve().parents[1]
SMALL = yaml.safe_load((REPO / ".test" / "config" / "config.yaml").read_text())
FULL = yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def _cfg(raw: dict):
    validate_against_schema(copy.deepcopy(raw), "<test>", config_schema_path())
    return study_config_from_mapping(raw, "<test>")


def test_the_workload_block_becomes_the_generator_spec():
    cfg = _cfg(copy.deepcopy(SMALL))
    study = cfg.study("agents")
    assert study.multi_round and study.uses_selected
    assert study.workload.spec == MultiRoundSpec(rounds=(3, 4), start_spread_s=1.0)
    assert not any(s.multi_round for name, s in cfg.studies.items() if name != "agents")
    assert len({study, *cfg.studies.values()}) == len(cfg.studies)  # hashable, as the report needs
    # the default study: 4-8 rounds, N in {8, 16}, baseline vs more slots vs its search's pick
    full = _cfg(copy.deepcopy(FULL)).study("agents")
    assert full.workload.spec.rounds == (4, 8) and full.n == (8, 16)
    assert full.configurations == ("baseline", "slots16", "selected")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"rounds": [4, 30]}, "studies.agents.workload.rounds:"),
        ({"start_spread_s": -1}, "studies.agents.workload.start_spread_s: -1"),
        ({"kind": "replay"}, "studies.agents.workload.kind: 'replay'"),
        ({"kind": "trace"}, "studies.agents.workload.rounds: not a key of kind trace"),
        ({"path": "t.jsonl"}, "studies.agents.workload.path: not a key of kind multi_round"),
        ({"rounds": [4]}, "studies.agents.workload.rounds: [4]"),
        ({"turns": 3}, "studies.agents.workload.turns is not a key"),
    ],
)
def test_a_bad_workload_is_one_line_naming_the_key(edit, message):
    raw = copy.deepcopy(SMALL)
    raw["studies"]["agents"]["workload"] |= edit
    with pytest.raises(StudyConfigError) as info:
        _cfg(raw)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_workload_longer_than_the_model_context_is_refused():
    raw = copy.deepcopy(SMALL) | {"model": {"max_seq_len": 4096}}
    raw["studies"]["agents"]["workload"]["rounds"] = [3, 8]
    with pytest.raises(StudyConfigError, match="maximum sequence length 4096"):
        _cfg(raw)


def test_a_study_search_needs_the_selected_configuration():
    raw = copy.deepcopy(SMALL)
    raw["studies"]["agents"]["configurations"] = ["baseline", "slots16"]
    with pytest.raises(StudyConfigError, match=r"studies\.agents\.search is set"):
        _cfg(raw)


@pytest.mark.parametrize("block", [9, 100, 200, 5])
def test_study_search_seed_blocks_must_be_new(block):
    raw = copy.deepcopy(SMALL)
    raw["studies"]["agents"]["search"]["evaluation_seed_block"] = block
    cfg = _cfg(raw)
    with pytest.raises(SearchError, match="evaluation_seed_block"):
        SearchSettings.for_study(cfg, "agents")
    with pytest.raises(SearchError):
        SearchSettings.from_config(cfg)


def test_only_agent_studies_register_a_workload():
    cfg = _cfg(copy.deepcopy(SMALL))
    for name, study in cfg.studies.items():
        design = registered_design(cfg, study)
        assert ("workload" in design) == (name == "agents")
    assert registered_design(cfg, cfg.study("agents"))["workload"] == {
        "kind": "multi_round",
        "rounds": [3, 4],
        "first_prompt_tokens": [800, 1600],
        "new_tokens": [50, 600],
        "gen_tokens": [32, 256],
        "start_spread_s": 1.0,
        "tool_cap_s": 60.0,
    }


def test_a_workload_edit_after_registering_is_named_as_a_change():
    cfg = _cfg(copy.deepcopy(SMALL))
    study = cfg.study("agents")
    design = registered_design(cfg, study) | {"description": "", "profile": "p"}
    criteria = cfg.decision.to_dict()
    assert design_changes(cfg, study, design, criteria) == []
    edited = copy.deepcopy(SMALL)
    edited["studies"]["agents"]["workload"]["rounds"] = [3, 5]
    cfg2 = _cfg(edited)
    assert design_changes(cfg2, cfg2.study("agents"), design, criteria) == [
        "workload.rounds: registered [3, 4], config [3, 5]"
    ]
    # a two-round study that gains a workload changes its registered design too
    plain = cfg.study("grid")
    plain_design = registered_design(cfg, plain) | {"description": "", "profile": "p"}
    grown = copy.deepcopy(SMALL)
    grown["studies"]["grid"]["workload"] = {"kind": "multi_round"}
    cfg3 = _cfg(grown)
    changes = design_changes(cfg3, cfg3.study("grid"), plain_design, criteria)
    assert "workload.kind: registered '(absent)', config 'multi_round'" in changes


def test_a_workload_edit_reruns_that_study_and_its_search_only():
    raw = copy.deepcopy(SMALL)
    cfg = _cfg(raw)
    before = workflow_params(cfg)
    raw2 = copy.deepcopy(SMALL)
    raw2["studies"]["agents"]["workload"]["start_spread_s"] = 2.0
    after = workflow_params(_cfg(raw2))
    changed = {key for key in before if before[key] != after[key]}
    assert changed == {
        f"{stage}:agents" for stage in ("plans", "predict", "prereg", "run", "decide", "search")
    } | {"report"}


def test_study_plans_are_seeded_agent_sessions(tmp_path):
    cfg = _cfg(copy.deepcopy(SMALL))
    make_plans(cfg, "agents", tmp_path / "a")
    make_plans(cfg, "agents", tmp_path / "b")
    spec = cfg.study("agents").workload.spec
    for replicate in range(cfg.replicates):
        a, b = plan_file(tmp_path / "a", 6, replicate), plan_file(tmp_path / "b", 6, replicate)
        assert a.read_bytes() == b.read_bytes()
        expected = generate_multi_round_plan(
            6, study_seed=cfg.study_seed, replicate=replicate, block=9, spec=spec
        )
        assert load_plan(a) == expected and expected.multi_round


def test_the_study_search_draws_agent_sessions_and_the_paper_search_does_not():
    cfg = _cfg(copy.deepcopy(SMALL))
    own = SearchSettings.for_study(cfg, "agents")
    assert (own.n, own.batch_sizes, own.max_buckets) == ((6, 12), (8, 16), 3)
    assert own.restricted_n == ((6,),)  # the top-level [[6]] lies inside {6, 12}
    plans = search_plans(cfg, own)
    assert len(plans) == 2 * 2 and all(p.multi_round for _, p in plans)
    key, plan = plans[0]
    assert plan == generate_multi_round_plan(
        key.n, study_seed=cfg.study_seed, replicate=0, block=110, spec=own.workload.spec
    )
    paper = search_plans(cfg, SearchSettings.from_config(cfg))
    assert not any(p.multi_round for _, p in paper)
    assert paper[0][1] == generate_plan(
        paper[0][0].n, study_seed=cfg.study_seed, replicate=0, block=100
    )
    assert baseline_of(cfg, "agents") == baseline_of(cfg)
    with pytest.raises(SearchError, match=r"studies\.grid has no search block"):
        SearchSettings.for_study(cfg, "grid")


def test_advise_on_a_study_uses_its_agent_sessions(tmp_path):
    from rearrival.model.plans.plan import write_plan
    from rearrival.search.advise import advise, evaluation_plans

    cfg = _cfg(copy.deepcopy(SMALL))
    own = SearchSettings.for_study(cfg, "agents")
    advice = advise(cfg, study="agents", workers=1)
    plans = evaluation_plans(cfg, own.n, own)
    assert all(p.multi_round for p in plans) and advice["n"] == [6, 12]
    # every round after a session's first is a re-arrival the advice accounts for
    assert advice["baseline"]["re_arrivals"] == sum(p.requests - p.n for p in plans)
    assert "search run now at N 6,12" in advice["recommendation_source"]
    # agent sessions are never judged by the paper's two-round search: without a study,
    # the advice searches on the plans it was given (issue 29, item 10)
    write_plan(plans[0], tmp_path / "a.parquet")
    on_plans = advise(cfg, plans_dir=tmp_path, workers=1)
    assert on_plans["recommendation_source"].startswith("a search over the 1 plan file under")


@pytest.mark.skipif(not TRACE.exists(), reason="TraceLab sample not present")
def test_a_trace_workload_samples_whole_sessions_and_registers_the_trace_hash(tmp_path):
    from rearrival.model.plans.trace_plans import file_sha256
    from rearrival.model.plans.tracelab_import import plans_from_trace

    raw = copy.deepcopy(SMALL)
    agents = raw["studies"]["agents"]
    agents["n"] = [1]
    agents["workload"] = {"kind": "trace", "path": str(TRACE), "token_scale": 0.15}
    cfg = _cfg(raw)
    design = registered_design(cfg, cfg.study("agents"))["workload"]
    assert design == {
        "kind": "trace",
        "path": str(TRACE),
        "sha256": file_sha256(TRACE),
        "token_scale": 0.15,
        "on_overflow": "truncate",
    }
    make_plans(cfg, "agents", tmp_path)
    plan = load_plan(plan_file(tmp_path, 1, 0))
    imported = plans_from_trace(TRACE, sessions=1, seed=plan.meta.seed, token_scale=0.15).plan
    assert plan.sessions == imported.sessions and plan.multi_round
    assert (plan.meta.study_seed, plan.meta.replicate, plan.meta.block) == (7, 0, 9)
    assert plan.meta.trace_sha256 == file_sha256(TRACE)
    # the study's own search samples its inputs from the same trace
    own = SearchSettings.for_study(cfg, "agents")
    assert own.workload.kind == "trace"
    # more sessions than the trace holds, or a missing file, is one line naming the key
    agents["n"] = [3]  # the sample holds two sessions
    with pytest.raises(StudyConfigError, match=r"workload\.path .*3 but the trace has 2"):
        make_plans(_cfg(raw), "agents", tmp_path / "three")
    agents["workload"]["path"] = str(tmp_path / "missing.jsonl")
    with pytest.raises(StudyConfigError, match=r"studies\.agents\.workload\.path: no such file"):
        _cfg(raw)
