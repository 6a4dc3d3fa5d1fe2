"""``rearrival audit`` (docs/DESIGN.md §8) must pass a clean history and catch planted violations.

Commit times are pinned with GIT_COMMITTER_DATE and manifests carry explicit start times,
so the before/after comparisons are exact and need no sleeping.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta
from pathlib import Path

import git
import pytest
from typer.testing import CliRunner

from rearrival.atomic import atomic_write_json
from rearrival.cli import app, main
from rearrival.prereg.audit import EXCLUDED, OK, REGISTRATION_ROW, VIOLATION, AuditReport, audit
from rearrival.prereg.ledger import file_hashes, ledger_bytes, ledger_path, seal
from rearrival.prereg.registration import PlanRegistry, RegisteredPlan, register

T0 = datetime.fromisoformat("2026-01-01T00:00:00+00:00")
SHA_A, SHA_B, SHA_C = "a" * 64, "b" * 64, "c" * 64
PLANS = PlanRegistry(
    True, (RegisteredPlan(0, 6, 101, SHA_A), RegisteredPlan(1, 6, 102, SHA_B))
).to_json()
PREDICTIONS = {"ratio_pred": {"6": 0.97}, "rule": "fixed", "tau": 0.02}


@pytest.fixture
def repo(tmp_path, no_git_identity):
    return git.Repo.init(tmp_path / "repo")


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _register(repo, monkeypatch, when: datetime, study="validation", files=None, **kwargs):
    monkeypatch.setenv("GIT_COMMITTER_DATE", when.isoformat())
    monkeypatch.setenv("GIT_AUTHOR_DATE", when.isoformat())
    files = files if files is not None else {"predictions.json": PREDICTIONS, "plans.json": PLANS}
    return register(repo.working_tree_dir, study, files, message=f"Preregister {study}", **kwargs)


BASELINE = {"buckets": [1, 2, 4, 8], "batch_size": 8, "slots": 8}


def _manifest(
    repo,
    run_id: str,
    *,
    start: datetime,
    record=None,
    study="validation",
    seed: int | None = 101,
    sha: str = SHA_A,
    replicate=0,
    n=6,
    status="complete",
    committed_at=None,
    variant="wait",
) -> None:
    """A manifest with every field of the TEAM.md run-record contract."""
    prereg = {"study": None, "commit": None, "committed_at": None}
    if record is not None:
        prereg = record.manifest_entry()
        if committed_at is not None:
            prereg["committed_at"] = committed_at
    manifest = {
        "run_id": run_id,
        "study": study,
        "backend": "emulated",
        "configuration": {"name": "baseline", **BASELINE},
        "variant": variant,
        "condition": f"baseline-{variant}",
        "replicate": replicate,
        "n": n,
        "plan_path": f"results/plans/{run_id}.parquet",
        "plan_sha256": sha,
        "seeds": {"plan": seed, "run": 7},
        "software": {"rearrival": "0.1.0"},
        "patch_sha256": None,
        "prereg": prereg,
        "started_at": start.isoformat(),
        "finished_at": (start + timedelta(seconds=30)).isoformat(),
        "condition_order": ["baseline-wait"],
        "status": status,
        "reason": None if status == "complete" else "server crashed",
        "time_scale": 1.0,
    }
    atomic_write_json(Path(repo.working_tree_dir) / "results" / run_id / "manifest.json", manifest)


def _audit(repo) -> AuditReport:
    return audit(repo.working_tree_dir, Path(repo.working_tree_dir) / "results")


def _row(report: AuditReport, run: str):
    (row,) = [r for r in report.rows if r.run == run]
    return row


def _commit_change(repo, path: str, text: str | None, when: datetime, message: str) -> str:
    """A hand-made commit (the planted violation), dated ``when``."""
    full = Path(repo.working_tree_dir) / path
    if text is None:
        repo.index.remove([path], working_tree=True)
    else:
        full.write_text(text)
        repo.index.add([path])
    return repo.index.commit(message, author_date=when, commit_date=when).hexsha


def test_clean_sequence_passes(repo, monkeypatch):
    record = _register(repo, monkeypatch, T0)
    _manifest(repo, "v-r0", start=_at(3600), record=record)
    _manifest(repo, "v-r1", start=_at(3700), record=record, seed=102, sha=SHA_B, replicate=1)
    report = _audit(repo)
    assert report.ok, report.table()
    assert [r.run for r in report.rows] == [REGISTRATION_ROW, "v-r0", "v-r1"]
    assert "validation seed new" in _row(report, "v-r0").reason
    assert "plan sha256 registered" in _row(report, "v-r1").reason
    assert _row(report, "v-r0").prereg_commit == record.commit


def test_prediction_edited_after_measurement_is_caught(repo, monkeypatch):
    record = _register(repo, monkeypatch, T0)
    _manifest(repo, "v-r0", start=_at(3600), record=record)
    edit = _commit_change(
        repo,
        "preregistration/validation/predictions.json",
        '{"ratio_pred": {"6": 0.99}}\n',
        _at(7200),
        "tweak prediction",
    )
    row = _row(_audit(repo), "v-r0")
    assert row.verdict == VIOLATION
    assert f"predictions.json modified by commit {edit[:12]}" in row.reason


def test_edit_then_revert_is_still_caught(repo, monkeypatch):
    record = _register(repo, monkeypatch, T0)
    _manifest(repo, "v-r0", start=_at(3600), record=record)
    path = "preregistration/validation/predictions.json"
    original = (Path(repo.working_tree_dir) / path).read_text()
    edit = _commit_change(repo, path, '{"x": 1}\n', _at(7200), "edit")
    _commit_change(repo, path, original, _at(7300), "revert")
    reason = _row(_audit(repo), "v-r0").reason
    assert f"modified by commit {edit[:12]}" in reason


def test_deleted_prereg_file_is_caught(repo, monkeypatch):
    record = _register(repo, monkeypatch, T0)
    _manifest(repo, "v-r0", start=_at(3600), record=record)
    gone = _commit_change(repo, "preregistration/validation/plans.json", None, _at(7200), "rm")
    assert f"plans.json deleted by commit {gone[:12]}" in _row(_audit(repo), "v-r0").reason


def test_run_started_before_its_commit_is_caught_same_second_is_not(repo, monkeypatch):
    record = _register(repo, monkeypatch, T0)
    # early's seed is not shared: its own seed reuse would also (rightly) flag later runs
    _manifest(repo, "early", start=_at(-1), record=record, seed=102, sha=SHA_B, replicate=1)
    _manifest(repo, "same-second", start=_at(0), record=record)
    _manifest(repo, "half-second", start=_at(0.5), record=record)
    report = _audit(repo)
    early = _row(report, "early")
    assert early.verdict == VIOLATION and "before its prereg commit" in early.reason
    assert _row(report, "same-second").verdict == OK
    assert _row(report, "half-second").verdict == OK


def test_prereg_sha_not_ancestor_of_head_is_caught(repo, monkeypatch):
    _register(repo, monkeypatch, T0, study="mechanisms", files={"criteria.json": {"a": 1}})
    main_branch = repo.active_branch
    repo.create_head("side").checkout()
    side = _register(repo, monkeypatch, _at(60))
    main_branch.checkout()
    _manifest(repo, "unmerged", start=_at(3600), record=side)
    report = _audit(repo)
    row = _row(report, "unmerged")
    assert row.verdict == VIOLATION and "not an ancestor of HEAD" in row.reason
    fake = type(side)("validation", "0123456789abcdef" * 2 + "01234567", side.committed_at, ())
    _manifest(repo, "made-up", start=_at(3600), record=fake)
    row = _row(_audit(repo), "made-up")
    assert row.verdict == VIOLATION and "does not exist" in row.reason


def test_validation_seed_used_before_its_prereg_is_caught(repo, monkeypatch):
    _manifest(repo, "old-mech", start=_at(-3600), study="mechanisms", seed=101)
    record = _register(repo, monkeypatch, T0)
    _manifest(repo, "v-r0", start=_at(3600), record=record, seed=101)
    _manifest(repo, "v-r1", start=_at(3600), record=record, seed=102, sha=SHA_B, replicate=1)
    report = _audit(repo)
    row = _row(report, "v-r0")
    assert row.verdict == VIOLATION
    assert "plan seed 101 was already used by run old-mech" in row.reason
    assert _row(report, "v-r1").verdict == OK
    assert _row(report, "old-mech").verdict == OK  # unregistered study: judged by nothing


def test_validation_seed_registered_earlier_by_another_study_is_caught(repo, monkeypatch):
    earlier = PlanRegistry(False, (RegisteredPlan(0, 6, 102, SHA_C),)).to_json()
    _register(repo, monkeypatch, _at(-86400), study="mechanisms", files={"plans.json": earlier})
    record = _register(repo, monkeypatch, T0)
    _manifest(repo, "v-r1", start=_at(3600), record=record, seed=102, sha=SHA_B, replicate=1)
    _manifest(repo, "v-bad-seed", start=_at(3600), record=record, seed=999)
    report = _audit(repo)
    assert "registered earlier by study mechanisms" in _row(report, "v-r1").reason
    assert "not the seed registered for this plan" in _row(report, "v-bad-seed").reason


def test_plan_hash_must_match_registration(repo, monkeypatch):
    record = _register(repo, monkeypatch, T0)
    _manifest(repo, "v-r0", start=_at(3600), record=record, sha=SHA_C)
    row = _row(_audit(repo), "v-r0")
    assert row.verdict == VIOLATION
    assert "is not the plan registered for replicate 0, N=6, variant wait" in row.reason


def test_variant_specific_plan_hashes(repo, monkeypatch):
    per_variant = PlanRegistry(
        False, (RegisteredPlan(0, 6, 5, SHA_A, "wait"), RegisteredPlan(0, 6, 5, SHA_B, "control"))
    ).to_json()
    record = _register(repo, monkeypatch, T0, study="grid", files={"plans.json": per_variant})
    _manifest(repo, "wait", start=_at(60), record=record, study="grid", seed=5)
    _manifest(
        repo,
        "control",
        start=_at(60),
        record=record,
        study="grid",
        seed=5,
        sha=SHA_B,
        variant="control",
    )
    _manifest(repo, "swapped", start=_at(60), record=record, study="grid", seed=5, sha=SHA_B)
    report = _audit(repo)
    assert [_row(report, r).verdict for r in ("wait", "control", "swapped")] == [OK, OK, VIOLATION]


def test_amendment_applies_only_to_later_runs(repo, monkeypatch):
    first = _register(repo, monkeypatch, T0)
    _manifest(repo, "before-amend", start=_at(600), record=first)
    amended = _register(
        repo,
        monkeypatch,
        _at(3600),
        files={"amendment-01-tau.json": {"rule": "tau"}},
        amendment_of=first.commit,
    )
    _manifest(repo, "after-amend", start=_at(7200), record=amended)
    _manifest(repo, "backdated", start=_at(1800), record=amended)
    report = _audit(repo)
    assert _row(report, "before-amend").verdict == OK  # adding files is not a change
    assert _row(report, "after-amend").verdict == OK
    assert "before its prereg commit" in _row(report, "backdated").reason


def test_incomplete_runs_are_excluded_and_unrecorded_prereg_is_caught(repo, monkeypatch):
    record = _register(repo, monkeypatch, T0)
    _manifest(repo, "crashed", start=_at(-60), record=record, status="failed")
    _manifest(repo, "no-prereg", start=_at(3600), record=None)
    _manifest(repo, "wrong-time", start=_at(3600), record=record, committed_at=_at(1).isoformat())
    report = _audit(repo)
    crashed = _row(report, "crashed")
    assert crashed.verdict == EXCLUDED and "server crashed" in crashed.reason
    assert "records no prereg commit" in _row(report, "no-prereg").reason
    assert "differs from git's commit time" in _row(report, "wrong-time").reason


def test_cli_exit_codes_table_and_json(repo, monkeypatch):
    record = _register(repo, monkeypatch, T0)
    _manifest(repo, "v-r0", start=_at(3600), record=record)
    runner = CliRunner()
    args = ["audit", "--repo", repo.working_tree_dir]
    clean = runner.invoke(app, args)
    assert clean.exit_code == 0, clean.output
    assert "v-r0" in clean.output and "0 violation" in clean.output
    _commit_change(repo, "preregistration/validation/predictions.json", "{}\n", _at(7200), "x")
    dirty = runner.invoke(app, [*args, "--json"])
    assert dirty.exit_code == 1
    payload = json.loads(dirty.output)
    assert payload["ok"] is False
    assert [r["verdict"] for r in payload["rows"] if r["run"] == "v-r0"] == [VIOLATION]


def test_cli_prereg_registers_prepared_files_once(repo, monkeypatch, tmp_path):
    prepared = tmp_path / "prepared"
    prepared.mkdir()
    (prepared / "predictions.json").write_text(json.dumps(PREDICTIONS))
    (prepared / "plans.json").write_text(json.dumps(PLANS))
    monkeypatch.setenv("GIT_COMMITTER_DATE", T0.isoformat())
    args = ["prereg", "validation", "--files", str(prepared), "--repo", repo.working_tree_dir]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    assert first.output.strip() == repo.head.commit.hexsha
    second = CliRunner().invoke(app, args)
    assert second.output == first.output
    assert len(list(repo.iter_commits("HEAD"))) == 1


def test_cli_not_a_repository_exits_2_with_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "results").mkdir()
    monkeypatch.setattr(sys, "argv", ["rearrival", "audit", "--repo", str(tmp_path)])
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rearrival: error:") and "git init" in err and "\n" not in err


def _profile_files(profile: bytes, recorded: bytes) -> dict:
    import hashlib

    return {
        "predictions.json": PREDICTIONS,
        "plans.json": PLANS,
        "profile.yaml": profile,
        "design.json": {
            "profile_sha256": hashlib.sha256(recorded).hexdigest(),
            "backend": "emulated",
            "n": [6],
            "replicates": 1,
            "variants": ["wait"],
            "configurations": {"baseline": BASELINE},
        },
    }


def test_committed_prediction_profile_passes(repo, monkeypatch):
    """The profile predictions used is committed with them (docs/DESIGN.md §3)."""
    profile = b"profile_version: calibrated/emulated/x\n"
    record = _register(repo, monkeypatch, T0, files=_profile_files(profile, profile))
    _manifest(repo, "v-r0", start=_at(3600), record=record)
    row = _row(_audit(repo), "v-r0")
    assert row.verdict == OK and "profile committed" in row.reason


def test_prediction_profile_not_committed_is_caught(repo, monkeypatch):
    used = b"profile_version: calibrated/emulated/used\n"
    record = _register(
        repo, monkeypatch, T0, files=_profile_files(b"profile_version: other\n", used)
    )
    _manifest(repo, "v-r0", start=_at(3600), record=record)
    row = _row(_audit(repo), "v-r0")
    assert row.verdict == VIOLATION
    assert "profile was not committed before the run" in row.reason


def _sealed_validation(repo, monkeypatch) -> list[Path]:
    """Study 'validation' registered, two replicate runs measured after it, sealed."""
    record = _register(repo, monkeypatch, T0)
    replicates = []
    for replicate, (seed, sha) in enumerate(((101, SHA_A), (102, SHA_B))):
        run_id = f"runs/validation/n6_r{replicate}/baseline-wait"
        start = _at(3600 + replicate)
        _manifest(repo, run_id, start=start, record=record, seed=seed, sha=sha, replicate=replicate)
        run = Path(repo.working_tree_dir) / "results" / run_id
        (run / "steps.parquet").write_bytes(b"eight decode steps" * (replicate + 1))
        replicates.append(run.parent)
    monkeypatch.setenv("GIT_COMMITTER_DATE", _at(7200).isoformat())
    seal(repo.working_tree_dir, "validation", replicates, Path(repo.working_tree_dir) / "l.json")
    return replicates


def test_the_forged_second_ledger_of_issue_20_is_caught(repo, monkeypatch):
    """Edit run records, rewrite their manifests' hashes, commit a second ledger: the
    records match HEAD's ledger, so only the ledger's history can tell."""
    replicates = _sealed_validation(repo, monkeypatch)
    first = repo.head.commit.hexsha
    run = replicates[0] / "baseline-wait"
    (run / "steps.parquet").write_bytes(b"seven decode steps")
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["files"] = {"steps.parquet": "forged"}  # the manifest's own hash list rewritten
    atomic_write_json(run / "manifest.json", manifest)
    ledger = Path(repo.working_tree_dir) / ledger_path("validation")
    ledger.write_bytes(ledger_bytes("validation", file_hashes(replicates)))
    second = _commit_change(
        repo, ledger_path("validation"), ledger.read_text(), _at(9000), "ledger(validation)"
    )
    report = _audit(repo)
    reasons = sorted(r.reason for r in report.violations)
    assert [r.run for r in report.violations] == ["validation/n6_r0/baseline-wait"] * 2
    for name, reason in zip(("manifest.json", "steps.parquet"), reasons, strict=True):
        assert reason.startswith(
            f"run n6_r0/baseline-wait: file {name} sealed in commit {first[:12]} "
            f"(ledger/validation.json) was changed by commit {second[:12]}"
        )
    assert "every run record file has its sealed sha256" not in report.table()


def test_a_clean_sealed_study_reports_an_append_only_ledger(repo, monkeypatch):
    _sealed_validation(repo, monkeypatch)
    report = _audit(repo)
    assert report.ok, report.table()
    row = _row(report, "(ledger) ledger/validation.json")
    assert row.reason.endswith("1 ledger commit(s), append-only")


def test_table_puts_totals_first_summarizes_unregistered_runs_and_fits_100_columns(
    repo, monkeypatch
):
    record = _register(repo, monkeypatch, T0)
    for index in range(70):
        _manifest(repo, f"calibration/c{index}", start=_at(60), record=None, study="calibration")
    long_id = "validation.selected-wait-with-a-long-label.r0.emulated-http.0123abcd"
    _manifest(repo, long_id, start=_at(3600), record=record)
    _manifest(repo, "v-late", start=_at(-3600), record=record, seed=102, sha=SHA_B, replicate=1)
    report = _audit(repo)
    lines = report.table().splitlines()
    assert lines[0] == report.totals() == "73 rows: 72 ok, 1 violation, 0 excluded"
    assert "calibration: 70 run(s) not preregistered" in lines[-1]
    assert sum("calibration" in line for line in lines) == 1
    assert max(map(len, lines)) <= 100
    at = lines.index(f"ok        {long_id}")  # commit and start moved to the next line
    assert lines[at + 1].startswith(" " * 10 + "prereg ")
    violations = report.table(violations_only=True).splitlines()
    assert violations[0] == lines[0]
    assert violations[1].startswith("violation validation v-late")
    assert all(line.startswith(" " * 10) for line in violations[2:])


def test_a_staging_folder_a_killed_job_left_is_ignored_and_named(repo, monkeypatch):
    """issue 38: a job killed mid-replicate left `.n6_r1.x.tmp` holding a second run of
    replicate 1; the audit counted it (added files, two runs of a replicate). It is
    named, excluded, and the study stays green."""
    _sealed_validation(repo, monkeypatch)  # the study as the rerun finished it
    _manifest(
        repo,
        "runs/validation/.n6_r1.zv47ue0h.tmp/baseline-wait",
        start=_at(9000),
        seed=102,
        sha=SHA_B,
        replicate=1,
    )
    report = _audit(repo)
    assert report.ok, report.table()
    row = _row(report, "runs/validation/.n6_r1.zv47ue0h.tmp")
    assert row.verdict == EXCLUDED and row.study == "validation"
    assert "never published, so ignored; delete it" in row.reason
