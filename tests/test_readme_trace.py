"""The README's "Your own agent trace" commands run as written on a fresh checkout (the
config, no calibration, no results), with the TraceLab sample beside it, and what the
README says of their output holds (issue 29, items 2, 3 and 10)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, TRACELAB_SAMPLE

BIN = Path(sys.executable).parent
SECTION = "## Your own agent trace"
SAMPLE_PATH = "data/tracelab/round_trace.example.jsonl"


def readme_commands(heading: str = SECTION) -> list[list[str]]:
    """Every command of the section's ``sh``/``bash`` blocks, comments dropped."""
    text = (REPO / "README.md").read_text()
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(?:sh|bash)\n(.*?)```", section, flags=re.S)
    lines = [line for block in blocks for line in block.splitlines() if line.strip()]
    return [shlex.split(line, comments=True) for line in lines]


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A fresh clone's view: the repository's config and nothing it would have made
    (no results/, no calibration), with the shipped sample."""
    work = tmp_path / "repo"
    shutil.copytree(REPO / "config", work / "config")
    shutil.copytree(TRACELAB_SAMPLE.parent, work / "data" / "tracelab")
    return work


def run(work: Path, args: list[str]) -> subprocess.CompletedProcess:
    env = os.environ | {"PATH": f"{BIN}:{os.environ['PATH']}"}
    return subprocess.run(
        args, cwd=work, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_the_section_is_commands_on_the_shipped_sample() -> None:
    commands = readme_commands()
    assert len(commands) >= 4 and all(c[0] == "rearrival" for c in commands)
    assert any(SAMPLE_PATH in c for c in commands)
    # nothing is written outside results/, which git ignores
    for command in commands:
        for flag in ("--out", "--plans"):
            if flag in command:
                assert command[command.index(flag) + 1].startswith("results/"), command


def test_the_readme_commands_run_as_written_on_a_fresh_checkout(checkout: Path) -> None:
    done = [run(checkout, command) for command in readme_commands()]
    for command, result in zip(readme_commands(), done, strict=True):
        assert result.returncode == 0, (command, result.stderr[-2000:])
    assert {p.name for p in checkout.iterdir()} == {"config", "data", "results"}  # no plans/
    # the profile each verb used is named, and why: no calibration has run here
    search = done[1]
    assert "published constants" in search.stderr and "calibration" in search.stderr
    summary = json.loads((checkout / "results/trace/search/summary.json").read_text())
    assert summary["profile"]["name"] == "published"
    # what the README says of the sample started together
    assert "selected 10:1,2,10" in search.stdout
    assert "572 of 2,077 candidates score exactly the pick's" in search.stderr
    assert "Predicted saving of the pick: 4.68 %" in done[2].stdout
    # issue 36: --trace with the import's options gives the --plans answer
    assert "Predicted saving of the pick: 4.68 %" in done[3].stdout
    assert "**What-if:** --workload drawn" in done[4].stdout
    assert "rearrival rbln compile --model Qwen/Qwen3-4B --batch-size 10" in done[2].stdout


def test_the_vllm_sizing_commands_run_as_written(checkout: Path) -> None:
    """Issue 36: the section's commands named a vllm-profile.yaml nothing shipped."""
    commands = readme_commands("## Sizing KV for agents on vLLM")
    assert len(commands) == 3
    for command in commands:
        result = run(checkout, command)
        assert result.returncode == 0, (command, result.stderr[-2000:])
    assert "device TEMPLATE s" in result.stdout and "vllm serve Qwen/Qwen3-8B" in result.stdout


def test_the_sample_as_recorded_is_said_to_never_overlap(checkout: Path) -> None:
    """Without --time-origin zero the sample's sessions are 72 days apart."""
    scaled = ["--token-scale", "0.15", "--out", "results/first"]
    imported = run(checkout, ["rearrival", "plans", "from-trace", SAMPLE_PATH, *scaled])
    assert imported.returncode == 0, imported.stderr
    searched = run(
        checkout, ["rearrival", "search", "--plans", "results/first", "--out", "results/s"]
    )
    assert searched.returncode == 0, searched.stderr
    assert "all 2,077 candidates predict exactly the same cost" in searched.stderr
    assert "no two sessions of the 1 search input plans are ever in the system" in (searched.stderr)
