"""The workflow end to end on the small CI study (.test/config/config.yaml).

The study runs once per session (``finished_study`` in tests/conftest.py), in a scratch git
repository, because it commits its own preregistration records: the project history must
never hold a study's records. Tests that tamper with it work on a copy (``study_copy``).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
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

from rearrival.config.study import study_config_from_mapping
from rearrival.errors import StageError
from rearrival.workflow.preregister import refuse_changed_designs

# The first test here sets up the session's small study (about 85 s alone, several
# minutes on a loaded 2-core machine), over the 300 s default.
pytestmark = pytest.mark.timeout(900)


def test_all_runs_every_study_and_audit_passes(finished_study):
    work, home = finished_study
    for study in small_config()["studies"]:
        assert (work / "results" / "decisions" / f"{study}.csv").exists()
    assert (work / "reports" / "report.html").exists()
    audit = subprocess.run(
        [str(BIN / "rearrival"), "audit", "--repo", ".", "--results", "results"],
        cwd=work,
        env=workflow_env(home),
        capture_output=True,
        text=True,
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert "0 violation" in audit.stdout


def test_prereg_commits_precede_runs_and_identity_is_local(finished_study):
    work, _ = finished_study
    log = subprocess.run(
        ["git", "-C", str(work), "log", "--format=%an|%s"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    prereg = [line for line in log if "prereg(" in line]
    # one registration per study plus the amendment of validation by the re-measurement
    assert len(prereg) == len(small_config()["studies"]) + 1
    assert all(line.startswith("rearrival pipeline|") for line in prereg)


def test_second_run_has_nothing_to_do(finished_study):
    work, home = finished_study
    dry = snakemake(work, home, "-n", "all")
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert "Nothing to be done" in dry.stdout + dry.stderr


def _dry_run_with(work: Path, home: Path, edit) -> subprocess.CompletedProcess:
    """`snakemake -n all` under an edited config; the finished study's config is put back."""
    path = work / "config" / "config.yaml"
    original = path.read_text()
    config = yaml.safe_load(original)
    edit(config)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    try:
        return snakemake(work, home, "-n", "--quiet", "rules", "all")
    finally:
        path.write_text(original)


def _first_registration(work: Path, study: str) -> str:
    return subprocess.run(
        [
            "git",
            "-C",
            str(work),
            "log",
            "--reverse",
            "--format=%H",
            "--",
            f"preregistration/{study}",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[0]


def _set(*path_and_value):
    *keys, value = path_and_value

    def edit(config: dict) -> None:
        target = config
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        target[keys[-1]] = value

    return edit


STUDIES = sorted(small_config()["studies"])
# (edit, exactly the studies refused, changed key as the message names it)
REFUSED_EDITS = {
    "seed": (_set("study_seed", 8), STUDIES, "study_seed: registered 7, config 8"),
    "n": (_set("studies", "grid", "n", [6, 8]), ["grid"], "n: registered [6], config [6, 8]"),
    "workload": (
        _set("studies", "agents", "workload", "rounds", [3, 5]),
        ["agents"],
        "workload.rounds: registered [3, 4], config [3, 5]",
    ),
    "buckets": (
        _set("configurations", "grid6", "buckets", [1, 2, 3, 4, 6, 8]),
        ["grid"],
        "configurations.grid6.buckets: registered [1, 2, 4, 6, 8], config [1, 2, 3, 4, 6, 8]",
    ),
    "tau_fixed": (
        _set("decision", "tau_fixed", 0.05),
        STUDIES,
        "decision.tau_fixed: registered 0.02, config 0.05",
    ),
    "error_tolerance": (
        _set("decision", "error_tolerance", 0.05),
        STUDIES,
        "decision.error_tolerance: registered 0.03, config 0.05",
    ),
    "replicates": (_set("replicates", 3), STUDIES, "replicates: registered 2, config 3"),
}


def _assert_refusal_names(output: str, work: Path, studies: list[str], key: str) -> None:
    """Each refused study with its registering commit, the changed key, the ways forward."""
    for study in studies:
        assert f"study {study} has " in output, output[-3000:]
        assert f"registration commit {_first_registration(work, study)[:12]}" in output
    assert key in output
    assert "amends: " in output and "new study name" in output


@pytest.mark.parametrize("edit", sorted(REFUSED_EDITS))
def test_a_registered_design_or_criteria_edit_is_refused(finished_study, edit):
    """Against the finished study's registration commits, each design or criteria edit is
    refused for exactly the studies it changes: the check the workflow makes when it
    builds the DAG (rules/common.smk), called directly."""
    work, _ = finished_study
    change, studies, key = REFUSED_EDITS[edit]
    raw = small_config()
    change(raw)
    cfg = study_config_from_mapping(raw, "config/config.yaml")
    with pytest.raises(StageError) as refused:
        refuse_changed_designs(cfg, work, work / "results" / "runs")
    output = str(refused.value)
    assert sorted(line.split()[1] for line in output.splitlines()) == studies
    _assert_refusal_names(output, work, studies, key)


def test_a_registered_edit_is_refused_before_any_job(finished_study):
    """End to end for one edit: `snakemake` refuses while building the DAG, naming the
    study, the key, the registering commit and the two ways forward; no job is scheduled."""
    work, home = finished_study
    change, studies, key = REFUSED_EDITS["seed"]
    dry = _dry_run_with(work, home, change)
    output = dry.stdout + dry.stderr
    assert dry.returncode != 0, output[-2000:]
    assert "Job stats" not in output
    _assert_refusal_names(output, work, studies, key)


def test_a_report_only_edit_reruns_only_the_report(finished_study):
    work, home = finished_study
    # braces as in the full config ({1,2,4,8}) must not be read as wildcards
    dry = _dry_run_with(work, home, _set("studies", "grid", "description", "{1,2,4,8} new"))
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert job_counts(dry.stdout + dry.stderr) == {"report": 1, "all": 1}


def test_an_injection_edit_reruns_only_the_injection_and_the_report(finished_study):
    work, home = finished_study
    dry = _dry_run_with(work, home, _set("injection", "inject_at_s", 0.7))
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert job_counts(dry.stdout + dry.stderr) == {"injection": 1, "report": 1, "all": 1}


def test_a_new_study_schedules_its_own_jobs_only(finished_study):
    """A new study name is the way forward for a changed design: nothing registered reruns."""
    work, home = finished_study

    def add(config: dict) -> None:
        config["studies"]["grid_seed2"] = config["studies"]["grid"] | {"seed_block": 12}

    dry = _dry_run_with(work, home, add)
    assert dry.returncode == 0, dry.stderr[-2000:]
    counts = job_counts(dry.stdout + dry.stderr)
    assert counts == {
        "plans": 1,
        "predict": 1,
        "predict_exploratory": 1,
        "preregister": 1,
        "run_replicate": 2,
        "seal": 1,
        "channels": 1,
        "channels_exploratory": 1,
        "decide": 1,
        "decide_exploratory": 1,
        "report": 1,
        "all": 1,
    }


@pytest.fixture
def study_copy(finished_study, tmp_path) -> tuple[Path, Path]:
    """A copy of the finished study (repository included) a test may tamper with."""
    work, home = finished_study
    copy = tmp_path / "copy"
    shutil.copytree(work, copy, symlinks=True)
    return copy, home


def _rearrival(work: Path, home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "rearrival"), *args],
        cwd=work,
        env=workflow_env(home),
        capture_output=True,
        text=True,
    )


def test_predictions_scaled_after_measuring_are_refused_by_decide(study_copy):
    """The issue's case: slots16 predictions scaled by 0.97 after measuring. decide reads
    the registration commit and refuses the working file that disagrees."""
    import pandas as pd

    work, home = study_copy
    path = work / "results" / "predictions" / "validation.parquet"
    frame = pd.read_parquet(path)
    frame.loc[frame["configuration"] == "slots16", "device_s"] *= 0.97
    frame.to_parquet(path, index=False)
    decided = _rearrival(
        work,
        home,
        "study",
        "decide",
        "--study",
        "validation",
        "--channels",
        "results/channels/validation.parquet",
        "--predictions",
        str(path),
        "--prereg",
        "results/prereg/validation.json",
        "--out",
        "results/decisions/validation.csv",
    )
    assert decided.returncode == 2
    assert "differs from the predictions registered in commit" in decided.stderr
    assert "slots16-wait" in decided.stderr


def _words(text: str) -> str:
    """The audit wraps its reasons at 100 columns; compare its words, not its lines."""
    return " ".join(text.split())


def test_audit_recomputes_decisions_and_names_the_edited_row(study_copy):
    work, home = study_copy
    path = work / "results" / "decisions" / "validation.csv"
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    cells = lines[1].split(",")
    column = header.index("ratio_pred")
    cells[column] = repr(float(cells[column]) * 0.97)
    path.write_text("\n".join([lines[0], ",".join(cells), *lines[2:]]) + "\n")
    audit = _rearrival(work, home, "audit")
    assert audit.returncode == 1
    assert "validation.csv differs from its recomputation" in _words(audit.stdout)
    assert "row 1 (" in _words(audit.stdout) and "ratio_pred" in _words(audit.stdout)


def test_an_edited_run_record_is_caught_naming_run_and_file(study_copy):
    work, home = study_copy
    run = work / "results" / "runs" / "grid" / "n6_r0" / "baseline-wait"
    metrics = run / "metrics.json"
    metrics.write_text(metrics.read_text() + " ")
    audit = _rearrival(work, home, "audit")
    assert audit.returncode == 1
    assert "run n6_r0/baseline-wait: file metrics.json edited after sealing" in _words(audit.stdout)
    channels = _rearrival(
        work,
        home,
        "study",
        "channels",
        "--study",
        "grid",
        "--out",
        "results/channels/grid.parquet",
        *sorted(str(p) for p in (run.parents[1]).iterdir()),
    )
    assert channels.returncode == 2
    assert "metrics.json edited after sealing" in channels.stderr


def test_re_registering_after_a_description_edit_keeps_the_registration(study_copy):
    """The description is report text: re-running the prereg stage after editing it makes
    no commit and is not refused."""
    work, home = study_copy
    path = work / "config" / "config.yaml"
    config = yaml.safe_load(path.read_text())
    config["studies"]["grid"]["description"] = "new words"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    commits = subprocess.run(
        ["git", "-C", str(work), "rev-list", "--count", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    done = snakemake(work, home, "results/prereg/grid.json", "--forcerun", "preregister")
    assert "preregister" in done.stdout + done.stderr
    assert done.returncode == 0, done.stderr[-2000:]
    assert (
        subprocess.run(
            ["git", "-C", str(work), "rev-list", "--count", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        == commits
    )


def test_a_run_outside_the_registered_design_is_flagged_by_audit(study_copy):
    """A run made by hand under an edited config (around the DAG-time refusal) records
    a configuration the registration does not hold: the audit names it."""
    import json

    work, home = study_copy
    manifest = work / "results" / "runs" / "grid" / "n6_r1" / "grid6-wait" / "manifest.json"
    raw = json.loads(manifest.read_text())
    raw["configuration"]["buckets"] = [1, 2, 3, 4, 6, 8]
    manifest.write_text(json.dumps(raw))
    audit = _rearrival(work, home, "audit")
    assert audit.returncode == 1
    assert "run does not match the registered design: configuration grid6" in _words(audit.stdout)


def test_killed_run_leaves_no_output_and_only_it_reruns(finished_study, study_copy):
    """As if the first `snakemake all` died inside one run job: nothing downstream of it
    exists yet, and the killed job must leave nothing a decision could read. Rerunning
    the one replicate (not the whole study again) reproduces its records byte for byte."""
    work, home = study_copy
    target = work / "results" / "runs" / "mechanisms" / "n8_r1"
    for downstream in (
        "results/channels/mechanisms.parquet",
        "results/decisions/mechanisms.csv",
        "reports/report.html",
    ):
        (work / downstream).unlink()
    shutil.rmtree(target)
    command = [
        str(BIN / "rearrival"),
        "study",
        "run",
        "--study",
        "mechanisms",
        "--n",
        "8",
        "--replicate",
        "1",
        "--plans",
        "results/plans/mechanisms",
        "--out",
        str(target),
    ]
    job = subprocess.Popen(
        command, cwd=work, env=workflow_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 60
    while (
        not list(target.parent.glob(f".{target.name}.*.tmp"))
        and time.monotonic() < deadline
        and job.poll() is None
    ):
        time.sleep(0.005)
    assert job.poll() is None, "the run finished before it could be killed"
    job.send_signal(signal.SIGKILL)
    job.wait()
    assert not target.exists(), "a killed run must not leave its replicate directory"
    dry = snakemake(work, home, "-n", "all")
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert job_counts(dry.stdout + dry.stderr) == {
        "run_replicate": 1,
        "seal": 1,
        "channels": 1,
        "channels_exploratory": 1,
        "decide": 1,
        "decide_exploratory": 1,
        "report": 1,
        "all": 1,
    }
    redo = snakemake(work, home, str(target.relative_to(work)))
    assert redo.returncode == 0, redo.stderr[-3000:]
    assert job_counts(redo.stdout + redo.stderr) == {"run_replicate": 1}
    reference = finished_study[0] / target.relative_to(work)
    assert_same_run_records(target, reference)


def test_config_errors_name_the_key(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    broken = small_config()
    broken["backend"] = "gpu"
    work = workflow_repo(tmp_path, broken)
    result = snakemake(work, home, "-n", "all")
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "backend: 'gpu' is not one of" in output and result.returncode == 2


def test_bucket_set_without_batch_size_is_refused(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    broken = small_config()
    broken["configurations"]["grid6"]["buckets"] = [1, 2, 4, 6]
    work = workflow_repo(tmp_path, broken)
    result = snakemake(work, home, "-n", "all")
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "grid6.buckets" in output and "batch_size 8" in output


@pytest.mark.slow
def test_full_study_end_to_end(tmp_path):
    """The default study definition, every study and the full search (a few minutes)."""
    home = tmp_path / "home"
    home.mkdir()
    work = workflow_repo(tmp_path, yaml.safe_load((REPO / "config" / "config.yaml").read_text()))
    done = snakemake(work, home, "all")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    audit = subprocess.run(
        [str(BIN / "rearrival"), "audit"],
        cwd=work,
        env=workflow_env(home),
        capture_output=True,
        text=True,
    )
    assert audit.returncode == 0, audit.stdout[-3000:]
    dry = snakemake(work, home, "-n", "all")
    assert "Nothing to be done" in dry.stdout + dry.stderr


def test_same_config_and_seeds_give_the_same_bytes(finished_study, tmp_path):
    """A second study from scratch (new repository, new commits, new times) reproduces the
    plans, predictions, run records and decisions byte for byte."""
    work, _ = finished_study
    home = tmp_path / "home"
    home.mkdir()
    again = workflow_repo(tmp_path, small_config())
    done = snakemake(again, home, "results/decisions/grid.csv")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    produced = sorted(
        p.relative_to(again)
        for p in (again / "results").rglob("*")
        if p.is_file()
        and p.name != "manifest.json"
        and "prereg" not in p.parts
        and "ledger" not in p.parts
    )
    assert any(p.name == "requests.parquet" for p in produced)
    for relative in produced:
        assert (again / relative).read_bytes() == (work / relative).read_bytes(), relative
