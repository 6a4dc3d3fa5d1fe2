"""A witness holds registrations and ledgers outside the repository (paper Section II-D).

The witness is a real second repository: a bare repository served by ``git daemon`` on
127.0.0.1 (a free port, started and stopped by the fixture), pushed to and listed over
the git protocol like any remote.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import git
import pytest
import yaml
from typer.testing import CliRunner

from rearrival.cli import app
from rearrival.prereg.audit import OK, VIOLATION, audit
from rearrival.prereg.ledger import seal
from rearrival.prereg.registration import register
from rearrival.prereg.witness import (
    NAMESPACE,
    WitnessError,
    compare,
    held_refs,
    publish,
    require_witnessed,
    witness_ref,
)

PREDICTIONS = {"ratio_pred": {"6": 0.97}}
REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port: int, daemon: subprocess.Popen) -> None:
    """Block until the daemon accepts connections (it binds after it starts)."""
    for _ in range(200):
        if daemon.poll() is not None:
            raise RuntimeError(f"git daemon exited: {daemon.stderr.read()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"git daemon did not listen on port {port}")


@pytest.fixture
def witness(tmp_path) -> Iterator[tuple[str, Path]]:
    """(URL, bare repository path) of a witness served by ``git daemon``."""
    base = tmp_path / "served"
    bare = base / "witness.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    port = _free_port()
    daemon = subprocess.Popen(
        [
            "git",
            "daemon",
            "--export-all",
            "--enable=receive-pack",
            f"--base-path={base}",
            "--listen=127.0.0.1",
            f"--port={port}",
            "--reuseaddr",
            str(base),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_listening(port, daemon)
        yield f"git://127.0.0.1:{port}/witness.git", bare
    finally:
        daemon.terminate()
        daemon.wait(timeout=10)


@pytest.fixture
def study(tmp_path, no_git_identity) -> tuple[git.Repo, list[Path]]:
    """A repository with study 'grid' registered, one replicate run and sealed."""
    repo = git.Repo.init(tmp_path / "repo")
    (Path(repo.working_tree_dir) / "README").write_text("code\n")
    repo.index.add(["README"])
    repo.index.commit("code")
    record = register(repo.working_tree_dir, "grid", {"predictions.json": PREDICTIONS}, message="p")
    run = Path(repo.working_tree_dir) / "results" / "runs" / "grid" / "n6_r0" / "baseline-wait"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"prereg": record.manifest_entry()}))
    (run / "steps.parquet").write_bytes(b"steps")
    seal(repo.working_tree_dir, "grid", [run.parent], tmp_path / "ledger-record.json")
    return repo, [run.parent]


def _bare_refs(bare: Path) -> list[str]:
    out = subprocess.run(
        ["git", "-C", str(bare), "for-each-ref", "--format=%(refname)"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return out.split()


def test_publish_pushes_only_registration_and_ledger_refs(study, witness):
    repo, _ = study
    url, bare = witness
    pushed = publish(repo, url)
    ledger, registration = (c.hexsha for c in repo.iter_commits("HEAD", max_count=2))
    assert [(p.kind, p.commit) for p in pushed] == [("prereg", registration), ("ledger", ledger)]
    refs = _bare_refs(bare)
    assert all(r.startswith(f"{NAMESPACE}/") for r in refs)  # no branch, no tag
    assert sorted(refs) == sorted(p.ref for p in pushed)
    assert len(refs) == 2
    assert publish(repo, url) == pushed  # idempotent
    check = compare(repo, url)
    assert check.missing == () and check.diverged == ()


def test_published_refs_name_the_commit_they_hold(study, witness):
    repo, _ = study
    url, _ = witness
    publish(repo, url)
    registration = next(repo.iter_commits("HEAD", paths="preregistration/grid"))
    refs = held_refs(repo, url)
    assert refs[witness_ref("prereg", "grid", registration.hexsha)] == registration.hexsha


def test_a_run_waits_for_the_witness_to_hold_its_registration(study, witness):
    repo, _ = study
    url, _ = witness
    registration = next(repo.iter_commits("HEAD", paths="preregistration/grid")).hexsha
    with pytest.raises(WitnessError) as caught:
        require_witnessed(repo, url, "grid", registration)
    assert "run of study grid refused" in str(caught.value)
    assert "rearrival publish" in str(caught.value) and "\n" not in str(caught.value)
    publish(repo, url)
    assert require_witnessed(repo, url, "grid", registration) == witness_ref(
        "prereg", "grid", registration
    )


def test_audit_of_a_fresh_clone_of_the_witness_plus_the_results_passes(study, witness, tmp_path):
    repo, _ = study
    url, _ = witness
    publish(repo, url)
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", url, str(clone)], check=True, capture_output=True)
    subprocess.run(
        ["git", "-C", str(clone), "fetch", "-q", "origin", f"+{NAMESPACE}/*:{NAMESPACE}/*"],
        check=True,
    )
    subprocess.run(
        ["git", "-C", str(clone), "checkout", "-q", "--detach", repo.head.commit.hexsha],
        check=True,
    )
    shutil.copytree(Path(repo.working_tree_dir) / "results", clone / "results")
    report = audit(clone, clone / "results", witness=url)
    assert report.ok, report.table()
    assert any(r.run == "(witness)" and r.verdict == OK for r in report.rows)


def _rewrite_registration(repo: git.Repo, replicates: list[Path]) -> None:
    """Rewrite history from scratch: the registration with other predictions, then a
    fresh seal; the local history is consistent in itself."""
    first = next(repo.iter_commits("HEAD", paths="README", max_count=1))
    repo.git.reset("--hard", first.hexsha)
    register(
        repo.working_tree_dir, "grid", {"predictions.json": {"ratio_pred": {"6": 0.9}}}, message="p"
    )
    seal(repo.working_tree_dir, "grid", replicates, Path(repo.working_tree_dir) / "l.json")


def test_a_rewritten_registration_already_published_is_caught(study, witness):
    repo, replicates = study
    url, _ = witness
    publish(repo, url)
    _rewrite_registration(repo, replicates)
    assert all(
        r.verdict != VIOLATION for r in audit(repo.working_tree_dir, replicates[0].parents[2]).rows
    )
    report = audit(repo.working_tree_dir, replicates[0].parents[2], witness=url)
    violations = [r.reason for r in report.violations]
    assert any(
        "local history diverges from witness" in v
        and "refs/rearrival/prereg/grid/" in v
        and "was edited" in v
        and "predictions.json: ratio_pred.6: witnessed 0.97, here 0.9" in v
        for v in violations
    )
    assert any("replayed here with identical content" in v and "ledger" in v for v in violations)
    assert all("\n" not in v for v in violations)


def test_a_push_refused_by_the_witness_is_one_line(study, witness):
    repo, _ = study
    url, bare = witness
    hook = bare / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'witness is read-only' >&2\nexit 1\n")
    hook.chmod(0o755)
    with pytest.raises(WitnessError) as caught:
        publish(repo, url)
    message = str(caught.value)
    assert message.startswith(f"witness {url} refused the push of {NAMESPACE}/")
    assert "pre-receive hook declined" in message and "\n" not in message


def test_an_unreachable_witness_is_one_line(study):
    repo, _ = study
    url = f"git://127.0.0.1:{_free_port()}/witness.git"
    for call in (lambda: publish(repo, url), lambda: compare(repo, url)):
        with pytest.raises(WitnessError) as caught:
            call()
        message = str(caught.value)
        assert message.startswith(f"witness {url}: unreachable") and "\n" not in message
        assert "unable to connect" in message


def test_cli_publish_and_audit_witness(study, witness, tmp_path):
    repo, replicates = study
    url, _ = witness
    runner = CliRunner()
    top = repo.working_tree_dir
    published = runner.invoke(app, ["publish", "--repo", top, "--remote", url])
    assert published.exit_code == 0, published.output
    assert published.output.splitlines()[-1] == (
        f"2 registration and ledger commit(s) held by witness {url}"
    )
    results = str(replicates[0].parents[2])
    args = ["audit", "--repo", top, "--results", results, "--witness", url]
    assert runner.invoke(app, args).exit_code == 0
    _rewrite_registration(repo, replicates)
    dirty = runner.invoke(app, [*args, "--violations-only"])
    assert dirty.exit_code == 1
    lines = dirty.output.splitlines()
    assert lines[0].endswith("excluded") and " violation" in lines[0]
    assert all(len(line) <= 100 for line in lines)
    assert "diverges from witness" in dirty.output and " ok " not in dirty.output


def test_cli_publish_reads_the_witness_from_the_config(study, witness, tmp_path):
    repo, _ = study
    url, bare = witness
    raw = yaml.safe_load((REPO / ".test" / "config" / "config.yaml").read_text())
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(raw))
    args = ["publish", "--repo", repo.working_tree_dir, "--config", str(config)]
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code != 0 and "no witness: section" in str(refused.exception)
    config.write_text(yaml.safe_dump(raw | {"witness": {"remote": url}}))
    assert CliRunner().invoke(app, args).exit_code == 0
    assert len(_bare_refs(bare)) == 2


STUDIES = ("alpha", "beta", "gamma")


@pytest.fixture
def studies(tmp_path, no_git_identity) -> tuple[git.Repo, Path]:
    """Three studies registered and sealed one after another, as the pipeline does
    (registration, runs, seal per study); returns the repository and its results."""
    repo = git.Repo.init(tmp_path / "repo")
    top = Path(repo.working_tree_dir)
    for name in ("LICENSE", "README"):
        (top / name).write_text("code\n")
        repo.index.add([name])
        repo.index.commit(name)
    for study in STUDIES:
        files = {"criteria.json": {"tau": 0.05, "n": [6, 8]}, "predictions.json": PREDICTIONS}
        record = register(top, study, files, message=f"prereg({study})")
        run = top / "results" / "runs" / study / "n6_r0" / "baseline-wait"
        run.mkdir(parents=True)
        (run / "manifest.json").write_text(json.dumps({"prereg": record.manifest_entry()}))
        (run / "steps.parquet").write_bytes(study.encode())
        seal(top, study, [run.parent], tmp_path / f"{study}-ledger.json")
    return repo, top / "results"


def _replay(repo: git.Repo, target: git.Commit, edit) -> None:
    """Rewrite ``target`` with ``edit`` applied to the work tree and replay every later
    commit onto it, keeping messages and authors (what an interactive rebase does)."""
    later = list(repo.iter_commits(f"{target.hexsha}..HEAD", reverse=True))
    repo.git.reset("--hard", target.parents[0].hexsha)
    repo.git.cherry_pick("--no-commit", target.hexsha)
    edit(Path(repo.working_tree_dir))
    repo.git.add("-u")
    repo.git.commit("-q", "-C", target.hexsha)
    for commit in later:
        repo.git.cherry_pick(commit.hexsha)


def _registration(repo: git.Repo, study: str) -> git.Commit:
    return next(repo.iter_commits("HEAD", paths=f"preregistration/{study}"))


def _witness_rows(report) -> list:
    return [r for r in report.rows if r.run.startswith("(witness")]


def test_an_edited_registration_names_the_first_diverging_commit_and_values(studies, witness):
    """One criteria file edited and the later commits replayed: the audit names the
    witnessed commit the history leaves, the edited file and value, and says the other
    studies' commits were replayed with identical content (issue 29)."""
    repo, results = studies
    url, _ = witness
    publish(repo, url)
    edited = _registration(repo, "beta")

    def loosen(top: Path) -> None:
        path = top / "preregistration" / "beta" / "criteria.json"
        path.write_text(path.read_text().replace("0.05", "0.07"))

    _replay(repo, edited, loosen)
    rows = _witness_rows(audit(repo.working_tree_dir, results, witness=url))
    by_study = {s: [r for r in rows if r.study == s] for s in STUDIES}
    assert [r.verdict for r in by_study["alpha"]] == [OK]  # registered before the edit
    beta = [r for r in by_study["beta"] if r.verdict == VIOLATION]
    assert beta and all(r.verdict == VIOLATION for r in by_study["beta"])
    first = next(r for r in rows if "first diverging" in r.reason)
    assert edited.hexsha[:12] in first.reason and _registration(repo, "beta").hexsha[:12] in (
        first.reason
    )
    edit = next(r for r in beta if "edited" in r.reason)
    assert "preregistration/beta/criteria.json" in edit.reason
    assert "tau: witnessed 0.05, here 0.07" in edit.reason
    gamma = by_study["gamma"]
    assert gamma and all(r.verdict == VIOLATION for r in gamma)
    assert all("identical content" in r.reason and "edited" not in r.reason for r in gamma)
    # one row per study and kind of change, not one per ref and commit
    assert len(rows) <= 6, "\n".join(r.reason for r in rows)
    assert all("\n" not in r.reason for r in rows)


def test_a_content_identical_replay_is_told_from_an_edit(studies, witness):
    """A reworded commit below every registration changes every hash but no registered
    byte: each witnessed commit is named with the local commit that replays it."""
    repo, results = studies
    url, _ = witness
    publish(repo, url)
    witnessed = {s: _registration(repo, s).hexsha for s in STUDIES}
    code = next(repo.iter_commits("HEAD", paths="README"))
    _replay(repo, code, lambda top: (top / "README").write_text("code, reworded\n"))
    rows = _witness_rows(audit(repo.working_tree_dir, results, witness=url))
    assert rows and all(r.verdict == VIOLATION for r in rows)
    assert not any("edited" in r.reason for r in rows)
    first = next(r for r in rows if "first diverging" in r.reason)
    assert code.hexsha[:12] in first.reason and "README" in first.reason
    for study in STUDIES:
        replayed = [r for r in rows if r.study == study and "identical content" in r.reason]
        assert len(replayed) == 1
        assert witnessed[study][:12] in replayed[0].reason
        assert _registration(repo, study).hexsha[:12] in replayed[0].reason


def test_witnessed_commits_the_clone_lacks_are_fetched_to_compare(study, witness):
    """After the rewrite the old commits are gone from the local object store (as in a
    fresh clone of the rewritten history): the audit fetches them from the witness,
    objects only, and still names the edited value."""
    repo, replicates = study
    url, _ = witness
    publish(repo, url)
    _rewrite_registration(repo, replicates)
    repo.git.reflog("expire", "--expire=now", "--all")
    repo.git.gc("--prune=now", "--quiet")
    old = held_refs(repo, url)
    assert not any(repo.git.cat_file("-t", sha, with_exceptions=False) for sha in old.values())
    report = audit(repo.working_tree_dir, replicates[0].parents[2], witness=url)
    assert any("ratio_pred.6: witnessed 0.97, here 0.9" in r.reason for r in report.violations)
    assert repo.git.for_each_ref(NAMESPACE) == ""  # no ref written
    assert not (Path(repo.git_dir) / "FETCH_HEAD").exists()
