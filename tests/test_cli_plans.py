"""CLI verbs of the plans area: plan, tools build, tools show (docs/DESIGN.md §2)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TRACELAB_SAMPLE as TRACE
from typer.testing import CliRunner

from rearrival.cli import app
from rearrival.model.plans.plan import load_plan
from rearrival.model.plans.plangen import generate_plan
from rearrival.model.plans.tools import build_summary_from_trace

CLI = Path(sys.executable).with_name("rearrival")
runner = CliRunner()


def _plan_args(out: Path, *extra: str) -> list[str]:
    return ["plan", "--n", "6", "--study-seed", "9", "--replicate", "1", "--out", str(out), *extra]


@pytest.mark.parametrize("suffix", [".parquet", ".json"])
def test_plan_writes_the_generated_plan(tmp_path: Path, suffix: str) -> None:
    out = tmp_path / f"plan{suffix}"
    result = runner.invoke(app, _plan_args(out, "--block", "2"))
    assert result.exit_code == 0, result.output
    expected = generate_plan(6, study_seed=9, replicate=1, block=2)
    assert load_plan(out) == expected
    assert result.output.split() == [
        str(out),
        f"sha256={expected.sha256()}",
        f"cap_fraction={expected.meta.cap_fraction:.4f}",
    ]


def test_plan_variant_and_tool_table(tmp_path: Path) -> None:
    summary = tmp_path / "summary.json"
    summary.write_text(
        json.dumps({"tool_by_name": {"Read": {"n": 5, "p50": 10, "p90": 50, "p99": 90}}})
    )
    out = tmp_path / "control.parquet"
    result = runner.invoke(
        app, _plan_args(out, "--variant", "control", "--tool-table", str(summary))
    )
    assert result.exit_code == 0, result.output
    plan = load_plan(out)
    assert plan.meta.variant == "control" and "summary.json" in plan.meta.tool_table
    assert {s.tool_wait_s for s in plan.sessions} == {0.0}
    assert {s.tool_name for s in plan.sessions} == {"Read"}


def test_tools_build_writes_summary(tmp_path: Path) -> None:
    out = tmp_path / "summary.json"
    result = runner.invoke(app, ["tools", "build", str(TRACE), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text()) == build_summary_from_trace(TRACE)
    assert "6 tools, 19 calls" in result.output


def test_tools_show_prints_table_and_shares(tmp_path: Path) -> None:
    result = runner.invoke(app, ["tools", "show", "--seed", "1", "--draws", "20000"])
    assert result.exit_code == 0, result.output
    assert "AGGREGATE" in result.output
    assert "aggregate" in result.output and "743819" in result.output
    line = result.output.strip().splitlines()[-1]
    assert "share < 1 s" in line and "capped at 60 s" in line


def _run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), *args], capture_output=True, text=True, timeout=60)


def _assert_one_line_error(proc: subprocess.CompletedProcess, fragment: str) -> None:
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rearrival: error:") and fragment in lines[0]


def test_bad_inputs_give_one_line_errors(tmp_path: Path) -> None:
    _assert_one_line_error(
        _run_cli(
            *_plan_args(tmp_path / "p.parquet")[:2], "-3", *_plan_args(tmp_path / "p.parquet")[3:]
        ),
        "--n",
    )
    _assert_one_line_error(_run_cli(*_plan_args(tmp_path / "p.csv")), "--out")
    bad = tmp_path / "summary.json"
    bad.write_text('{"tool_by_name": {"Bash": {"n": 3, "p50": 1}}}')
    _assert_one_line_error(_run_cli("tools", "show", str(bad)), "'p90'")
    cut = tmp_path / "trace.jsonl.gz"
    data = gzip.compress(TRACE.read_bytes() * 3)
    cut.write_bytes(data[: len(data) // 2])
    _assert_one_line_error(
        _run_cli("tools", "build", str(cut), "--out", str(tmp_path / "s.json")), str(cut)
    )
    assert not (tmp_path / "s.json").exists() and not (tmp_path / "p.csv").exists()
