"""The small CI study on a real Slurm cluster through `--profile profiles/slurm`.

A throwaway single-node cluster (scripts/slurm/cluster.sh) is brought up for this module
and torn down after it. Without Slurm on the machine the module skips, except under CI
(CI=true), where a cluster that cannot start is a failure. The workflow repositories are
built with the helpers of tests/conftest.py, whose local run of the same study
(``finished_study``, run once per session and shared with tests/test_pipeline.py) is the
reference every Slurm result must match byte for byte.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from conftest import (
    BIN,
    REPO,
    assert_same_run_records,
    job_counts,
    small_config,
    snakemake,
    workflow_env,
    workflow_repo,
)

from rearrival.workflow.cluster import ENV_ACCOUNT, ENV_DEVICE_GRES, ENV_PARTITION

CLUSTER = REPO / "scripts" / "slurm" / "cluster.sh"
PARTITION = "rearrival"  # the test cluster's one partition (cluster.sh)
SUBMITTED = re.compile(r"Job \d+ has been submitted with SLURM jobid (\d+) \(log: (\S+)\)\.")
LOCAL_RULES = {"preregister", "seal"}  # git commits stay on the submitting host
# What the module runs through Slurm: two studies' decisions (one of them through the
# sharded search) and the injection, so every kind of stage but the report is an sbatch
# job; 22 jobs instead of the 47 of `all`, whose every output the local run covers.
STUDIES = ("mechanisms", "validation")
TARGETS = (
    *(f"results/decisions/{study}.csv" for study in STUDIES),
    "results/injection/gaps.parquet",
)
IN_CI = os.environ.get("CI") == "true"
# Each Slurm job starts snakemake twice (sbatch step, srun step) before its command: the
# small study takes about 4 minutes on a loaded 2-core machine, over the 300 s default.
pytestmark = pytest.mark.timeout(900)


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"CI must run the Slurm cluster test: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def cluster():
    """The test cluster, up for this module only; site settings point the profile at it."""
    if shutil.which("slurmctld") is None or shutil.which("sbatch") is None:
        _unavailable(
            "Slurm is not installed (no slurmctld/sbatch on PATH): apt-get install slurm-wlm munge"
        )
    if os.geteuid() != 0:
        _unavailable("the throwaway Slurm cluster runs its daemons as root")
    up = subprocess.run([str(CLUSTER), "up"], capture_output=True, text=True, timeout=120)
    if up.returncode != 0:
        subprocess.run([str(CLUSTER), "down"], capture_output=True, timeout=120)
        _unavailable(f"the test cluster did not start: {up.stderr.strip()}")
    site = {ENV_PARTITION: PARTITION, ENV_ACCOUNT: "", ENV_DEVICE_GRES: "rbln:1"}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in site.items():
            patch.setenv(name, value)
        yield
    down = subprocess.run([str(CLUSTER), "down"], capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stderr
    assert not Path("/etc/slurm/slurm.conf").exists()


def test_cluster_up_is_idempotent(cluster):
    again = subprocess.run([str(CLUSTER), "up"], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "already up" in again.stdout
    status = subprocess.run([str(CLUSTER), "status"], capture_output=True, timeout=60)
    assert status.returncode == 0


def _slurm(
    work: Path, home: Path, *args: str, env: dict | None = None
) -> subprocess.CompletedProcess:
    """`snakemake --profile profiles/slurm ...` as a user would type it."""
    if env is None:
        return snakemake(work, home, "--profile", "profiles/slurm", *args)
    return subprocess.run(
        [str(BIN / "snakemake"), "--profile", "profiles/slurm", *args],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def _submissions(output: str) -> dict[str, list[tuple[int, Path]]]:
    """Rule -> (Slurm job id, Slurm log) of every job the run submitted with sbatch."""
    jobs: dict[str, list[tuple[int, Path]]] = {}
    for job_id, log in SUBMITTED.findall(output):
        parts = Path(log).parts
        rule = parts[parts.index("slurm_logs") + 1].removeprefix("rule_")
        jobs.setdefault(rule, []).append((int(job_id), Path(log)))
    return jobs


def _interval(job_id: int) -> tuple[datetime, datetime]:
    """Start and end of a finished job, as the controller remembers it (MinJobAge)."""
    shown = subprocess.run(
        ["scontrol", "show", "job", str(job_id)], capture_output=True, text=True, check=True
    ).stdout
    fields = dict(re.findall(r"(StartTime|EndTime)=(\S+)", shown))
    return (datetime.fromisoformat(fields["StartTime"]), datetime.fromisoformat(fields["EndTime"]))


def _overlap(a: int, b: int) -> bool:
    (start_a, end_a), (start_b, end_b) = _interval(a), _interval(b)
    return start_a < end_b and start_b < end_a


@pytest.fixture(scope="module")
def slurm_study(cluster, tmp_path_factory) -> tuple[Path, Path, str]:
    """The small study's TARGETS run once through the Slurm profile on the test cluster."""
    tmp = tmp_path_factory.mktemp("slurm")
    home = tmp / "home"
    home.mkdir()
    work = workflow_repo(tmp, small_config())
    done = _slurm(work, home, *TARGETS)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return work, home, done.stdout + done.stderr


def test_every_job_went_through_sbatch(slurm_study):
    _, _, output = slurm_study
    planned = job_counts(output)
    submitted = _submissions(output)
    assert {rule: len(jobs) for rule, jobs in submitted.items()} == {
        rule: count for rule, count in planned.items() if rule not in LOCAL_RULES
    }
    ids = [job_id for jobs in submitted.values() for job_id, _ in jobs]
    assert len(set(ids)) == len(ids)
    states = subprocess.run(
        ["squeue", "--noheader", "--states=all", "--format=%i|%T"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    state_of = dict(line.split("|") for line in states.split())
    assert all(state_of[str(job_id)] == "COMPLETED" for job_id in ids)
    for rule, jobs in submitted.items():  # each job's own Slurm log, kept by the profile
        for job_id, log in jobs:
            assert log.name == f"{job_id}.log"
            text = log.read_text()
            assert "--executor slurm-jobstep" in text and f"rule {rule}:" in text, log


def test_search_shards_ran_as_separate_slurm_jobs(slurm_study):
    _, _, output = slurm_study
    shards = _submissions(output)["search_shard"]
    assert len(shards) == small_config()["search"]["shards"] == 2
    assert len({job_id for job_id, _ in shards}) == 2
    # the plugin names a job's log folder by its wildcard values: search=search, shard=N
    assert {log.parent.name for _, log in shards} == {"search_0", "search_1"}


def test_results_are_byte_identical_to_a_local_run(slurm_study, finished_study):
    """Plans, predictions, search shards and merge, run records, channel tables and
    decisions: the executor changes where jobs run, never what they produce."""
    work, _, _ = slurm_study
    local, _ = finished_study
    # manifests, prereg records and ledgers name this repository's commits and times
    produced = sorted(
        p.relative_to(work)
        for p in (work / "results").rglob("*")
        if p.is_file() and p.name != "manifest.json" and not {"prereg", "ledger"} & set(p.parts)
    )
    stages = {p.parts[1] for p in produced}
    assert {"plans", "predictions", "search", "runs", "channels", "decisions"} <= stages
    assert Path("results/search/shards/shard_1.parquet") in produced
    for relative in produced:
        assert (work / relative).read_bytes() == (local / relative).read_bytes(), relative


def test_audit_passes_and_prereg_commits_are_serial(slurm_study):
    work, home, output = slurm_study
    audit = subprocess.run(
        [str(BIN / "rearrival"), "audit", "--repo", ".", "--results", "results"],
        cwd=work,
        env=workflow_env(home),
        capture_output=True,
        text=True,
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert "0 violation" in audit.stdout
    assert "preregister" not in _submissions(output)
    history = subprocess.run(
        ["git", "-C", str(work), "log", "--format=%P|%s"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    prereg = [line for line in history if "prereg(" in line]
    assert len(prereg) == len(STUDIES)
    assert all(len(line.split("|")[0].split()) == 1 for line in history[:-1])  # linear


def test_second_invocation_does_nothing(slurm_study):
    work, home, _ = slurm_study
    again = _slurm(work, home, *TARGETS)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "Nothing to be done" in again.stdout + again.stderr
    assert not SUBMITTED.search(again.stdout + again.stderr)


def test_real_device_runs_never_overlap(slurm_study, tmp_path):
    """Emulated runs hold no device, so on the two-core node two of them run at once;
    given the device's generic resource (what backend rbln requests) they queue."""
    work, home, output = slurm_study
    runs = [job_id for job_id, _ in _submissions(output)["run_replicate"]]
    assert any(_overlap(a, b) for a in runs for b in runs if a < b)
    copy = tmp_path / "study"
    shutil.copytree(work, copy, symlinks=True)
    targets = ["results/runs/mechanisms/n4_r0", "results/runs/mechanisms/n4_r1"]
    for target in targets:
        shutil.rmtree(copy / target)
    held = _slurm(copy, home, *targets, "--set-resources", "run_replicate:gres='rbln:1'")
    assert held.returncode == 0, held.stdout[-3000:] + held.stderr[-3000:]
    first, second = (
        job_id for job_id, _ in _submissions(held.stdout + held.stderr)["run_replicate"]
    )
    assert not _overlap(first, second)


def test_rbln_backend_requests_the_site_device_gres(tmp_path):
    """Which jobs hold the device is decided by the workflow (device=1 jobs), the gres
    name by the site (REARRIVAL_SLURM_DEVICE_GRES); no cluster needed to see it."""
    home = tmp_path / "home"
    home.mkdir()
    config = small_config() | {"backend": "rbln"}
    work = workflow_repo(tmp_path, config)
    env = workflow_env(home) | {ENV_DEVICE_GRES: "rbln:4"}
    dry = subprocess.run(
        [str(BIN / "snakemake"), "-n", "--cores", "2", "all"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert dry.returncode == 0, dry.stdout[-2000:] + dry.stderr[-2000:]
    blocks = re.findall(r"rule (\w+):\n(?:.*\n)*?\s+resources: (.*)", dry.stdout)
    gres = {rule: "gres=rbln:4" in resources for rule, resources in blocks}
    assert gres["run_replicate"] and gres["compile"] and gres["calibrate"]
    assert "injection" not in gres  # no rbln driver: left out, never run on the emulator
    assert not gres["plans"] and not gres["search_shard"]


def test_unknown_partition_is_one_line_before_any_submission(cluster, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    work = workflow_repo(tmp_path, small_config())
    env = workflow_env(home) | {ENV_PARTITION: "nonexistent"}
    result = _slurm(work, home, "all", env=env)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert (
        f"Slurm partition 'nonexistent' ({ENV_PARTITION}) does not exist; this "
        f"cluster has: {PARTITION}"
    ) in output.splitlines()
    assert not SUBMITTED.search(output)


def test_controller_down_is_one_line(cluster, tmp_path):
    """A slurm.conf naming a port no controller listens on, as when slurmctld is down."""
    home = tmp_path / "home"
    home.mkdir()
    work = workflow_repo(tmp_path, small_config())
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        re.sub(
            r"SlurmctldPort=\d+", "SlurmctldPort=6899", Path("/etc/slurm/slurm.conf").read_text()
        )
    )
    result = _slurm(work, home, "all", env=workflow_env(home) | {"SLURM_CONF": str(conf)})
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert any(
        line.startswith("the Slurm controller is not reachable (") for line in output.splitlines()
    ), output[-2000:]
    assert not SUBMITTED.search(output)


def test_no_slurm_is_one_line(cluster, tmp_path):
    """PATH without Slurm's tools, as on a machine where Slurm is not installed."""
    home = tmp_path / "home"
    home.mkdir()
    work = workflow_repo(tmp_path, small_config())
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("git", "sh", "bash", "which"):  # what any machine has; the plugin needs which
        (tools / tool).symlink_to(shutil.which(tool))
    result = _slurm(work, home, "all", env=workflow_env(home) | {"PATH": f"{BIN}:{tools}"})
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert any(
        line.startswith("Slurm is not installed here (sbatch, squeue")
        for line in output.splitlines()
    ), output[-2000:]


def _running(rule: str, deadline_s: float) -> int:
    """The Slurm id of the first job of a rule seen running (comment names the rule)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        queue = subprocess.run(
            ["squeue", "--noheader", "--format=%i|%T|%k"], capture_output=True, text=True
        ).stdout
        for line in queue.splitlines():
            job_id, state, comment = line.split("|", 2)
            if state == "RUNNING" and comment.startswith(f"rule_{rule}"):
                return int(job_id)
        time.sleep(0.2)
    raise AssertionError(f"no {rule} job ran within {deadline_s} s")


def test_cancelled_job_is_named_unused_and_only_missing_jobs_rerun(slurm_study, tmp_path):
    work, home, _ = slurm_study
    copy = tmp_path / "study"
    shutil.copytree(work, copy, symlinks=True)
    target = copy / "results" / "runs" / "mechanisms" / "n8_r1"
    relative = Path("results/decisions/mechanisms.csv")
    for downstream in ("results/channels/mechanisms.parquet", relative):
        (copy / downstream).unlink()
    shutil.rmtree(target)
    job = subprocess.Popen(
        [str(BIN / "snakemake"), "--profile", "profiles/slurm", str(relative)],
        cwd=copy,
        env=workflow_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    slurm_id = _running("run_replicate", 120)
    subprocess.run(["scancel", str(slurm_id)], check=True)
    output, _ = job.communicate(timeout=300)
    assert job.returncode != 0
    assert f"SLURM-job '{slurm_id}' failed, SLURM status is: 'CANCELLED'." in output
    assert not target.exists(), "a cancelled run must not leave its replicate directory"
    dry = snakemake(copy, home, "-n", str(relative))
    assert job_counts(dry.stdout + dry.stderr) == {
        "run_replicate": 1,
        "seal": 1,
        "channels": 1,
        "decide": 1,
    }
    redo = _slurm(copy, home, str(target.relative_to(copy)))  # the cancelled job alone
    assert redo.returncode == 0, redo.stdout[-3000:] + redo.stderr[-3000:]
    assert set(_submissions(redo.stdout + redo.stderr)) == {"run_replicate"}
    reference = work / target.relative_to(copy)
    assert_same_run_records(target, reference)


def test_profile_names_no_site_partition():
    """Partition, account and device gres come from the environment, not the profile."""
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    defaults = profile["default-resources"]
    assert defaults["slurm_partition"] == f"'${ENV_PARTITION}'"
    assert defaults["slurm_account"] == f"'${ENV_ACCOUNT}'"
    assert "set-resources" not in profile
    assert profile["slurm-status-command"] == "squeue"
