"""The predictor against a vLLM run (rearrival.judge.vllm_agreement, `rearrival compare`),
on run records whose server was the predictor's own engine (tests/vllm_agreement_cases.py),
so the truth is known: under the profile's own step times every request agrees, on every
pool; under other step times the disagreements come with the order that changed; a
disagreement where the predicted pool had evicted nothing is reported as a bug. The
writers, the report tables and the verb's refusals too. The same on a real vLLM server:
tests/test_vllm_agreement_server.py."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from vllm_agreement_cases import (
    check_adds_up,
    configuration,
    evicting_plan,
    profile_file,
    simulated_run,
)
from vllm_env import cli, two_round_plan

from rearrival.judge.vllm_agreement import (
    REQUESTS_FILE,
    SUMMARY_FILE,
    AgreementError,
    PredictorBugWarning,
    compare_run,
    evictions_before_admission,
    write_agreement,
)
from rearrival.measure.records import read_run
from rearrival.measure.records.contract import RequestRecord
from rearrival.model.cost.vllm_profile import VllmStepCost, load_vllm_profile
from rearrival.model.plans.plan import Plan, PlanMeta, write_plan
from rearrival.model.simulator.vllm.inputs import vllm_inputs
from rearrival.model.simulator.vllm.sim import simulate_vllm
from rearrival.report.table_model import table_markdown
from rearrival.report.tables.vllm_agreement import (
    VLLM_AGREEMENT_TABLE_BUILDERS,
    table_va1,
    table_va2,
    table_va3,
)

TRUTH = VllmStepCost(4e-3, 5e-4, 4e-5, 0.0)
# Other step times: prefill 12x dearer, so other requests finish before a re-arrival's
# admission in the run than in the prediction on the smallest pool.
OTHER = VllmStepCost(1e-3, 1e-4, 5e-4, 0.0)
NEVER_EVICTING = vllm_inputs(evicting_plan(), 32).never_evicting_blocks()


def _compare(tmp_path: Path, run: Path, cost: VllmStepCost, name: str = "p"):
    profile = load_vllm_profile(profile_file(tmp_path / f"{name}.yaml", cost))
    return compare_run(read_run(run), evicting_plan(), profile, "plan")


@pytest.mark.parametrize("blocks", [20, 24, 32, NEVER_EVICTING])
def test_the_profiles_own_step_times_agree_exactly_on_every_pool(
    tmp_path: Path, blocks: int
) -> None:
    run = simulated_run(tmp_path, evicting_plan(), configuration(blocks), TRUTH)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PredictorBugWarning)
        agreement = _compare(tmp_path, run, TRUTH)
    summary = agreement.summary()
    check_adds_up(summary, agreement.frame())
    assert summary["agreeing"] == summary["requests"] == 12
    assert summary["exact_where_no_eviction"] and summary["disagreements"] == []
    assert summary["re_arrivals_lost_observed"] == summary["re_arrivals_lost_predicted"]
    # the log keeps elapsed times to the nanosecond; the steps are the same steps
    assert summary["device_s_relative_error"] == pytest.approx(0.0, abs=1e-6)
    assert summary["steps_observed"] == summary["steps_predicted"]
    if blocks == NEVER_EVICTING:
        assert summary["no_eviction_requests"] == 12
        assert summary["re_arrivals_lost_observed"] == 0
        assert summary["recomputed_prefill_tokens_observed"] == 0
    else:  # the pool is small enough to evict: losses, and requests admitted after one
        assert summary["re_arrivals_lost_observed"] > 0
        assert summary["no_eviction_requests"] < 12
        assert summary["recomputed_prefill_tokens_observed"] > 0


def test_a_two_round_plan_agrees_exactly(tmp_path: Path) -> None:
    """The paper's two-round sessions (all starting at 0) compare the same way."""
    plan = two_round_plan()
    conf = configuration(vllm_inputs(plan, 32).never_evicting_blocks())
    run = simulated_run(tmp_path, plan, conf, TRUTH)
    profile = load_vllm_profile(profile_file(tmp_path / "p.yaml", TRUTH))
    summary = compare_run(read_run(run), plan, profile, "plan").summary()
    assert summary["agreeing"] == summary["no_eviction_requests"] == 6
    assert summary["cached_tokens_observed"] == summary["cacheable_tokens"] > 0


@pytest.mark.parametrize("blocks", [20, 24, 28, 32, 40])
def test_a_request_admitted_before_any_eviction_hits_what_was_left_cacheable(
    blocks: int,
) -> None:
    """The watched engine's facts: the same prediction as simulate_vllm, and a request
    admitted before the pool evicted anything hits the whole cacheable prefix (which is
    why agreement must be exact there)."""
    plan, conf = evicting_plan(), configuration(blocks)
    before, watched = evictions_before_admission(plan, conf, TRUTH, None)
    assert watched.run == simulate_vllm(plan, conf, TRUTH).run
    assert min(before) >= 0  # every request's first admission was seen
    for rid, record in enumerate(watched.requests):
        if before[rid] == 0:
            assert record.cached_tokens == watched.cacheable_tokens(rid)
    assert any(b > 0 for b in before)  # these pools evict
    if blocks == 20:  # and some request then lost part of its prefix
        assert watched.re_arrivals_lost > 0


def test_other_step_times_give_a_disagreement_with_its_reason(tmp_path: Path) -> None:
    run = simulated_run(tmp_path, evicting_plan(), configuration(20), TRUTH)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PredictorBugWarning)
        agreement = _compare(tmp_path, run, OTHER)
    summary = agreement.summary()
    check_adds_up(summary, agreement.frame())
    assert summary["disagreements"] == ["s1r1"]
    assert summary["exact_where_no_eviction"]
    row = next(r for r in agreement.requests if r.label == "s1r1")
    assert row.evictions_before > 0
    assert (row.cached_tokens_observed, row.cached_tokens_predicted) == (32, 0)
    assert row.reason.startswith("admitted in a different step relative to its neighbours")
    assert "s3r0 finished before its admission" in row.reason
    assert f"{summary['device_s_relative_error']:+.1%}" in row.reason
    assert all(r.reason == "" for r in agreement.requests if r.agree)


def _lose_a_block(records: list[RequestRecord]) -> list[RequestRecord]:
    """s0r1 as if vLLM had hit one block less than the round before left cacheable."""
    out = []
    for r in records:
        if (r.session, r.round) == (0, 1):
            cached = (r.cached_tokens or 0) - 32
            r = RequestRecord(
                r.session,
                r.round,
                r.send_s,
                r.first_token_s,
                r.complete_s,
                r.prompt_tokens,
                cached,
                r.prompt_tokens - cached,
                r.generated_tokens,
            )
        out.append(r)
    return out


def test_a_disagreement_where_nothing_was_evicted_is_a_bug(tmp_path: Path) -> None:
    conf = configuration(NEVER_EVICTING)
    run = simulated_run(tmp_path, evicting_plan(), conf, TRUTH, edit=_lose_a_block)
    with pytest.warns(PredictorBugWarning, match=r"s0r1.*a bug in the vLLM rules"):
        agreement = _compare(tmp_path, run, TRUTH)
    summary = agreement.summary()
    check_adds_up(summary, agreement.frame())
    assert not summary["exact_where_no_eviction"]
    assert summary["no_eviction_disagreements"] == ["s0r1"] == summary["disagreements"]
    assert summary["re_arrivals_lost_observed"] == 1 and summary["re_arrivals_lost_predicted"] == 0
    profile = profile_file(tmp_path / "truth.yaml", TRUTH)
    done = cli(
        "compare", "--run", str(run), "--profile", str(profile), "--out", str(tmp_path / "c")
    )
    assert done.returncode == 1, done.stderr
    assert "PREDICTOR BUG" in done.stderr and "s0r1" in done.stderr
    assert json.loads((tmp_path / "c" / SUMMARY_FILE).read_text())["disagreements"] == ["s0r1"]


def test_writers_and_tables_read_only_the_files(tmp_path: Path) -> None:
    dirs = []
    for blocks, cost in ((20, OTHER), (NEVER_EVICTING, TRUTH)):
        run = simulated_run(
            tmp_path, evicting_plan(), configuration(blocks), TRUTH, name=f"r{blocks}"
        )
        out = write_agreement(_compare(tmp_path, run, cost, f"p{blocks}"), tmp_path / f"a{blocks}")
        first = {name: (out / name).read_bytes() for name in (REQUESTS_FILE, SUMMARY_FILE)}
        write_agreement(_compare(tmp_path, run, cost, f"p{blocks}"), out)  # same bytes again
        assert first == {name: (out / name).read_bytes() for name in first}
        dirs.append(out)
    summaries = [json.loads((d / SUMMARY_FILE).read_text()) for d in dirs]
    va1 = table_va1([*dirs, tmp_path / "absent"])
    rows = va1.parts[0].rows
    assert [r["run"] for r in rows] == [s["run"]["run_id"] for s in summaries]
    assert [r["agreeing"] for r in rows] == [11, 12]
    assert [r["device_err"] for r in rows] == [s["device_s_relative_error"] for s in summaries]
    assert any("not produced" in n and "absent" in n for n in va1.notes)
    assert any("CPU seconds" in n for n in va1.notes)
    assert va1.backend == "vllm (cpu)"
    va2 = table_va2(dirs)
    assert len(va2.parts[0].rows) == 6  # three rounds per run
    for summary in summaries:
        rows2 = [r for r in va2.parts[0].rows if r["run"] == summary["run"]["run_id"]]
        assert [r["observed"] for r in rows2] == [
            e["reuse_observed"] for e in summary["reuse_by_round"]
        ]
    va3 = table_va3(dirs)
    assert [(r["request"], r["observed"], r["predicted"]) for r in va3.parts[0].rows] == [
        ("s1r1", 32, 0)
    ]
    for build in VLLM_AGREEMENT_TABLE_BUILDERS.values():
        table = build(dirs)
        text = table_markdown(table)
        # issue 38: each row names its run and replicate, and no file that is never
        # written is cited (the report writes no table_VA*.csv)
        assert all(row["run"] in text for row in table.parts[0].rows) and "run(s)" not in text
        assert "| replicate |" in text.replace("  ", " ") and ".csv" not in text


def _refusal(tmp_path: Path, run: Path, profile: Path, *extra: str) -> str:
    done = cli(
        "compare",
        "--run",
        str(run),
        "--profile",
        str(profile),
        "--out",
        str(tmp_path / "o"),
        *extra,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rearrival: error: ")
    assert not (tmp_path / "o").exists()
    return lines[0]


def test_the_verb_refuses_what_it_cannot_compare(tmp_path: Path) -> None:
    plan, conf = evicting_plan(), configuration(32)
    profile = profile_file(tmp_path / "p.yaml", TRUTH)
    emulated = simulated_run(tmp_path, plan, conf, TRUTH, name="emulated", backend="emulated")
    assert "not vllm" in _refusal(tmp_path, emulated, profile)
    failed = simulated_run(tmp_path, plan, conf, TRUTH, name="failed", status="failed")
    assert "failed or partial run is never compared" in _refusal(tmp_path, failed, profile)
    run = simulated_run(tmp_path, plan, conf, TRUTH, name="ok")
    unsealed = tmp_path / "unsealed"
    unsealed.mkdir()
    for path in run.iterdir():
        (unsealed / path.name).write_bytes(path.read_bytes())
    manifest = json.loads((unsealed / "manifest.json").read_text())
    del manifest["files"]
    (unsealed / "manifest.json").write_text(json.dumps(manifest))
    assert "not sealed" in _refusal(tmp_path, unsealed, profile)
    other = profile_file(tmp_path / "o.yaml", TRUTH, model_id="qwen3-8b", kv_bytes_per_token=4096)
    line = _refusal(tmp_path, run, other)
    assert "another model" in line and "'qwen3-8b'" in line and "4096" in line
    gpu = profile_file(tmp_path / "g.yaml", TRUTH, device="gpu")
    assert "device 'gpu'" in _refusal(tmp_path, run, gpu)
    shorter = write_plan(Plan(plan.sessions[:3], PlanMeta(seed=5, n=3)), tmp_path / "short.json")
    assert "not the one run" in _refusal(tmp_path, run, profile, "--plan", str(shorter))
    done = cli(
        "compare", "--run", str(run), "--profile", str(profile), "--out", str(tmp_path / "c")
    )
    assert done.returncode == 0, done.stderr
    assert "12/12 requests agree" in done.stdout


def test_compare_run_refuses_unknown_cached_tokens(tmp_path: Path) -> None:
    def unknown(records: list[RequestRecord]) -> list[RequestRecord]:
        r = records[0]
        head = RequestRecord(
            r.session,
            r.round,
            r.send_s,
            r.first_token_s,
            r.complete_s,
            r.prompt_tokens,
            None,
            None,
            r.generated_tokens,
        )
        return [head, *records[1:]]

    run = simulated_run(tmp_path, evicting_plan(), configuration(32), TRUTH, edit=unknown)
    with pytest.raises(AgreementError, match="cached_tokens unknown for session 0 round 0"):
        _compare(tmp_path, run, TRUTH)


def test_the_report_header_says_what_served_from_the_runs_records(tmp_path: Path) -> None:
    """issue 38: the header was a literal (the CPU build, the tiny model); it is read from
    the comparisons, each from its run's manifest."""
    import pandas as pd

    from rearrival.report.vllm import VllmSection, report_markdown, served_engines

    run = simulated_run(tmp_path, evicting_plan(), configuration(20), TRUTH)
    out = write_agreement(_compare(tmp_path, run, TRUTH, "p"), tmp_path / "a")
    engine = json.loads((run / "manifest.json").read_text())["engine"]
    section = VllmSection(
        "s", {}, pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), [out]
    )
    (served,) = served_engines([section])
    assert served.startswith(f"vLLM {engine['version']} on {engine['device']} serving ")
    assert Path(engine["model"]["directory"]).name in served
    assert "synchronous scheduling" in served
    assert "no run has been compared yet" in report_markdown([])
