"""Sealed run records: one ledger commit per study, verified against git's copy."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import git
import pytest

from rearrival.prereg.ledger import (
    REMEASURE_TRAILER,
    LedgerError,
    file_hashes,
    ledger_bytes,
    ledger_path,
    overwrites,
    require_sealed,
    seal,
    verify,
)
from rearrival.prereg.registration import register


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture
def sealed(tmp_path, no_git_identity) -> tuple[Path, list[Path]]:
    """A repository with two replicate directories of a study 'grid', sealed once."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    replicates = []
    for name in ("n6_r0", "n6_r1"):
        run = repo / "results" / "runs" / "grid" / name / "baseline-wait"
        run.mkdir(parents=True)
        (run / "manifest.json").write_text(json.dumps({"run": name}))
        (run / "steps.parquet").write_bytes(name.encode() * 10)
        (run.parent / ".snakemake_timestamp").write_text("")
        replicates.append(run.parent)
    seal(repo, "grid", replicates, repo / "results" / "ledger" / "grid.json")
    return repo, replicates


def test_seal_commits_only_the_ledger_once(sealed):
    repo, replicates = sealed
    assert _git(repo, "log", "--format=%s").splitlines() == ["ledger(grid): seal run records"]
    assert _git(repo, "show", "--name-only", "--format=", "HEAD").split() == [ledger_path("grid")]
    record = seal(repo, "grid", replicates, repo / "results" / "ledger" / "grid.json")
    assert len(_git(repo, "log", "--format=%H").split()) == 1  # unchanged: no new commit
    assert record["files"] == 4  # the Snakemake marker is not a record


def test_untouched_records_verify(sealed):
    repo, replicates = sealed
    assert verify(repo, "grid", replicates, every_replicate=True) == []
    require_sealed(repo, "grid", replicates)


def test_edited_added_and_removed_files_are_named_with_their_run(sealed):
    repo, replicates = sealed
    run = replicates[0] / "baseline-wait"
    (run / "steps.parquet").write_bytes(b"changed")
    (run / "extra.csv").write_text("x\n")
    (replicates[1] / "baseline-wait" / "manifest.json").unlink()
    problems = verify(repo, "grid", replicates)
    assert problems[0].startswith("run n6_r0/baseline-wait: file extra.csv added after sealing")
    assert problems[1].startswith(
        "run n6_r0/baseline-wait: file steps.parquet edited after sealing"
    )
    assert problems[2] == "run n6_r1/baseline-wait: file manifest.json removed after sealing"
    with pytest.raises(LedgerError, match=r"n6_r0/baseline-wait: file extra\.csv added"):
        require_sealed(repo, "grid", replicates)


def test_the_committed_ledger_is_the_reference_not_the_working_file(sealed):
    repo, replicates = sealed
    (replicates[0] / "baseline-wait" / "steps.parquet").write_bytes(b"changed")
    ledger = repo / ledger_path("grid")
    data = json.loads(ledger.read_text())
    data["files"] = {}
    ledger.write_text(json.dumps(data))  # rewriting the working ledger changes nothing
    assert any("steps.parquet edited" in p for p in verify(repo, "grid", replicates))


def test_a_removed_replicate_counts_only_for_the_audit(sealed):
    repo, replicates = sealed
    shutil.rmtree(replicates[1])
    assert verify(repo, "grid", replicates[:1]) == []
    assert any(
        "n6_r1/baseline-wait: file steps.parquet removed" in p
        for p in verify(repo, "grid", replicates[:1], every_replicate=True)
    )


def test_a_study_without_a_ledger_is_reported(sealed):
    repo, replicates = sealed
    assert "no committed ledger for study other" in verify(repo, "other", replicates)[0]


def _manifest(run: Path, prereg_commit: str | None) -> None:
    (run / "manifest.json").write_text(json.dumps({"prereg": {"commit": prereg_commit}}))


def _forge_second_ledger(repo: Path, replicates: list[Path]) -> str:
    """The forgery of issue 20: edit a record, reseal by hand, commit a second ledger."""
    (replicates[0] / "baseline-wait" / "steps.parquet").write_bytes(b"one step in eight dropped")
    data = ledger_bytes("grid", file_hashes(replicates))
    (repo / ledger_path("grid")).write_bytes(data)
    _git(repo, "add", ledger_path("grid"))
    _git(repo, "commit", "-q", "-m", "ledger(grid): seal run records")
    return _git(repo, "rev-parse", "HEAD").strip()


def test_seal_refuses_to_overwrite_a_sealed_hash(sealed):
    repo, replicates = sealed
    first = _git(repo, "rev-parse", "HEAD").strip()
    (replicates[0] / "baseline-wait" / "steps.parquet").write_bytes(b"changed")
    with pytest.raises(LedgerError) as caught:
        seal(repo, "grid", replicates, repo / "results" / "ledger" / "grid.json")
    message = str(caught.value)
    assert "\n" not in message
    assert f"run n6_r0/baseline-wait: file steps.parquet sealed in commit {first[:12]}" in message
    assert "restore the sealed run records" in message
    assert "re-measure under a new registration" in message
    assert _git(repo, "rev-parse", "HEAD").strip() == first  # nothing committed


def test_seal_refuses_a_deleted_replicate_run_again(sealed):
    """Deleting a replicate after seeing it and letting the workflow re-run it is a
    selective re-measurement: the fresh run still names the old registration."""
    repo, replicates = sealed
    shutil.rmtree(replicates[1])
    run = replicates[1] / "baseline-wait"
    run.mkdir(parents=True)
    _manifest(run, None)
    (run / "steps.parquet").write_bytes(b"a luckier measurement")
    with pytest.raises(LedgerError, match=r"run n6_r1/baseline-wait: file manifest\.json sealed"):
        seal(repo, "grid", replicates, repo / "results" / "ledger" / "grid.json")


def test_seal_appends_new_runs_and_keeps_replicates_not_given(sealed):
    repo, replicates = sealed
    extra = replicates[0].parent / "n6_r2" / "baseline-wait"
    extra.mkdir(parents=True)
    (extra / "steps.parquet").write_bytes(b"new")
    seal(repo, "grid", [extra.parent], repo / "results" / "ledger" / "grid.json")
    files = json.loads(_git(repo, "show", f"HEAD:{ledger_path('grid')}"))["files"]
    assert sorted({k.split("/")[0] for k in files}) == ["n6_r0", "n6_r1", "n6_r2"]
    assert overwrites(git.Repo(repo), "grid") == []


def test_a_declared_remeasurement_under_a_new_registration_is_accepted(sealed):
    repo, replicates = sealed
    first = _git(repo, "rev-parse", "HEAD").strip()
    registration = register(
        repo, "grid", {"remeasure.json": {"why": "device fault"}}, message="Preregister grid"
    )
    run = replicates[0] / "baseline-wait"
    _manifest(run, registration.commit)
    (run / "steps.parquet").write_bytes(b"re-measured")
    seal(repo, "grid", replicates, repo / "results" / "ledger" / "grid.json")
    message = _git(repo, "log", "-1", "--format=%B")
    assert f"{REMEASURE_TRAILER}: {registration.commit}" in message
    assert _git(repo, "rev-parse", "HEAD~2").strip() == first
    assert overwrites(git.Repo(repo), "grid") == []


def _register_then_seal_more(repo: Path, replicates: list[Path]) -> str:
    """A registration followed by a later seal (a new replicate added): the
    registration is no longer newer than the ledger."""
    old = register(repo, "grid", {"design.json": {"n": [6]}}, message="Preregister grid")
    extra = replicates[0].parent / "n6_r2" / "baseline-wait"
    extra.mkdir(parents=True)
    (extra / "steps.parquet").write_bytes(b"new")
    seal(repo, "grid", [*replicates, extra.parent], repo / "results" / "ledger" / "grid.json")
    return old.commit


def test_a_remeasurement_under_the_old_registration_is_refused(sealed):
    repo, replicates = sealed
    old = _register_then_seal_more(repo, replicates)
    _manifest(replicates[0] / "baseline-wait", old)  # registered before the last seal
    with pytest.raises(LedgerError, match="append-only"):
        seal(repo, "grid", replicates, repo / "results" / "ledger" / "grid.json")


def test_a_forged_second_ledger_commit_names_run_file_and_both_commits(sealed):
    repo, replicates = sealed
    first = _git(repo, "rev-parse", "HEAD").strip()
    second = _forge_second_ledger(repo, replicates)
    assert verify(repo, "grid", replicates) == []  # HEAD's ledger matches the records
    (found,) = overwrites(git.Repo(repo), "grid")
    assert (found.run, found.sealed_in, found.changed_by) == ("n6_r0/baseline-wait", first, second)
    assert found.describe().startswith(
        f"run n6_r0/baseline-wait: file steps.parquet sealed in commit {first[:12]} "
        f"(ledger/grid.json) was changed by commit {second[:12]}"
    )


def test_a_trailer_naming_an_old_registration_does_not_excuse_an_overwrite(sealed):
    repo, replicates = sealed
    old = _register_then_seal_more(repo, replicates)
    (replicates[0] / "baseline-wait" / "steps.parquet").write_bytes(b"forged")
    every = [*replicates, replicates[0].parent / "n6_r2"]
    (repo / ledger_path("grid")).write_bytes(ledger_bytes("grid", file_hashes(every)))
    _git(repo, "add", ledger_path("grid"))
    _git(repo, "commit", "-q", "-m", f"ledger(grid)\n\n{REMEASURE_TRAILER}: {old}")
    assert [o.change for o in overwrites(git.Repo(repo), "grid")] == ["changed"]


def test_a_deleted_ledger_removes_every_sealed_hash(sealed):
    repo, _ = sealed
    _git(repo, "rm", "-q", ledger_path("grid"))
    _git(repo, "commit", "-q", "-m", "drop ledger")
    assert len(overwrites(git.Repo(repo), "grid")) == 4
    assert {o.change for o in overwrites(git.Repo(repo), "grid")} == {"removed"}


def test_a_run_added_to_a_sealed_replicate_is_refused_and_named(sealed):
    """A fabricated extra run inside a measured replicate cannot be sealed in later."""
    repo, replicates = sealed
    extra = replicates[0] / "baseline-wait-again"
    extra.mkdir()
    (extra / "steps.parquet").write_bytes(b"fabricated")
    with pytest.raises(LedgerError, match=r"run n6_r0/baseline-wait-again: file steps\.parquet"):
        seal(repo, "grid", replicates, repo / "results" / "ledger" / "grid.json")
    first = _git(repo, "rev-parse", "HEAD").strip()
    (repo / ledger_path("grid")).write_bytes(ledger_bytes("grid", file_hashes(replicates)))
    _git(repo, "commit", "-q", "-am", "ledger(grid): seal run records")
    (found,) = overwrites(git.Repo(repo), "grid")
    assert found.change == "added"
    assert found.describe().startswith(
        "run n6_r0/baseline-wait-again: file steps.parquet was added by commit "
        f"{_git(repo, 'rev-parse', 'HEAD').strip()[:12]} to replicate n6_r0, sealed in "
        f"commit {first[:12]}"
    )
