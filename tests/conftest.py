"""Shared fixtures: small hand-made plans that every area's tests can run quickly."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from rearrival.model.plans import Plan, PlanMeta, Session

CONFIG_FILE = Path(__file__).resolve().parents[1] / "config" / "config.yaml"
# The TraceLab sample is not part of the repository: it sits in ../shared beside it.
TRACELAB_SAMPLE = (
    Path(__file__).resolve().parents[2] / "shared/data/tracelab/round_trace.example.jsonl"
)


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
    import yaml

    raw = yaml.safe_load(CONFIG_FILE.read_text())
    raw["search"] = search
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path
