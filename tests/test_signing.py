"""SSH-signed registration and ledger commits, verified by the audit (git's SSH signing)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import git
import pytest
import yaml
from typer.testing import CliRunner

from rearrival.cli import app
from rearrival.config.study import load_study_config
from rearrival.prereg.audit import OK, VIOLATION, audit
from rearrival.prereg.ledger import seal
from rearrival.prereg.registration import PreregError, Signing, register
from rearrival.prereg.signatures import SignatureError, check_signatures

REPO = Path(__file__).resolve().parents[1]
# Under CI the tests run (and fail without ssh-keygen) rather than skip unseen.
pytestmark = pytest.mark.skipif(
    shutil.which("ssh-keygen") is None and os.environ.get("CI") != "true",
    reason="needs ssh-keygen (Debian: openssh-client)",
)


def _key(directory: Path, name: str) -> Path:
    path = directory / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(path)], check=True
    )
    return path


@pytest.fixture
def keys(tmp_path) -> tuple[Path, Path, Path]:
    """(signing key, another key, allowed-signers file allowing only the first)."""
    keys = tmp_path / "keys"
    keys.mkdir()
    mine, other = _key(keys, "mine"), _key(keys, "other")
    public = " ".join(Path(f"{mine}.pub").read_text().split()[:2])
    allowed = keys / "allowed_signers"
    allowed.write_text(f"rearrival@localhost {public}\n")
    return mine, other, allowed


@pytest.fixture
def repo(tmp_path, no_git_identity) -> git.Repo:
    return git.Repo.init(tmp_path / "repo")


def _study(repo: git.Repo, tmp_path: Path, first: Signing | None, second: Signing | None):
    """Register study 'grid' signed with ``first``, seal one run signed with ``second``."""
    top = Path(repo.working_tree_dir)
    record = register(top, "grid", {"p.json": {"ratio": 0.97}}, message="p", signing=first)
    run = top / "results" / "runs" / "grid" / "n6_r0" / "baseline-wait"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"prereg": record.manifest_entry()}))
    seal(top, "grid", [run.parent], tmp_path / "ledger.json", signing=second)
    return top / "results"


def test_signed_commits_pass_the_audit(repo, keys, tmp_path):
    mine, _, allowed = keys
    results = _study(repo, tmp_path, Signing(mine), Signing(mine))
    check = check_signatures(repo, allowed)
    assert [why for _, why in check.results] == [None, None]
    report = audit(repo.working_tree_dir, results, allowed_signers=allowed)
    assert report.ok, report.table()
    (row,) = [r for r in report.rows if r.run == "(signature)"]
    assert row.verdict == OK and row.reason.startswith("2 registration and ledger commit(s)")


def test_unsigned_and_wrongly_signed_commits_are_named(repo, keys, tmp_path):
    _, other, allowed = keys
    results = _study(repo, tmp_path, None, Signing(other))
    registration, ledger = (c.hexsha for c in reversed(list(repo.iter_commits("HEAD"))))
    report = audit(repo.working_tree_dir, results, allowed_signers=allowed)
    reasons = {r.run: r.reason for r in report.violations}
    assert reasons[f"(signature) registration {registration[:12]}"].startswith(
        f"registration commit {registration[:12]} unsigned"
    )
    wrong = reasons[f"(signature) ledger {ledger[:12]}"]
    assert wrong.startswith(f"ledger commit {ledger[:12]} signed by a key {allowed} does not allow")
    assert all(r.verdict == VIOLATION for r in report.rows if r.run.startswith("(signature)"))


def test_cli_audit_allowed_signers(repo, keys, tmp_path):
    mine, _, allowed = keys
    results = _study(repo, tmp_path, Signing(mine), None)
    args = ["audit", "--repo", repo.working_tree_dir, "--results", str(results)]
    runner = CliRunner()
    assert runner.invoke(app, args).exit_code == 0  # without the file, signatures are not asked
    dirty = runner.invoke(app, [*args, "--allowed-signers", str(allowed), "--violations-only"])
    assert dirty.exit_code == 1
    assert "(signature) ledger" in dirty.output and "unsigned" in dirty.output


def test_a_missing_key_or_signers_file_is_one_line(repo, tmp_path):
    with pytest.raises(PreregError, match=r"signing\.key .*no such file") as caught:
        Signing(tmp_path / "absent")
    assert "\n" not in str(caught.value)
    with pytest.raises(SignatureError, match="no such allowed-signers file"):
        check_signatures(repo, tmp_path / "absent")


def test_config_signing_key_resolves_against_the_working_directory(tmp_path, monkeypatch):
    """Like every path of the config (the README's rule; issue 29: it resolved against
    the config file's directory): the directory the command runs in."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    raw = yaml.safe_load((REPO / ".test" / "config" / "config.yaml").read_text())
    config = tmp_path / "conf" / "config.yaml"
    config.parent.mkdir()
    config.write_text(yaml.safe_dump(raw))
    plain = load_study_config(config)
    assert (plain.witness, plain.signing_key) == (None, None)  # absent by default
    raw |= {"signing": {"key": "keys/id_ed25519"}, "witness": {"remote": "git://h/w.git"}}
    config.write_text(yaml.safe_dump(raw))
    cfg = load_study_config(config)
    assert cfg.signing_key == work / "keys" / "id_ed25519"
    assert cfg.witness == "git://h/w.git"


def test_a_witness_without_a_remote_is_refused_naming_the_key(tmp_path):
    from rearrival.config.errors import StudyConfigError

    raw = yaml.safe_load((REPO / ".test" / "config" / "config.yaml").read_text())
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(raw | {"witness": {"url": "git://h/w.git"}}))
    with pytest.raises(StudyConfigError, match=r"witness\.url is not a key of witness; use remote"):
        load_study_config(config)


def test_cli_prereg_signs_with_the_given_key(repo, keys, tmp_path):
    mine, _, allowed = keys
    prepared = tmp_path / "predictions.json"
    prepared.write_text('{"ratio": 0.97}\n')
    args = ["prereg", "grid", "--files", str(prepared), "--repo", repo.working_tree_dir]
    done = CliRunner().invoke(app, [*args, "--signing-key", str(mine)])
    assert done.exit_code == 0, done.output
    assert [why for _, why in check_signatures(repo, allowed).results] == [None]
