"""Sealed run records: one ledger commit per study, verified against git's copy."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from rearrival.prereg.ledger import LedgerError, ledger_path, require_sealed, seal, verify


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
    import shutil

    shutil.rmtree(replicates[1])
    assert verify(repo, "grid", replicates[:1]) == []
    assert any(
        "n6_r1/baseline-wait: file steps.parquet removed" in p
        for p in verify(repo, "grid", replicates[:1], every_replicate=True)
    )


def test_a_study_without_a_ledger_is_reported(sealed):
    repo, replicates = sealed
    assert "no committed ledger for study other" in verify(repo, "other", replicates)[0]
