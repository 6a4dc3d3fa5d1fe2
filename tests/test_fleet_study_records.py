"""The records of a finished `make all-fleet` (README "A study on a real fleet"): every run
of every registered condition complete and whole as tests/fleet_records.py says, the
comparison of each on its observed placement written, every registered decision made, and
the report's fleet section with its figures. .ci/run points REARRIVAL_FLEET_STUDY at its
scratch clone after the study; without it (a plain `make test`) there is nothing to check."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
from fleet_records import check_fleet_run

from rearrival.config.study import load_study_config
from rearrival.judge.fleet_study import FAILS, HOLDS

STUDY_DIR = os.environ.get("REARRIVAL_FLEET_STUDY")
pytestmark = pytest.mark.skipif(
    not STUDY_DIR, reason="set REARRIVAL_FLEET_STUDY to a clone where make all-fleet ran"
)


@pytest.fixture(scope="module")
def study() -> Path:
    return Path(str(STUDY_DIR))


def test_every_condition_ran_whole_on_a_fresh_fleet(study: Path) -> None:
    fleet = load_study_config(study / "config" / "fleet.yaml").fleet
    started = set()
    for rep in range(fleet.replicates):
        for c in fleet.conditions():
            out = study / "results" / "runs" / fleet.study / f"{c.label}_r{rep}" / c.label
            run = check_fleet_run(out, c.policy, fleet.replicas)
            manifest = json.loads((out / "manifest.json").read_text())
            assert manifest["prereg"]["study"] == fleet.study and manifest["prereg"]["commit"]
            assert manifest["configuration"]["name"] == c.configuration
            started.add(tuple(s["url"] for s in manifest["fleet"]["servers"]))
            comparison = study / "results" / "fleet" / "compare" / f"{c.label}_r{rep}"
            summary = json.loads((comparison / "summary.json").read_text())
            assert summary["requests"] == len(run.requests)
            assert summary["run"]["policy"] == c.policy
    assert len(started) == fleet.replicates * len(fleet.conditions())  # a fleet per run


def test_every_registered_decision_is_made_and_reported(study: Path) -> None:
    fleet = load_study_config(study / "config" / "fleet.yaml").fleet
    decisions = pd.read_csv(study / "results" / "fleet" / "decisions" / "decisions.csv")
    registered = json.loads(
        (study / "preregistration" / fleet.study / "criteria.json").read_text()
    )["criteria"]
    assert sorted(decisions["name"].unique()) == sorted(c["name"] for c in registered)
    assert set(decisions["verdict"]) <= {HOLDS, FAILS}
    report = (study / "reports" / "fleet.md").read_text()
    assert "# A study on a real fleet" in report and "### Decisions" in report
    for figure in ("fleet_cached_tokens.svg", "fleet_ttft.svg"):
        assert f"(fleet/figures/{figure})" in report
        assert (study / "reports" / "fleet" / "figures" / figure).stat().st_size > 0
    page = (study / "reports" / "report.html").read_text()
    assert 'id="section-fleet"' in page and "### Decisions" not in page


def test_the_audit_recomputes_the_fleet_decisions_from_the_records(study: Path) -> None:
    """Check (f) on the fleet study ran on the real records (tests/test_audit_fleet.py
    shows it names a changed table or record) and found the tables equal."""
    from rearrival.prereg.audit import OK, audit

    report = audit(study, study / "results")
    [row] = [r for r in report.rows if r.run == "(decisions) fleet"]
    assert row.verdict == OK, row.reason
