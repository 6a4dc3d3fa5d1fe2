"""The profile a verb run by hand predicts with (rearrival.commands.profile): the
calibrated profile when this checkout has one, else the published constants, said in one
line on stderr; the same rule for simulate, search and advise, recorded in every search
and advise output, and told by `rearrival version` (issue 29, item 2)."""

from __future__ import annotations

import hashlib
import json
import random
from importlib import resources
from pathlib import Path

import pytest
import yaml
from conftest import CONFIG_FILE, random_plan
from typer.testing import CliRunner

from rearrival.cli import app
from rearrival.model.plans.plan import write_plan

runner = CliRunner()
SHIPPED = resources.files("rearrival.data").joinpath("profile_rbln_ca25.yaml").read_bytes()
SHIPPED_SHA = hashlib.sha256(SHIPPED).hexdigest()
CALIBRATED = Path("results/calibration/profile.yaml")
SMALL_SEARCH = {
    "batch_sizes": [4],
    "max_buckets": 3,
    "n": [3],
    "seeds": 1,
    "blocks": 1,
    "restricted_n": [],
    "top": 2,
    "shards": 1,
}


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch) -> Path:
    """A directory laid out like a fresh clone: the shipped config (profile: calibrated)
    with a small search, no calibration run yet."""
    raw = yaml.safe_load(CONFIG_FILE.read_text())
    assert raw["profile"] == "calibrated"
    raw["search"] = SMALL_SEARCH
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def calibrate_here() -> str:
    """A calibrated profile in this checkout: the shipped constants with slower decode
    steps, so predictions with it differ; its sha256."""
    tree = yaml.safe_load(SHIPPED)
    tree["profile_version"] = "calibrated/test"
    for entry in tree["decode"]["bucket_cost_ms"].values():
        entry["value"] *= 2
    CALIBRATED.parent.mkdir(parents=True)
    CALIBRATED.write_text(yaml.safe_dump(tree))
    return hashlib.sha256(CALIBRATED.read_bytes()).hexdigest()


def profile_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("rearrival: profile:")]


def test_a_fresh_clone_searches_with_the_published_constants_and_says_why(checkout) -> None:
    result = runner.invoke(app, ["search", "--out", "out"])
    assert result.exit_code == 0, result.output
    (line,) = profile_lines(result.stderr)
    assert "published constants" in line and SHIPPED_SHA[:12] in line
    assert "profile: calibrated" in line and str(CALIBRATED) in line
    assert "rearrival calibrate --out" in line
    for name in ("summary.json", "selected.json"):
        recorded = json.loads((checkout / "out" / name).read_text())["profile"]
        assert recorded == {
            "name": "published",
            "version": "rbln-ca25-qwen3-4b/1",
            "sha256": SHIPPED_SHA,
        }
    assert "rearrival: profile" not in result.stdout


def test_a_calibrated_checkout_searches_with_its_calibration(checkout) -> None:
    sha = calibrate_here()
    result = runner.invoke(app, ["search", "--out", "out"])
    assert result.exit_code == 0, result.output
    (line,) = profile_lines(result.stderr)
    assert str(CALIBRATED) in line and sha[:12] in line and "published" not in line
    summary = json.loads((checkout / "out" / "summary.json").read_text())
    assert summary["profile"] == {
        "name": str(CALIBRATED),
        "version": "calibrated/test",
        "sha256": sha,
    }


def test_profile_published_on_the_command_line_is_a_word(checkout) -> None:
    calibrate_here()
    result = runner.invoke(app, ["search", "--out", "out", "--profile", "published"])
    assert result.exit_code == 0, result.output
    (line,) = profile_lines(result.stderr)
    assert "published constants" in line and "--profile published" in line


def test_simulate_follows_the_same_rule(checkout) -> None:
    plan = checkout / "p.json"
    write_plan(random_plan(random.Random(3), 4, max_gen=20), plan)
    fresh = runner.invoke(app, ["simulate", str(plan), "--json"])
    assert fresh.exit_code == 0, fresh.output
    assert "published constants" in profile_lines(fresh.stderr)[0]
    sha = calibrate_here()
    calibrated = runner.invoke(app, ["simulate", str(plan), "--json"])
    assert calibrated.exit_code == 0, calibrated.output
    assert sha[:12] in profile_lines(calibrated.stderr)[0]
    before, after = (json.loads(r.stdout)["device_s"] for r in (fresh, calibrated))
    assert after > before  # the calibration's slower decode steps priced the plan


def test_simulate_outside_a_checkout_uses_the_published_constants(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_plan(random_plan(random.Random(3), 4, max_gen=20), tmp_path / "p.json")
    result = runner.invoke(app, ["simulate", "p.json"])
    assert result.exit_code == 0, result.output
    (line,) = profile_lines(result.stderr)
    assert "published constants" in line and "no config/config.yaml" in line


def test_advise_records_the_profile_in_json_and_markdown(checkout) -> None:
    as_json = runner.invoke(app, ["advise", "--json"])
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout)["profile"]["sha256"] == SHIPPED_SHA
    assert "published constants" in profile_lines(as_json.stderr)[0]
    markdown = runner.invoke(app, ["advise"])
    assert markdown.exit_code == 0, markdown.output
    assert f"Profile: published (rbln-ca25-qwen3-4b/1, sha256 {SHIPPED_SHA})" in markdown.stdout


def test_the_workflow_stage_keeps_the_configured_profile(checkout) -> None:
    """`rearrival study search` is a workflow stage: profile: calibrated without its file
    is an error there, never the published constants."""
    shard = ["shard", "--plans", "p", "--shard", "0", "--out", "s.parquet"]
    result = runner.invoke(app, ["study", "search", *shard])
    assert result.exit_code != 0
    assert "cannot read the profile" in str(result.exception)


def test_version_tells_which_profile_the_verbs_use(checkout) -> None:
    fresh = runner.invoke(app, ["version"])
    assert fresh.exit_code == 0, fresh.output
    assert "published constants" in fresh.stdout and str(CALIBRATED) in fresh.stdout
    sha = calibrate_here()
    calibrated = runner.invoke(app, ["version"])
    assert sha[:12] in calibrated.stdout and "published" not in calibrated.stdout


def test_a_missing_profile_suggests_a_calibrate_command_that_runs(checkout) -> None:
    result = runner.invoke(app, ["search", "--out", "out", "--profile", "nowhere.yaml"])
    assert result.exit_code != 0
    assert "`rearrival calibrate --out nowhere.yaml`" in str(result.exception)
