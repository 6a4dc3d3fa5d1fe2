"""The shipped vLLM GPU profile template (issue 36 item 4): every field says what it is
and that it is to be filled in from a calibration, the vLLM verbs run with it, and every
table of times priced with it says TEMPLATE."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import yaml
from conftest import TRACELAB_SAMPLE
from typer.testing import CliRunner

from rearrival.cli import app
from rearrival.model.cost.vllm_profile import (
    GPU_TEMPLATE,
    GPU_TEMPLATE_FILE,
    choose_vllm_profile,
    seconds_unit,
)

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]


def _numbers(tree: dict, prefix: str = ""):
    for key, value in tree.items():
        if isinstance(value, dict) and "value" in value:
            yield f"{prefix}{key}", value
        elif isinstance(value, dict):
            yield from _numbers(value, f"{prefix}{key}.")


def test_every_number_of_the_template_is_marked_fill_in() -> None:
    tree = yaml.safe_load(resources.files("rearrival.data").joinpath(GPU_TEMPLATE_FILE).read_text())
    assert tree["template"] is True and tree["device"] == "gpu"
    fields = dict(_numbers(tree))
    assert {"step_cost.base_s", "kv.bytes_per_token", "memory.device_gib"} <= set(fields)
    for name, entry in fields.items():
        assert entry["provenance"].startswith("TEMPLATE, fill in from"), name
        assert "ci" not in entry, name  # nothing was fitted
    profile = choose_vllm_profile(GPU_TEMPLATE)
    assert profile.template and profile.memory is not None
    assert "TEMPLATE profile" in profile.seconds_note()
    assert seconds_unit(profile.identity()) == "TEMPLATE s"


def test_the_readme_sizing_commands_run_with_the_template(tmp_path, monkeypatch) -> None:
    """The README's "Sizing KV for agents on vLLM" commands, as written (issue 36: they
    named a vllm-profile.yaml that nothing shipped)."""
    monkeypatch.chdir(tmp_path)
    config = ["--config", str(REPO / "config" / "config.yaml")]
    trace = str(TRACELAB_SAMPLE)
    imported = runner.invoke(
        app,
        [
            "plans",
            "from-trace",
            trace,
            "--out",
            "results/together",
            "--token-scale",
            "0.15",
            "--time-origin",
            "zero",
        ],
    )
    assert imported.exit_code == 0, imported.output
    searched = runner.invoke(
        app,
        [
            "search",
            "--substrate",
            "vllm",
            "--plans",
            "results/together",
            "--profile",
            GPU_TEMPLATE,
            "--out",
            "results/vllm-search",
            *config,
        ],
    )
    assert searched.exit_code == 0, searched.output
    assert "TEMPLATE profile" in searched.stderr
    advise = [
        "advise",
        "--substrate",
        "vllm",
        "--trace",
        trace,
        "--token-scale",
        "0.15",
        "--profile",
        GPU_TEMPLATE,
        *config,
    ]
    text = runner.invoke(app, advise)
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    headers = [line for line in lines if line.startswith("| ") and "device" in line]
    assert len(headers) == 2 and all("device TEMPLATE s" in line for line in headers)
    assert any(line.startswith("**TEMPLATE profile") for line in lines)
    advice = json.loads(runner.invoke(app, [*advise, "--json"]).stdout)
    assert advice["profile"]["template"] is True
    assert advice["deploy"]["commands"][0].startswith("vllm serve Qwen/Qwen3-8B ")
