"""The run stage's rule for runs that did not complete (docs/DESIGN.md §6): the replicate
is not published, each failed run is named with its reason, its record is kept for
diagnosis outside the results, and a later attempt replaces that record."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from rearrival.atomic import atomic_directory
from rearrival.errors import StageError
from rearrival.measure.records import finish_manifest, manifest_template, write_run
from rearrival.measure.records.contract import REQUEST_COLUMNS, STEP_COLUMNS
from rearrival.model.configuration import VllmConfiguration
from rearrival.workflow.run import refuse_failed_runs


def _write(run_dir: Path, status: str, reason: str | None) -> None:
    manifest = manifest_template(
        study="s",
        backend="vllm",
        configuration=VllmConfiguration((), 4, num_blocks=64),
        variant="wait",
        condition=run_dir.name,
        replicate=0,
        n=1,
        plan_path="p.json",
        plan_sha256="0" * 64,
        plan_seed=1,
        run_seed=1,
        condition_order=[run_dir.name],
    )
    write_run(
        run_dir,
        requests=pd.DataFrame(columns=[c for c, _, _ in REQUEST_COLUMNS]),
        steps=pd.DataFrame(columns=[c for c, _, _ in STEP_COLUMNS]),
        metrics={"before": {}, "after": {}},
        manifest=finish_manifest(manifest, status=status, reason=reason),
        server_log="ValueError: refused\n",
    )


def test_a_failed_run_keeps_the_replicate_unpublished_and_its_record_aside(tmp_path: Path):
    out, failed = tmp_path / "results" / "n1_r0", tmp_path / "logs" / "n1_r0.failed"
    for attempt in ("first", "second"):
        with pytest.raises(StageError) as err, atomic_directory(out) as staging:
            _write(staging / "baseline-wait", "complete", None)
            _write(staging / "more-wait", "failed", f"run x: vLLM: ValueError ({attempt})")
            refuse_failed_runs(staging, ["baseline-wait", "more-wait"], failed)
        assert "1 run(s) did not complete" in str(err.value)
        assert f"more-wait: failed: run x: vLLM: ValueError ({attempt})" in str(err.value)
        assert not out.exists() and not list(out.parent.glob(".*tmp"))  # nothing published
        kept = sorted(p.name for p in failed.iterdir())
        assert kept == ["more-wait"]  # only the failed run, the latest attempt's
        assert f"({attempt})" in (failed / "more-wait" / "manifest.json").read_text()


def test_a_failed_runs_line_names_its_kept_record_not_the_deleted_staging_folder(
    tmp_path: Path,
):
    """issue 38: the line once named the server log inside the staging folder, which is
    deleted; the record is under the failed directory."""
    out, failed = tmp_path / "results" / "n1_r0", tmp_path / "logs" / "n1_r0.failed"
    with pytest.raises(StageError) as err, atomic_directory(out) as staging:
        reason = f"run x: vLLM: ValueError (server log: {staging / 'more-wait' / 'server.log'})"
        _write(staging / "more-wait", "failed", reason)
        refuse_failed_runs(staging, ["more-wait"], failed)
    line = str(err.value).splitlines()[-1]
    assert str(staging) not in line
    assert f"(server log: {failed / 'more-wait' / 'server.log'})" in line
    assert (failed / "more-wait" / "server.log").is_file()
