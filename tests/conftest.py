"""Shared fixtures: small hand-made plans that every area's tests can run quickly, and the
small CI study run once per session through `snakemake all` for every module that
inspects a finished study (tests/test_pipeline.py, tests/test_slurm_cluster.py)."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rearrival.model.plans.plan import Plan, PlanMeta, Session

REPO = Path(__file__).resolve().parents[1]
CONFIG_FILE = REPO / "config" / "config.yaml"
# The public TraceLab sample, shipped unchanged with the repository (data/tracelab/README.md).
TRACELAB_SAMPLE = REPO / "data" / "tracelab" / "round_trace.example.jsonl"


def random_plan(
    rng: random.Random,
    n: int,
    *,
    max_gen: int = 40,
    max_wait_s: float = 2.0,
    zero_wait_share: float = 0.2,
) -> Plan:
    """A plan with short generations so step-by-step references stay fast in tests."""
    sessions = []
    for i in range(n):
        wait = 0.0 if rng.random() < zero_wait_share else rng.uniform(0.0, max_wait_s)
        sessions.append(
            Session(
                session=i,
                prompt_tokens=rng.randint(1, 1600),
                gen_tokens=rng.randint(1, max_gen),
                followup_gen_tokens=rng.randint(1, max_gen),
                appended_tokens=8,
                tool_wait_s=wait,
                tool_name="aggregate",
            )
        )
    return Plan(tuple(sessions), PlanMeta(seed=None, n=n))


@pytest.fixture
def make_random_plan():
    return random_plan


@pytest.fixture
def small_plan() -> Plan:
    """Four sessions with paper-sized prompts and short generations."""
    return random_plan(random.Random(7), 4, max_gen=24)


GIT_IDENTITY_VARIABLES = (
    "GIT_CONFIG_GLOBAL",
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
    "GIT_DIR",
    "GIT_WORK_TREE",
    "EMAIL",
)


@pytest.fixture
def no_git_identity(tmp_path, monkeypatch):
    """An empty HOME and no git identity from the machine: the pipeline must set its own."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for variable in GIT_IDENTITY_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    return home


def config_with_search(tmp_path, search: dict):
    """The shipped study definition with a (small) search section swapped in."""
    raw = yaml.safe_load(CONFIG_FILE.read_text())
    raw["search"] = search
    raw["profile"] = "published"  # no calibration stage has run in a test's tmp directory
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


# --- the workflow end to end on the small CI study (.test/config/config.yaml) ---------------

BIN = Path(sys.executable).parent
WORKFLOW_FILES = ("Snakefile", "rules", "envs", "config/schema.yaml", "profiles")


def workflow_env(home: Path) -> dict[str, str]:
    """No machine git identity leaks in: the pipeline must configure its own."""
    return os.environ | {
        "PATH": f"{BIN}:{os.environ['PATH']}",
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "XDG_CONFIG_HOME": str(home / ".config"),
    }


def git_commit_all(work: Path, message: str) -> None:
    subprocess.run(["git", "-C", str(work), "add", "-A"], check=True)
    identity = ["-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "-C", str(work), *identity, "commit", "-qm", message], check=True)


def workflow_repo(tmp: Path, config: dict) -> Path:
    """The workflow copied into a scratch git repository with ``config`` as its study
    definition: the study commits its own preregistration records, and the project
    history must never hold them."""
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
    git_commit_all(work, "workflow")
    return work


def snakemake(work: Path, home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "snakemake"), "--cores", "2", *args],
        cwd=work,
        env=workflow_env(home),
        capture_output=True,
        text=True,
        timeout=900,
    )


def small_config() -> dict:
    return yaml.safe_load((REPO / ".test" / "config" / "config.yaml").read_text())


def job_counts(dry_run_output: str) -> dict[str, int]:
    """Rule -> job count from the 'Job stats' table of a snakemake dry run."""
    table = dry_run_output.split("Job stats:", 1)[1].split("total", 1)[0]
    rows = [line.split() for line in table.splitlines()[3:] if line.strip()]
    return {name: int(count) for name, count in rows}


def assert_same_run_records(replicate: Path, reference: Path) -> None:
    """A replicate run again holds the same record files with the same bytes as the
    reference, except the manifests (they name their repository's commits and times)."""
    records = sorted(p.relative_to(replicate) for p in replicate.rglob("*") if p.is_file())
    assert records == sorted(p.relative_to(reference) for p in reference.rglob("*") if p.is_file())
    for record in records:
        if record.name != "manifest.json":
            assert (replicate / record).read_bytes() == (reference / record).read_bytes(), record


@pytest.fixture(scope="session")
def finished_study(tmp_path_factory) -> tuple[Path, Path]:
    """The small study run once per session through `snakemake all`: (repository, HOME).

    Shared by every module that reads a finished study (the pipeline tests, and the
    Slurm tests as the local reference run), so it must stay as `snakemake all` left
    it: a test that edits or deletes anything works on a copy (tests/test_pipeline.py's
    ``study_copy``), and an edited config is put back before the test ends.
    """
    tmp = tmp_path_factory.mktemp("pipeline")
    home = tmp / "home"
    home.mkdir()
    work = workflow_repo(tmp, small_config())
    done = snakemake(work, home, "all")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return work, home


# `make test` runs two pytest-xdist workers with `--dist loadscope --no-loadscope-reorder`:
# each module is one unit of work, so a module-scoped fixture is set up once, and the
# modules that read the session's small study form a single unit, so the study is set up
# once and the Slurm module never runs beside itself. That unit is the longest, so it is
# collected first and starts at once. (pytest-xdist's xdist_group marks would say the
# same, but its loadgroup mode cannot rename node ids under pytest 9.)
STUDY_MODULES = {"test_pipeline", "test_slurm_cluster"}


def _study_first(item: pytest.Item) -> bool:
    return item.path.stem not in STUDY_MODULES


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_study_first)  # a stable sort: every other order is kept


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Scope by module, the study modules being one scope (see above)."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class StudyScopeScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "study" if Path(module).stem in STUDY_MODULES else module

    return StudyScopeScheduling(config, log)
