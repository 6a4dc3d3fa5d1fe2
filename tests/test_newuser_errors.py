"""Bad input a new user gives, each one line naming it and the fix (issue 36 item 7):
run through the real console entry point, as a user's shell would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CLI = str(Path(sys.executable).with_name("rearrival"))
REPO = Path(__file__).resolve().parents[1]


def rearrival(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = os.environ | {"COLUMNS": "100"}
    return subprocess.run(
        [CLI, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def one_error_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rearrival: error: "), done.stderr
    return lines[0]


def test_a_misspelled_profile_name_gets_did_you_mean() -> None:
    line = one_error_line(rearrival("advise", "--profile", "publshed"))
    assert "did you mean published?" in line and "calibrate --out" not in line


def test_a_misspelled_vllm_profile_name_gets_did_you_mean() -> None:
    line = one_error_line(rearrival("advise", "--substrate", "vllm", "--profile", "gpu-templte"))
    assert "did you mean gpu-template?" in line and "cannot read it" not in line


def test_a_misspelled_profile_key_gets_did_you_mean(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        (REPO / "config" / "config.yaml")
        .read_text()
        .replace("profile: calibrated", "profile: calibrate")
    )
    line = one_error_line(rearrival("advise", "--config", str(config)))
    assert "did you mean calibrated?" in line


def test_an_rbln_verb_given_a_vllm_profile_says_so() -> None:
    vllm = REPO / "src/rearrival/data/profile_vllm_tiny_qwen3_cpu.yaml"
    line = one_error_line(rearrival("advise", "--profile", str(vllm)))
    assert "a vLLM profile (substrate: vllm)" in line and "--substrate vllm" in line
    assert "decode.bucket_cost_ms" not in line


def test_from_trace_on_otlp_json_points_to_from_otel(tmp_path: Path) -> None:
    spans = tmp_path / "spans.json"
    spans.write_text(json.dumps({"resourceSpans": []}) + "\n")
    line = one_error_line(rearrival("plans", "from-trace", str(spans), "--out", str(tmp_path)))
    assert "rearrival plans from-otel" in line


@pytest.mark.parametrize(
    ("verb", "args", "words"),
    [
        ("advise", ("--workers", "0"), "'--workers'"),
        ("advise", ("--workrs", "1"), "Possible options: --workers"),
        ("plans from-trace", (), "Missing argument"),
    ],
)
def test_option_errors_are_one_line_not_clicks_box(verb, args, words) -> None:
    line = one_error_line(rearrival(*verb.split(), *args))
    assert words in line and f"(see `rearrival {verb} --help`)" in line


def test_help_shows_no_module_path_and_no_workflow_option() -> None:
    assert "rearrival.commands" not in rearrival("--help").stdout
    assert "--values" not in rearrival("search", "--help").stdout


def test_simulate_option_errors_name_options_not_internals(tmp_path: Path) -> None:
    """Issue 36: `simulate --buckets 4,2` said "SimConfig fields 'buckets'/'batch_size'"."""
    line = one_error_line(rearrival("simulate", "/dev/null", "--buckets", "4,2", cwd=tmp_path))
    assert line.startswith("rearrival: error: --buckets, --batch-size: buckets [4, 2]")
    assert "SimConfig" not in line
