"""The study definition on backend vllm (README "A study on a real vLLM server";
docs/DESIGN.md §15): its ``vllm`` section and vLLM configurations with one-line refusals,
the vllm rule set's predictions registered (with the vLLM profile) before any run, and
the audit's checks of a vLLM run against its registration. No server starts here:
`make all-vllm` (run by .ci/run) runs the study itself."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from rearrival.config.errors import StudyConfigError
from rearrival.config.study import load_study_config
from rearrival.errors import RearrivalError
from rearrival.judge.decisions import decision_table
from rearrival.measure.records import finish_manifest, manifest_template, write_run
from rearrival.measure.records.contract import REQUEST_COLUMNS, STEP_COLUMNS
from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.vllm_profile import VllmProfile, load_vllm_profile
from rearrival.model.simulator.vllm.sim import simulate_vllm
from rearrival.parquet import read_frame
from rearrival.prereg.audit import OK, VIOLATION, audit
from rearrival.prereg.registered import prediction_difference, read_registration
from rearrival.prereg.registration import check_before_run, open_repo, registrations
from rearrival.workflow.plans import make_plans, read_study_plan
from rearrival.workflow.predict import PredictionFiles, predict
from rearrival.workflow.preregister import preregister
from rearrival.workflow.run import run_replicate

REPO = Path(__file__).resolve().parents[1]
STUDY = "vllm_validation"
PROFILE = """\
profile_version: "test/1"
substrate: vllm
model_id: "rearrival/tiny-qwen3"
vllm_version: "0.32.0"
device: cpu
step_cost:
  base_s: {value: 0.004, provenance: "written by the test"}
  per_decode_token_s: {value: 0.0002, provenance: "written by the test"}
  per_prefill_token_s: {value: 0.00002, provenance: "written by the test"}
  per_kv_token_s: {value: 1.0e-8, provenance: "written by the test"}
kv:
  bytes_per_token: {value: 512, provenance: "2 x 2 layers x 1 kv head x 64 x 2 B"}
"""
# the search's pick as its selected.json holds it (knobs beside the scores)
PICK = VllmConfiguration((), 4, num_blocks=288, block_size=32, max_num_batched_tokens=8192)


def shipped() -> dict:
    return yaml.safe_load((REPO / "config" / "vllm.yaml").read_text())


def write_config(tmp_path: Path, raw: dict) -> Path:
    """The definition with its files found from ``tmp_path`` (tool table, profile)."""
    raw = raw | {"tool_table": str(REPO / "config" / "vllm_tools.json")}
    if raw.get("profile", "").endswith("profile_vllm_tiny_qwen3_cpu.yaml"):
        (tmp_path / "profile.yaml").write_text(PROFILE)
        raw["profile"] = str(tmp_path / "profile.yaml")
    path = tmp_path / "vllm.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_the_shipped_study_is_a_vllm_study_of_vllm_configurations(tmp_path):
    cfg = load_study_config(write_config(tmp_path, shipped()))
    assert cfg.backend == "vllm"
    assert all(isinstance(c, VllmConfiguration) for c in cfg.configurations.values())
    study = cfg.study(STUDY)
    assert study.configurations == ("baseline", "more_blocks", "more_seqs", "selected")
    assert cfg.replicates == 2 and 4 <= min(study.n) <= max(study.n) <= 8
    base, blocks, seqs = (cfg.configurations[k] for k in ("baseline", "more_blocks", "more_seqs"))
    # one knob changed each against the baseline
    assert (blocks.num_blocks, blocks.batch_size) == (384, base.batch_size) != (base.num_blocks,)
    assert (seqs.batch_size, seqs.num_blocks) == (base.batch_size + 1, base.num_blocks)


def _edit(raw: dict, path: tuple, value) -> dict:
    raw = json.loads(json.dumps(raw))
    node = raw
    for key in path[:-1]:
        node = node.setdefault(key, {})
    if value is None:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return raw


@pytest.mark.parametrize(
    ("path", "value", "words"),
    [
        (("vllm", "model"), "/no/such/model", "vllm.model: /no/such/model holds no config.json"),
        (("vllm", "device"), "tpu", "vllm.device: 'tpu' is not one of"),
        (("vllm", "ready_timeout_s"), 0, "vllm.ready_timeout_s: 0 is less than or equal"),
        (("vllm", "search_num_blocks"), [1], "vllm.search_num_blocks[0]: 1 is less than"),
        (("vllm", "modle"), "x", "vllm.modle is not a key of vllm; did you mean model?"),
        (("profile",), "published", "profile: published: backend vllm predicts with a vLLM"),
        (("profile",), "calibrated", "profile: calibrated: backend vllm predicts with a vLLM"),
        (
            ("configurations", "baseline", "slots"),
            4,
            "baseline.slots: configuration field 'slots' is unknown: vllm configurations",
        ),
        (
            ("configurations", "baseline", "num_blocks"),
            None,
            "baseline: a vllm configuration has the fields",
        ),
        (
            ("configurations", "baseline", "max_num_batched_tokens"),
            2,
            "max_num_batched_tokens 2 must be at least batch_size (max_num_seqs) 3",
        ),
        (("configurations", "more_seqs", "buckets"), [0], "buckets[0]: 0 is less than"),
    ],
)
def test_a_bad_vllm_value_is_one_line_naming_file_key_and_fix(tmp_path, path, value, words):
    config = write_config(tmp_path, _edit(shipped(), path, value))
    with pytest.raises(StudyConfigError) as err:
        load_study_config(config)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(str(config)) and words in message


@pytest.fixture
def registered(tmp_path, monkeypatch, no_git_identity):
    """The shipped study's plans and predictions, registered in a scratch repository."""
    import git

    repo = tmp_path / "repo"
    git.Repo.init(repo)
    monkeypatch.chdir(repo)
    cfg = load_study_config(write_config(tmp_path, shipped()))
    plans = repo / "results" / "plans" / STUDY
    make_plans(cfg, STUDY, plans)
    selected = repo / "selected.json"
    selected.write_text(json.dumps({"id": PICK.id, "substrate": "vllm", **PICK.as_dict()}))
    files = PredictionFiles(*(repo / f"predictions{t}.parquet" for t in ("", ".r", ".e")))
    predict(cfg, STUDY, plans, files, selected, Path(cfg.measurement.profile))
    record = preregister(
        cfg,
        STUDY,
        plans_dir=plans,
        predictions_path=files.predictions,
        repo_dir=repo,
        records_dir=repo / "results" / "prereg",
        selected_path=selected,
        profile_path=Path(cfg.measurement.profile),
    )
    return cfg, repo, plans, files, record


def test_predictions_are_the_vllm_rule_set_on_every_plan_and_condition(registered):
    cfg, _, plans, files, _ = registered
    predictions = read_frame(files.predictions, "predict")
    requests = read_frame(files.requests, "predict")
    profile = load_vllm_profile(cfg.measurement.profile)
    assert set(predictions["simulator"]) == {"vllm"}
    assert len(predictions) == 2 * 4  # replicates x configurations
    for row in predictions.itertuples():
        plan = read_study_plan(plans, row.n, row.replicate)
        knobs = PICK if row.configuration == "selected" else cfg.configurations[row.configuration]
        result = simulate_vllm(plan.variant(row.variant), knobs, profile.step_cost)
        assert row.device_s == result.device_s
        mine = requests[
            (requests["configuration"] == row.configuration)
            & (requests["replicate"] == row.replicate)
        ]
        assert list(mine["cached_tokens"]) == [r.cached_tokens for r in result.requests]
        later = mine[mine["round"] >= 1]
        assert row.reuse_hits == int((later["cached_tokens"] > 0).sum())
    # the design the study preregisters: the baseline pool evicts across tool waits, the
    # larger one never does
    by = predictions.groupby("configuration")["re_arrivals_lost"].sum()
    assert by["baseline"] > 0 and by["more_blocks"] == 0


def test_the_registration_holds_the_vllm_rule_set_and_profile(registered):
    cfg, repo, _, files, record = registered
    (commit,) = registrations(open_repo(repo), STUDY)
    assert record["commit"] == commit.hexsha
    registration = read_registration(open_repo(repo), STUDY, commit.hexsha)
    assert registration.rule_set == "vllm"
    assert isinstance(registration.profile, VllmProfile)
    profile = load_vllm_profile(cfg.measurement.profile)
    assert registration.profile.step_cost == profile.step_cost
    design = json.loads(registration.files["design.json"])
    assert design["backend"] == "vllm" and design["profile_sha256"] == profile.sha256
    assert design["configurations"]["selected"] == PICK.as_dict()
    working = read_frame(files.predictions, "predict")
    assert prediction_difference(working, registration.predictions) is None
    edited = working.copy()
    edited.loc[0, "device_s"] *= 2
    assert "device_s" in prediction_difference(edited, registration.predictions)
    # decisions judge the registered vllm predictions (withheld: no runs yet)
    _, table = decision_table(
        registration.study,
        registration.replicates,
        registration.study_seed,
        pd.DataFrame(columns=["n", "replicate", "configuration", "variant", "condition", "status"]),
        registration.predictions,
        registration.criteria,
        registration.rule_set,
    )
    assert len(table) == 3 and set(table["verdict"]) == {"withheld"}
    assert table["ratio_pred"].notna().all()


def test_a_run_before_registration_is_refused_before_any_server(tmp_path, monkeypatch):
    import git

    repo = tmp_path / "repo"
    git.Repo.init(repo)
    monkeypatch.chdir(repo)
    monkeypatch.setenv("REARRIVAL_VLLM_PYTHON", str(tmp_path / "no-vllm"))  # never started
    cfg = load_study_config(write_config(tmp_path, shipped()))
    plans = repo / "plans"
    make_plans(cfg, STUDY, plans)
    with pytest.raises(RearrivalError, match="prereg"):
        run_replicate(
            cfg,
            STUDY,
            8,
            0,
            plans_dir=plans,
            out_dir=repo / "runs" / "n8_r0",
            repo_dir=repo,
            selected_path=None,
        )
    assert not (repo / "runs").exists()


def _fake_run(repo: Path, plans: Path, label: str, configuration: VllmConfiguration) -> str:
    """A complete vLLM run record of replicate 0 (no server: only what the audit reads)."""
    plan = read_study_plan(plans, 8, 0)
    run_dir = repo / "results" / "runs" / STUDY / "n8_r0" / label
    manifest = manifest_template(
        study=STUDY,
        backend="vllm",
        configuration=configuration,
        variant="wait",
        condition=label,
        replicate=0,
        n=8,
        plan_path=str(plans / "n8_r0.parquet"),
        plan_sha256=plan.sha256(),
        plan_seed=plan.meta.seed,
        run_seed=1,
        condition_order=[label],
        prereg=check_before_run(repo, STUDY).manifest_entry(),
    )
    manifest["configuration"]["name"] = configuration.name  # as the run stage names it
    write_run(
        run_dir,
        requests=pd.DataFrame(columns=[c for c, _, _ in REQUEST_COLUMNS]),
        steps=pd.DataFrame(columns=[c for c, _, _ in STEP_COLUMNS]),
        metrics={"before": {}, "after": {}},
        manifest=finish_manifest(manifest),
        server_log="",
    )
    return manifest["run_id"]


def test_the_audit_checks_a_vllm_run_against_its_registered_knobs(registered):
    cfg, repo, plans, _, _ = registered
    base = cfg.configurations["baseline"]
    measured = _fake_run(repo, plans, "baseline-wait", base)
    other = VllmConfiguration(
        (),
        base.batch_size,
        num_blocks=base.num_blocks + 32,
        block_size=32,
        max_num_batched_tokens=base.max_num_batched_tokens,
        name="baseline",
    )
    wrong = _fake_run(repo, plans, "more-pool-wait", other)
    rows = {row.run: row for row in audit(repo, repo / "results").rows}
    assert rows[measured].verdict == OK, rows[measured].reason
    assert "registered design" in rows[measured].reason
    assert rows[wrong].verdict == VIOLATION
    assert f"num_blocks': {base.num_blocks + 32}" in rows[wrong].reason


def test_the_report_section_sets_each_run_beside_its_registered_prediction(tmp_path):
    """A run whose "server" is the predictor's own engine under the profile's step cost
    (tests/vllm_agreement_cases.py) agrees with the registered prediction on every
    request; the tables say so and the section renders them with Tables VA1-VA3."""
    from vllm_agreement_cases import configuration, evicting_plan, profile_file, simulated_run

    from rearrival.config.study import Study
    from rearrival.judge.collect import collect_channels
    from rearrival.judge.predictions import predict_study
    from rearrival.judge.vllm_agreement import compare_run, write_agreement
    from rearrival.judge.vllm_tables import vllm_tables
    from rearrival.measure.records import read_run
    from rearrival.model.cost.vllm_profile import VllmStepCost
    from rearrival.report.vllm import VllmSection, study_markdown

    cost = VllmStepCost(4e-3, 5e-4, 4e-5, 0.0)
    plan, conf = evicting_plan(), configuration(20)  # a pool that evicts across waits
    profile = load_vllm_profile(profile_file(tmp_path / "profile.yaml", cost))
    replicate = tmp_path / "runs" / f"n{plan.n}_r0"
    run_dir = simulated_run(replicate, plan, conf, cost, name=conf.name)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["configuration"]["name"] = conf.name  # as the run stage names it
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    record = read_run(run_dir)
    study = Study("agree", "validation", "", (plan.n,), (conf.name,), ("wait",), 1)
    predicted = predict_study(1, study, lambda n, r: plan, {conf.name: conf}, profile)
    channels = collect_channels([replicate], None, profile)
    tables = vllm_tables(
        [record],
        lambda n, r: plan,
        {conf.name: conf},
        predicted.summaries,
        predicted.requests,
        channels,
    )
    (run,) = tables["runs"].to_dict("records")
    assert run["agree_registered"] == run["requests"] == plan.requests
    assert run["cached_observed"] == run["cached_registered"] == run["cached_metrics_delta"]
    assert run["re_arrivals_lost_observed"] == run["re_arrivals_lost_registered"] > 0
    assert run["recomputed_prefill_observed"] == run["recomputed_prefill_registered"] > 0
    assert run["device_s_registered"] == pytest.approx(run["channel_a_s"])
    rounds = tables["rounds"]
    assert rounds["cached_observed"].sum() == run["cached_observed"]
    assert (rounds["cached_observed"] <= rounds["cacheable"]).all()
    agreement = write_agreement(
        compare_run(record, plan, profile, "plan"), tmp_path / "agreement" / conf.name
    )
    text = study_markdown(
        VllmSection(
            "agree",
            {"commit": "c" * 40, "committed_at": "T", "files": {"x/profile.yaml": "ab" * 32}},
            pd.DataFrame(columns=["comparison", "verdict"]),
            tables["runs"],
            rounds,
            tables["requests"],
            [agreement],
        )
    )
    assert f"(planned arrivals): {plan.requests} of {plan.requests}" in text
    for heading in ("Table VA1", "Table VA2", "Table VA3", "Reuse by round"):
        assert heading in text
