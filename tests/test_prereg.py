"""Preregistration commits (docs/DESIGN.md §8) in throw-away git repositories.

Every test runs with HOME pointing into tmp_path and system config disabled, so a
machine-wide git identity cannot hide the "no identity" case.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

import git
import pytest

from rearrival.prereg.registration import (
    PIPELINE_EMAIL,
    PIPELINE_NAME,
    PlanRegistry,
    PreregError,
    RegisteredPlan,
    check_before_run,
    prereg_in_force,
    register,
    starts_after,
)

T0 = "2026-01-01T00:00:00+00:00"
T1 = "2026-01-02T00:00:00+00:00"
RECORDS = Path("results") / "prereg"
PREDICTIONS = {"ratios": {"6": 0.97, "8": 1.01}, "rule": "fixed", "tau": 0.02}


@pytest.fixture
def repo(tmp_path, monkeypatch, no_git_identity):
    monkeypatch.setenv("GIT_COMMITTER_DATE", T0)
    monkeypatch.setenv("GIT_AUTHOR_DATE", T0)
    return git.Repo.init(tmp_path / "repo")


def _register(repo, study="validation", files=None, **kwargs):
    return register(
        repo.working_tree_dir,
        study,
        files or {"predictions.json": PREDICTIONS},
        message=f"Preregister {study}",
        **kwargs,
    )


def _commits(repo) -> int:
    return len(list(repo.iter_commits("HEAD"))) if repo.head.is_valid() else 0


def test_register_commits_exactly_the_prereg_files_and_records_sha(repo):
    root = Path(repo.working_tree_dir)
    (root / "notes.txt").write_text("user's work\n")
    repo.git.add("notes.txt")  # staged by the user: must not leak into the commit
    record = _register(repo, files={"predictions.json": PREDICTIONS, "criteria.txt": "tau 0.02\n"})
    head = repo.head.commit
    assert record.commit == head.hexsha
    assert record.committed_at == datetime.fromisoformat(T0).isoformat()
    assert set(head.stats.files) == {
        "preregistration/validation/predictions.json",
        "preregistration/validation/criteria.txt",
    }
    assert "notes.txt" in repo.git.diff("--cached", "--name-only").split()
    data = (head.tree / "preregistration/validation/predictions.json").data_stream.read()
    assert data == (json.dumps(PREDICTIONS, indent=2, sort_keys=True) + "\n").encode()
    hashes = {f.path: f.sha256 for f in record.files}
    assert hashes["preregistration/validation/predictions.json"] == hashlib.sha256(data).hexdigest()
    saved = json.loads((root / RECORDS / "validation.json").read_text())
    assert (saved["commit"], saved["committed_at"]) == (record.commit, record.committed_at)
    assert record.manifest_entry() == {
        "study": "validation",
        "commit": record.commit,
        "committed_at": record.committed_at,
    }


def test_identical_reregistration_makes_no_commit(repo):
    first = _register(repo)
    record_file = Path(repo.working_tree_dir) / RECORDS / "validation.json"
    saved = record_file.read_bytes()
    again = _register(repo)
    assert again == first
    assert _commits(repo) == 1
    assert record_file.read_bytes() == saved


def test_registered_files_never_change(repo):
    _register(repo)
    with pytest.raises(PreregError, match=r"predictions\.json.*amendment"):
        _register(repo, files={"predictions.json": {**PREDICTIONS, "tau": 0.03}})
    with pytest.raises(PreregError, match="is an amendment"):
        _register(repo, files={"extra.json": {"a": 1}})
    assert _commits(repo) == 1


def test_amendment_adds_a_commit_that_applies_only_to_later_runs(repo, monkeypatch):
    first = _register(repo)
    monkeypatch.setenv("GIT_COMMITTER_DATE", T1)
    amended = _register(
        repo, files={"amendment-01-tau.json": {"rule": "tau"}}, amendment_of=first.commit
    )
    assert amended.commit != first.commit and amended.amendment_of == first.commit
    assert repo.head.commit.parents[0].hexsha == first.commit
    assert {f.path for f in amended.files} == {
        "preregistration/validation/predictions.json",
        "preregistration/validation/amendment-01-tau.json",
    }
    root = repo.working_tree_dir
    assert prereg_in_force(root, "validation", "2026-01-01T12:00:00+00:00") == first
    assert prereg_in_force(root, "validation", T1) == amended
    assert prereg_in_force(root, "validation", "2025-12-31T23:59:59+00:00") is None
    assert check_before_run(root, "validation") == amended
    # re-running the whole prereg stage (original + amendment files) is a no-op
    again = _register(
        repo,
        files={"predictions.json": PREDICTIONS, "amendment-01-tau.json": {"rule": "tau"}},
        amendment_of=first.commit,
    )
    assert again == amended and _commits(repo) == 2


def test_amending_an_unregistered_study_is_refused(repo):
    _register(repo, study="other")
    with pytest.raises(PreregError, match="nothing registered yet"):
        _register(repo, amendment_of="HEAD")
    with pytest.raises(PreregError, match="no such commit"):
        _register(repo, study="other", files={"b.json": {}}, amendment_of="deadbeef")


def test_not_a_repository_is_one_clear_line(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(PreregError) as info:
        register(plain, "validation", {"p.json": {}}, message="x")
    message = str(info.value)
    assert "\n" not in message and str(plain) in message and "git init" in message
    with pytest.raises(PreregError, match="not a git repository"):
        check_before_run(plain, "validation")


def test_identity_is_configured_locally_when_the_machine_has_none(repo, tmp_path):
    _register(repo)
    local = repo.config_reader("repository")
    assert local.get_value("user", "name") == PIPELINE_NAME
    assert local.get_value("user", "email") == PIPELINE_EMAIL
    assert repo.head.commit.author.email == PIPELINE_EMAIL
    assert not (tmp_path / "home" / ".gitconfig").exists()


def test_existing_identity_is_left_alone(repo, tmp_path):
    (tmp_path / "home" / ".gitconfig").write_text(
        "[user]\n\tname = Ada Researcher\n\temail = ada@example.org\n"
    )
    _register(repo)
    assert not repo.config_reader("repository").has_section("user")
    assert repo.head.commit.author.email == "ada@example.org"


def test_run_refuses_missing_uncommitted_or_modified_prereg(repo):
    root = Path(repo.working_tree_dir)
    with pytest.raises(PreregError, match=r"no committed preregistration.*rearrival prereg"):
        check_before_run(root, "validation")
    record = _register(repo)
    assert check_before_run(root, "validation") == record
    stray = root / "preregistration/validation/late.json"
    stray.write_text("{}\n")
    with pytest.raises(PreregError, match=r"late\.json: not committed; commit it or re-run"):
        check_before_run(root, "validation")
    stray.unlink()
    path = root / "preregistration/validation/predictions.json"
    path.write_bytes(path.read_bytes() + b" ")
    with pytest.raises(PreregError, match=r"predictions\.json: differs from HEAD"):
        check_before_run(root, "validation")
    repo.git.add(str(path))  # staged but not committed is still not registered
    with pytest.raises(PreregError, match="differs from HEAD"):
        check_before_run(root, "validation")
    path.unlink()
    with pytest.raises(PreregError, match="missing from the working tree"):
        check_before_run(root, "validation")


def test_plan_registry_is_validated_before_commit(repo):
    with pytest.raises(PreregError, match=r"plans\.json: plans\[0\]\.sha256"):
        _register(
            repo,
            files={
                "plans.json": {
                    "validation": True,
                    "plans": [{"replicate": 0, "n": 6, "seed": 1, "sha256": "abc"}],
                }
            },
        )
    good = PlanRegistry(True, (RegisteredPlan(0, 6, 1, "a" * 64),)).to_json()
    assert _register(repo, files={"plans.json": good}).commit == repo.head.commit.hexsha


def test_same_second_start_counts_as_after_the_commit():
    commit = datetime(2026, 1, 1, tzinfo=UTC)
    assert starts_after(commit, commit)
    assert starts_after(datetime(2026, 1, 1, 0, 0, 0, 400_000, tzinfo=UTC), commit)
    assert not starts_after(datetime(2025, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC), commit)
