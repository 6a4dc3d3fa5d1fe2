"""Declared means used: every file a rule declares is a path its command is given, and
every results/ or reports/ path its command is given is declared, for every rule
(docs/DESIGN.md §13: the report reads only the files its rule lists; the calibration
names each file it writes). No rule is exempt.

The oracle is Snakemake's own dry run (`snakemake -n -p all`): for each job it prints
the concrete inputs and outputs and the formatted shell command, so the check covers
input functions, `rules.<rule>.output` chaining and option helpers as Snakemake
evaluates them, on the full study definition and the small CI one.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from rearrival.config.calibration import MeasurementSettings
from rearrival.errors import StageError
from rearrival.workflow.profile import stage_profile_path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
WORKFLOW_FILES = ("Snakefile", "rules", "envs", "config", "profiles", ".test")
ROOTS = ("results", "reports")
REPLACE = ("--replace-workflow-config", "all")


@dataclass(frozen=True)
class Job:
    rule: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    command: str


def _field(block: str, name: str) -> tuple[str, ...]:
    found = re.search(rf"^    {name}: (.*)$", block, re.MULTILINE)
    return tuple(p.strip() for p in found.group(1).split(",")) if found else ()


def dry_run_jobs(text: str) -> list[Job]:
    """Every job of a `snakemake -n -p` listing that runs a shell command."""
    jobs = []
    for block in re.split(r"^(?=(?:local)?rule \w+:$)", text, flags=re.MULTILINE):
        head = re.match(r"(?:local)?rule (\w+):$", block, re.MULTILINE)
        command = re.search(r"^Shell command: (.*)$", block, re.MULTILINE)
        if head is None or command is None or command.group(1) == "None":
            continue  # a target-only rule (all) runs nothing
        jobs.append(
            Job(head.group(1), _field(block, "input"), _field(block, "output"), command.group(1))
        )
    return jobs


def command_paths(command: str, declared: set[str] = frozenset()) -> set[str]:
    """The results/ and reports/ paths a command line names (log redirection dropped),
    and the declared files elsewhere it names (a profile file under src/, say)."""
    words = shlex.split(command.split(" > ", 1)[0])
    return {w for w in words if w in ROOTS or w.split("/", 1)[0] in ROOTS or w in declared}


def undeclared_or_unused(job: Job) -> list[str]:
    """The job's declared files its command is not given, and the paths its command is
    given that it does not declare."""
    declared = set(job.inputs) | set(job.outputs)
    named = command_paths(job.command, declared)
    problems = [
        f"{job.rule}: declares {path} but its command is not given it"
        for path in sorted(declared)
        if path not in named
    ]
    problems += [
        f"{job.rule}: command names {path}, which the rule does not declare"
        for path in sorted(named - declared)
    ]
    return problems


def _dry_run(tmp_path: Path, config: str, extra: tuple[str, ...] = ()) -> str:
    work = tmp_path / "study"
    for name in (*WORKFLOW_FILES, *extra):
        source, target = REPO / name, work / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            shutil.copy(source, target)
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    done = subprocess.run(
        [str(BIN / "snakemake"), "-n", "-p", "--cores", "1", "--configfile", config, *REPLACE],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout + done.stderr


@pytest.mark.parametrize("config", ["config/config.yaml", ".test/config/config.yaml"])
def test_every_rule_gives_its_command_exactly_its_declared_files(tmp_path, config):
    jobs = dry_run_jobs(_dry_run(tmp_path, config))
    rules = {job.rule for job in jobs}
    # the listing was parsed: every stage of the study is there
    assert {"plans", "predict", "preregister", "run_replicate", "seal", "channels"} <= rules
    assert {"decide", "report", "search_merge", "calibrate"} <= rules
    assert "engine_report" not in rules  # reports/report.html is the paper's report here
    # the exploratory evaluation's stages are rules too, and the report reads their tables
    assert {"predict_exploratory", "channels_exploratory", "decide_exploratory"} <= rules
    report = next(job for job in jobs if job.rule == "report")
    assert any(path.startswith("results/exploratory/") for path in report.inputs)
    assert [p for job in jobs for p in undeclared_or_unused(job)] == []


def test_every_vllm_rule_gives_its_command_exactly_its_declared_files(tmp_path):
    """The vLLM study (config/vllm.yaml): its own search, the tables and the comparison
    with each run, and the report section, none of the paper's RBLN stages."""
    profile = "src/rearrival/data/profile_vllm_tiny_qwen3_cpu.yaml"
    jobs = dry_run_jobs(_dry_run(tmp_path, "config/vllm.yaml", (profile,)))
    rules = {job.rule for job in jobs}
    assert {"plans", "predict", "preregister", "run_replicate", "seal", "channels"} <= rules
    assert {"decide", "search_vllm", "vllm_tables", "vllm_agreement", "vllm_report"} <= rules
    assert "engine_report" in rules  # reports/report.html composed of the vLLM section
    assert not rules & {"calibrate", "report", "search_merge", "predict_exploratory"}
    predict = next(job for job in jobs if job.rule == "predict")
    assert profile in predict.inputs
    assert [p for job in jobs for p in undeclared_or_unused(job)] == []


def test_every_fleet_rule_gives_its_command_exactly_its_declared_files(tmp_path):
    """The fleet study (config/fleet.yaml): plans, registration, one run per condition,
    the seal, the comparisons, decisions and report, and nothing of a closed-loop study."""
    profile = "src/rearrival/data/profile_vllm_tiny_qwen3_cpu.yaml"
    jobs = dry_run_jobs(_dry_run(tmp_path, "config/fleet.yaml", (profile,)))
    rules = {job.rule for job in jobs}
    assert {"fleet_plans", "fleet_prereg", "fleet_run", "fleet_seal", "fleet_compare"} <= rules
    assert {"fleet_decide", "fleet_report"} <= rules
    assert not rules & {"plans", "predict", "run_replicate", "vllm_report", "report"}
    assert sum(job.rule == "fleet_run" for job in jobs) == 6  # 3 policies x 2 pools, 1 replicate
    assert [p for job in jobs for p in undeclared_or_unused(job)] == []


def test_calibration_outputs_count_only_when_each_is_named():
    """calibrate's runs and tables are declared files: neither lying beside --out nor
    inside a --work directory the command names stands in for naming each of them."""
    outputs = tuple(
        f"results/calibration/{name}"
        for name in ("profile.yaml", "decode_steps.parquet", "runs", "plans")
    )
    command = "rearrival study calibrate --config c.yaml --out results/calibration/profile.yaml"
    unnamed = [
        f"calibrate: declares {path} but its command is not given it"
        for path in sorted(outputs[1:])
    ]
    beside = Job("calibrate", (), outputs, f"{command} > log 2>&1")
    assert undeclared_or_unused(beside) == unnamed
    work = Job("calibrate", (), outputs, f"{command} --work results/calibration > log 2>&1")
    assert undeclared_or_unused(work) == [
        *unnamed,
        "calibrate: command names results/calibration, which the rule does not declare",
    ]
    each = " --decode-steps results/calibration/decode_steps.parquet"
    each += " --runs results/calibration/runs --plans results/calibration/plans"
    named = Job("calibrate", (), outputs, f"{command}{each} > log 2>&1")
    assert undeclared_or_unused(named) == []


def test_a_profile_read_but_not_declared_is_caught():
    job = Job(
        "predict",
        ("results/plans/grid",),
        ("results/predictions/grid.parquet",),
        "rearrival study predict --plans results/plans/grid --profile "
        "'results/calibration/profile.yaml' --out results/predictions/grid.parquet > log 2>&1",
    )
    assert undeclared_or_unused(job) == [
        "predict: command names results/calibration/profile.yaml, which the rule does not declare"
    ]


def test_a_declared_ledger_not_passed_is_caught():
    job = Job(
        "decide",
        ("results/channels/grid.parquet", "results/ledger/grid.json"),
        ("results/decisions/grid.csv",),
        "rearrival study decide --channels results/channels/grid.parquet "
        "--out results/decisions/grid.csv",
    )
    assert undeclared_or_unused(job) == [
        "decide: declares results/ledger/grid.json but its command is not given it"
    ]


def test_stage_profile_comes_only_from_the_option():
    given = Path("results/calibration/profile.yaml")
    assert stage_profile_path(MeasurementSettings(profile="calibrated"), given) == given
    assert stage_profile_path(MeasurementSettings(), None) is None
    with pytest.raises(StageError, match="profile: calibrated needs its file; pass --profile"):
        stage_profile_path(MeasurementSettings(profile="calibrated"), None)
    with pytest.raises(StageError, match="says profile: published; drop --profile"):
        stage_profile_path(MeasurementSettings(), given)
