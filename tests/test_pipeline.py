"""The workflow end to end on the small CI study (.test/config/config.yaml).

The workflow is copied into a scratch git repository, because it commits its own
preregistration records: the project history must never hold a study's records.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
WORKFLOW_FILES = ("Snakefile", "rules", "envs", "config/schema.yaml", "profiles")


def _env(home: Path) -> dict[str, str]:
    """No machine git identity leaks in: the pipeline must configure its own."""
    return os.environ | {"PATH": f"{BIN}:{os.environ['PATH']}", "HOME": str(home),
                         "GIT_CONFIG_NOSYSTEM": "1", "XDG_CONFIG_HOME": str(home / ".config")}


def _workflow_repo(tmp: Path, config: dict) -> Path:
    work = tmp / "study"
    for name in WORKFLOW_FILES:
        source, target = REPO / name, work / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            shutil.copy(source, target)
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    subprocess.run(["git", "-C", str(work), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-qm", "workflow"], check=True)
    return work


def _snakemake(work: Path, home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "snakemake"), "--cores", "2", *args], cwd=work,
                          env=_env(home), capture_output=True, text=True, timeout=900)


def small_config() -> dict:
    return yaml.safe_load((REPO / ".test" / "config" / "config.yaml").read_text())


@pytest.fixture(scope="module")
def finished_study(tmp_path_factory) -> tuple[Path, Path]:
    """The small study run once through `snakemake all` for the tests below."""
    tmp = tmp_path_factory.mktemp("pipeline")
    home = tmp / "home"
    home.mkdir()
    work = _workflow_repo(tmp, small_config())
    done = _snakemake(work, home, "all")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return work, home


def test_all_runs_every_study_and_audit_passes(finished_study):
    work, home = finished_study
    for study in small_config()["studies"]:
        assert (work / "results" / "decisions" / f"{study}.csv").exists()
    assert (work / "reports" / "report.html").exists()
    audit = subprocess.run([str(BIN / "rearrival"), "audit", "--repo", ".", "--results",
                            "results"], cwd=work, env=_env(home), capture_output=True,
                           text=True)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert "0 violation" in audit.stdout


def test_prereg_commits_precede_runs_and_identity_is_local(finished_study):
    work, _ = finished_study
    log = subprocess.run(["git", "-C", str(work), "log", "--format=%an|%s"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    prereg = [line for line in log if "prereg(" in line]
    # one registration per study plus the amendment of validation by the re-measurement
    assert len(prereg) == len(small_config()["studies"]) + 1
    assert all(line.startswith("rearrival pipeline|") for line in prereg)


def test_second_run_has_nothing_to_do(finished_study):
    work, home = finished_study
    dry = _snakemake(work, home, "-n", "all")
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert "Nothing to be done" in dry.stdout + dry.stderr


def _job_counts(dry_run_output: str) -> dict[str, int]:
    """Rule -> job count from the 'Job stats' table of a snakemake dry run."""
    table = dry_run_output.split("Job stats:", 1)[1].split("total", 1)[0]
    rows = [line.split() for line in table.splitlines()[3:] if line.strip()]
    return {name: int(count) for name, count in rows}


def test_killed_run_leaves_no_output_and_only_it_reruns(finished_study):
    """As if the first `snakemake all` died inside one run job: nothing downstream of it
    exists yet, and the killed job must leave nothing a decision could read."""
    work, home = finished_study
    target = work / "results" / "runs" / "mechanisms" / "n8_r1"
    for downstream in ("results/channels/mechanisms.parquet",
                       "results/decisions/mechanisms.csv", "reports/report.html"):
        (work / downstream).unlink()
    shutil.rmtree(target)
    command = [str(BIN / "rearrival"), "study", "run", "--study", "mechanisms", "--n", "8",
               "--replicate", "1", "--plans", "results/plans/mechanisms", "--out",
               str(target)]
    job = subprocess.Popen(command, cwd=work, env=_env(home), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while (not list(target.parent.glob(f".{target.name}.*.tmp"))
           and time.monotonic() < deadline and job.poll() is None):
        time.sleep(0.005)
    assert job.poll() is None, "the run finished before it could be killed"
    job.send_signal(signal.SIGKILL)
    job.wait()
    assert not target.exists(), "a killed run must not leave its replicate directory"
    dry = _snakemake(work, home, "-n", "all")
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert _job_counts(dry.stdout + dry.stderr) == {
        "run_replicate": 1, "channels": 1, "decide": 1, "report": 1, "all": 1}
    redo = _snakemake(work, home, "all")
    assert redo.returncode == 0, redo.stderr[-3000:]
    assert (target / "baseline-wait" / "manifest.json").exists()


def test_config_errors_name_the_key(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    broken = small_config()
    broken["backend"] = "gpu"
    work = _workflow_repo(tmp_path, broken)
    result = _snakemake(work, home, "-n", "all")
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "instance['backend']" in output and "gpu" in output


def test_bucket_set_without_batch_size_is_refused(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    broken = small_config()
    broken["configurations"]["grid6"]["buckets"] = [1, 2, 4, 6]
    work = _workflow_repo(tmp_path, broken)
    result = _snakemake(work, home, "-n", "all")
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "grid6.buckets" in output and "batch_size 8" in output


@pytest.mark.slow
def test_full_study_end_to_end(tmp_path):
    """The default study definition, every study and the full search (a few minutes)."""
    home = tmp_path / "home"
    home.mkdir()
    work = _workflow_repo(tmp_path, yaml.safe_load((REPO / "config" / "config.yaml").read_text()))
    done = _snakemake(work, home, "all")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    audit = subprocess.run([str(BIN / "rearrival"), "audit"], cwd=work, env=_env(home),
                           capture_output=True, text=True)
    assert audit.returncode == 0, audit.stdout[-3000:]
    dry = _snakemake(work, home, "-n", "all")
    assert "Nothing to be done" in dry.stdout + dry.stderr


def test_same_config_and_seeds_give_the_same_bytes(finished_study, tmp_path):
    """A second study from scratch (new repository, new commits, new times) reproduces the
    plans, predictions, run records and decisions byte for byte."""
    work, _ = finished_study
    home = tmp_path / "home"
    home.mkdir()
    again = _workflow_repo(tmp_path, small_config())
    done = _snakemake(again, home, "results/decisions/grid.csv")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    produced = sorted(p.relative_to(again) for p in (again / "results").rglob("*")
                      if p.is_file() and p.name != "manifest.json"
                      and "prereg" not in p.parts)
    assert any(p.name == "requests.parquet" for p in produced)
    for relative in produced:
        assert (again / relative).read_bytes() == (work / relative).read_bytes(), relative
