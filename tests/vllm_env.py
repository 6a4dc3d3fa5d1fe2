"""What the vLLM test modules share: the vLLM environment or a skip (a failure under CI),
small plans, and a step cost for channel A with known coefficients."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rearrival.model.plans.plan import MultiRoundSession, Plan, PlanMeta, Round, Session
from rearrival.vllm_env import BUILD_HINT, vllm_python

IN_CI = os.environ.get("CI") == "true"
CLI = str(Path(sys.executable).with_name("rearrival"))
BLOCK = 32  # the CPU build's attention needs a multiple of 32
# A real server start is 40-90 s on two cores; a run on the tiny model a few seconds.
pytestmark_timeout = pytest.mark.timeout(900)


def require_vllm() -> Path:
    """The vLLM interpreter; without it the test skips, except under CI (CI=true), where
    .ci/run builds it and its absence is a failure."""
    python = vllm_python()
    if not python.is_file():
        message = f"no vLLM environment at {python}: {BUILD_HINT}"
        if IN_CI:
            pytest.fail(f"CI must run the vLLM tests: {message}")
        pytest.skip(message)
    return python


def two_round_plan() -> Plan:
    """Three sessions whose first prompts (300-700 tokens) arrive together, so the first
    prefills share steps and a chunk; each re-arrival resends its transcript + 8 tokens."""
    rows = [(300, 20, 10, 0.5), (420, 12, 6, 0.2), (700, 9, 5, 0.0)]
    return Plan(
        tuple(Session(i, p, g0, g1, 8, wait, "Bash") for i, (p, g0, g1, wait) in enumerate(rows)),
        PlanMeta(seed=11, n=len(rows)),
    )


def multi_round_plan() -> Plan:
    """Two staggered sessions of three rounds; every prompt fits one step's budget and
    the sessions never overlap in a prefill, so the context every step read is known."""
    return Plan(
        (
            MultiRoundSession(
                0, (Round(200, 6, 0.3), Round(40, 5, 0.3), Round(30, 4, 0.0)), start_s=0.0
            ),
            MultiRoundSession(
                1, (Round(150, 5, 0.2), Round(50, 6, 0.2), Round(20, 3, 0.0)), start_s=2.0
            ),
        ),
        PlanMeta(seed=12, n=2),
    )


class LinearStepCost:
    """A step cost with known coefficients (the vLLM profile's shape, docs/DESIGN.md §15)."""

    def __init__(self, base: float, decode: float, prefill: float, kv: float) -> None:
        self.base, self.decode, self.prefill, self.kv = base, decode, prefill, kv

    def step_s(self, decode_tokens: int, prefill_tokens: int, kv_tokens: int) -> float:
        return (
            self.base
            + self.decode * decode_tokens
            + self.prefill * prefill_tokens
            + self.kv * kv_tokens
        )


def cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CLI, *args], capture_output=True, text=True, timeout=timeout, env=os.environ.copy()
    )


def manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())
