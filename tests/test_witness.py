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
        "local history diverges from witness" in v and "refs/rearrival/prereg/grid/" in v
        for v in violations
    )
    assert any("registration commit" in v and "is not held by witness" in v for v in violations)
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
