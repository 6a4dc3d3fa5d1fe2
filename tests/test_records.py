"""Run records (docs/DESIGN.md §6, §14): contract, atomic publication, one-line refusals."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rearrival.errors import RearrivalError
from rearrival.measure import records
from rearrival.measure.records import RunRecordError, read_run, write_run
from rearrival.measure.records import write as records_write
from rearrival.model.configuration import RblnConfiguration


def _requests() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "session": [0, 1, 0, 1],
            "turn": [0, 0, 1, 1],
            "send_s": [0.0, 0.004, 0.9, 1.3],
            "first_token_s": [0.2, 0.4, 1.0, 1.4],
            "complete_s": [0.6, 0.8, 1.2, 1.7],
            "prompt_tokens": [900, 1100, 1000, 1200],
            "cached_tokens": pd.array([0, 0, 896, None], dtype="Int64"),
            "computed_tokens": pd.array([900, 1100, 104, None], dtype="Int64"),
            "generated_tokens": [3, 3, 2, 2],
            "prefill_s": [0.17, float("nan"), 0.02, float("nan")],
        }
    )


def _steps() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "step": [0, 1, 2, 3],
            "kind": ["prefill", "prefill", "decode", "decode"],
            "n": [1, 1, 2, 2],
            "b": pd.array([None, None, 2, 2], dtype="Int64"),
            "start_s": [0.0, 0.2, 0.4, float("nan")],
            "end_s": [0.2, 0.4, 0.41, float("nan")],
        }
    )


def _manifest(status: str = "complete", reason: str | None = None) -> dict:
    template = records.manifest_template(
        study="validation",
        backend="emulated",
        configuration=RblnConfiguration((1, 2, 4, 8), 8),
        variant="wait",
        condition="baseline",
        replicate=1,
        n=2,
        plan_path="plans/r1.parquet",
        plan_sha256="ab" * 32,
        plan_seed=11,
        run_seed=5,
        condition_order=["baseline", "slots"],
        started_at="2026-01-02T03:04:05+00:00",
    )
    return records.finish_manifest(
        template, status=status, reason=reason, finished_at="2026-01-02T03:05:00+00:00"
    )


def _write(out: Path, **overrides) -> Path:
    parts = {
        "requests": _requests(),
        "steps": _steps(),
        "metrics": {
            "before": {"vllm:prompt_tokens_cached_total": 0.0},
            "after": {"vllm:prompt_tokens_cached_total": 896.0},
        },
        "manifest": _manifest(),
        "server_log": None,
    } | overrides
    return write_run(out, **parts)


def _one_line_error(excinfo: pytest.ExceptionInfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message and isinstance(excinfo.value, RearrivalError)
    return message


def test_round_trip_keeps_values_and_dtypes(tmp_path: Path) -> None:
    log = "INFO x\nDEBUG model_base.py:1] [BUCKET] request_nums=2 padded_batch_size=2\n"
    run = _write(tmp_path / "run", server_log=log)
    record = read_run(run)
    pd.testing.assert_frame_equal(record.requests, _requests(), check_dtype=False)
    assert record.requests["computed_tokens"].dtype == "Int64"
    assert record.requests["computed_tokens"].isna().tolist() == [False, False, False, True]
    assert record.steps["b"].dtype == "Int64" and record.steps["n"].dtype == "int64"
    assert record.steps["kind"].tolist() == ["prefill", "prefill", "decode", "decode"]
    sealed = record.manifest.pop("files")
    assert record.manifest == _manifest() and record.server_log == log
    assert sealed == {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in run.iterdir()
        if p.name != "manifest.json"
    }
    assert record.metrics["after"]["vllm:prompt_tokens_cached_total"] == 896.0
    assert record.path == run and record.replicate == 1


def test_parquet_bytes_are_deterministic(tmp_path: Path) -> None:
    first, second = _write(tmp_path / "a"), _write(tmp_path / "b")
    for name in (records.REQUESTS_FILE, records.STEPS_FILE, records.MANIFEST_FILE):
        assert (first / name).read_bytes() == (second / name).read_bytes()
    assert b"pandas" not in (first / records.REQUESTS_FILE).read_bytes()


def test_refuses_to_overwrite_a_run_and_keeps_it(tmp_path: Path) -> None:
    run = _write(tmp_path / "run")
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    with pytest.raises(RunRecordError) as excinfo:
        _write(tmp_path / "run", manifest=_manifest("failed", "server died"))
    message = _one_line_error(excinfo)
    assert str(run) in message and "delete it or choose another output directory" in message
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_a_failing_write_leaves_nothing_behind(tmp_path: Path, monkeypatch) -> None:
    calls = []

    def exploding(table: pa.Table) -> bytes:
        calls.append(table)
        if len(calls) == 2:
            raise OSError("disk full")
        return b"x"

    monkeypatch.setattr(records_write, "_parquet_bytes", exploding)
    with pytest.raises(OSError):
        _write(tmp_path / "run")
    assert list(tmp_path.iterdir()) == []


def test_partial_run_is_kept_but_refused_with_its_reason(tmp_path: Path) -> None:
    requests = _requests()
    requests.loc[3, "complete_s"] = float("nan")  # cut off by a dying server
    run = _write(
        tmp_path / "run",
        requests=requests,
        manifest=_manifest("partial", "server exited with code 137 at 1.4 s"),
    )
    with pytest.raises(RunRecordError) as excinfo:
        read_run(run)
    message = _one_line_error(excinfo)
    assert "'partial'" in message and "server exited with code 137 at 1.4 s" in message
    assert str(run) in message
    kept = read_run(run, require_complete=False)
    assert kept.manifest["status"] == "partial" and kept.requests["complete_s"].isna().sum() == 1


def test_complete_run_needs_every_time(tmp_path: Path) -> None:
    requests = _requests()
    requests.loc[3, "complete_s"] = float("nan")
    with pytest.raises(RunRecordError, match="column 'complete_s' has missing values"):
        _write(tmp_path / "run", requests=requests)


def test_failed_status_needs_a_reason(tmp_path: Path) -> None:
    with pytest.raises(RunRecordError, match="'reason' is empty"):
        _write(tmp_path / "run", manifest=_manifest("failed", None))


def test_truncated_parquet_names_the_file(tmp_path: Path) -> None:
    run = _write(tmp_path / "run")
    target = run / records.STEPS_FILE
    target.write_bytes(target.read_bytes()[: len(target.read_bytes()) // 2])
    with pytest.raises(RunRecordError) as excinfo:
        read_run(run)
    message = _one_line_error(excinfo)
    assert str(target) in message and "truncated or damaged" in message


def test_missing_parquet_names_the_file(tmp_path: Path) -> None:
    run = _write(tmp_path / "run")
    (run / records.REQUESTS_FILE).unlink()
    with pytest.raises(RunRecordError, match=r"requests\.parquet: missing"):
        read_run(run)


def test_missing_manifest_means_the_run_never_finished(tmp_path: Path) -> None:
    run = _write(tmp_path / "run")
    (run / records.MANIFEST_FILE).unlink()
    with pytest.raises(RunRecordError) as excinfo:
        read_run(run)
    assert "never finished" in _one_line_error(excinfo)


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(RunRecordError, match="no such run directory"):
        read_run(tmp_path / "nowhere")


def test_garbage_in_steps_parquet_is_refused(tmp_path: Path) -> None:
    run = _write(tmp_path / "run")
    table = pq.read_table(run / records.STEPS_FILE)
    kinds = pa.array(["prefill", "prefill", "decode", "warmup"])
    pq.write_table(table.set_column(1, "kind", kinds), run / records.STEPS_FILE)
    with pytest.raises(RunRecordError) as excinfo:
        read_run(run)
    assert "row 3 column 'kind' is 'warmup'" in _one_line_error(excinfo)


def test_another_schema_names_the_column_whose_type_differs(tmp_path: Path) -> None:
    """Same column names, one column written as int32: the names alone cannot say why."""
    run = _write(tmp_path / "run")
    table = pq.read_table(run / records.STEPS_FILE)
    index = table.schema.get_field_index("step")
    narrowed = table.set_column(index, "step", table.column("step").cast(pa.int32()))
    pq.write_table(narrowed, run / records.STEPS_FILE)
    with pytest.raises(RunRecordError) as excinfo:
        read_run(run)
    message = _one_line_error(excinfo)
    assert "column 'step' has type int32, the contract's is int64" in message
    assert "steps.parquet" in message


def test_another_column_order_is_named(tmp_path: Path) -> None:
    run = _write(tmp_path / "run")
    table = pq.read_table(run / records.STEPS_FILE)
    names = table.column_names
    pq.write_table(table.select([names[1], names[0], *names[2:]]), run / records.STEPS_FILE)
    with pytest.raises(RunRecordError, match=r"columns are in the order \['kind', "):
        read_run(run)


def test_garbage_in_server_log_names_file_and_line(tmp_path: Path) -> None:
    log = "INFO start\n[BUCKET] request_nums=2 padded_batch_size=2\n[BUCKET] request_nums=x\n"
    run = _write(tmp_path / "run", server_log=log)
    with pytest.raises(RunRecordError) as excinfo:
        read_run(run)
    assert f"{run / records.SERVER_LOG_FILE}:3" in _one_line_error(excinfo)


@pytest.mark.parametrize(
    ("frame", "column", "change", "expected"),
    [
        ("requests", "computed_tokens", None, "missing column 'computed_tokens'"),
        ("requests", "session", [0.0, 1.0, 0.0, 1.0], "column 'session' has dtype float64"),
        ("requests", "turn", [0, 0, 2, 1], "row 2 column 'turn' is 2"),
        ("requests", "turn", [0, 0, 1, 0], "row 3 column 'turn' is 0"),
        ("requests", "turn", [0, -1, 1, 1], "row 1 column 'turn' is -1"),
        ("steps", "b", pd.array([None, None, 1, 2], dtype="Int64"), "decode step with n=2, b=1"),
        ("steps", "step", [0, 1, 3, 4], "column 'step' is 3, expected 2"),
    ],
)
def test_contract_violations_name_the_column(
    tmp_path: Path, frame, column, change, expected
) -> None:
    data = {"requests": _requests(), "steps": _steps()}
    if change is None:
        data[frame] = data[frame].drop(columns=[column])
    else:
        data[frame][column] = change
    with pytest.raises(RunRecordError) as excinfo:
        _write(tmp_path / "run", **data)
    message = _one_line_error(excinfo)
    assert expected in message and f"{frame}.parquet" in message
    assert not (tmp_path / "run").exists()


def test_multi_round_sessions_keep_their_round_indices(tmp_path: Path) -> None:
    """A session of K rounds has rows with turn 0 .. K-1, in any row order."""
    requests = _requests().assign(session=[0, 1, 0, 0], turn=[2, 0, 0, 1])
    run = _write(tmp_path / "run", requests=requests)
    back = read_run(run).requests
    assert list(zip(back["session"], back["turn"], strict=True)) == [(0, 2), (1, 0), (0, 0), (0, 1)]


def test_extra_column_is_refused(tmp_path: Path) -> None:
    requests = _requests().assign(note="x")
    with pytest.raises(RunRecordError, match="unexpected column 'note'"):
        _write(tmp_path / "run", requests=requests)


def test_manifest_keys_are_checked(tmp_path: Path) -> None:
    manifest = _manifest()
    del manifest["plan_sha256"]
    with pytest.raises(RunRecordError, match="manifest lacks key 'plan_sha256'"):
        _write(tmp_path / "run", manifest=manifest)
    with pytest.raises(RunRecordError, match="manifest 'backend' is 'gpu'"):
        _write(tmp_path / "run", manifest=_manifest() | {"backend": "gpu"})


def test_manifest_template_fills_the_contract() -> None:
    manifest = _manifest()
    assert set(manifest) == set(records.MANIFEST_KEYS)
    assert manifest["configuration"] == {"buckets": [1, 2, 4, 8], "batch_size": 8, "slots": 8}
    assert manifest["prereg"] == {"study": None, "commit": None, "committed_at": None}
    assert manifest["software"]["pyarrow"] == pa.__version__
    assert set(records.software_versions()) >= {"python", "rearrival", "pandas", "snakemake"}


def test_run_ids_are_deterministic_and_distinct() -> None:
    first = records.new_run_id("mech", "n6 wait", 2, "emulated")
    assert first == records.new_run_id("mech", "n6 wait", 2, "emulated")
    assert first.startswith("mech.n6-wait.r2.emulated.")
    assert first != records.new_run_id("mech", "n6/wait", 2, "emulated")
    assert first != records.new_run_id("mech", "n6 wait", 3, "emulated")


def test_failed_run_with_no_rows_is_written(tmp_path: Path) -> None:
    empty_requests = pd.DataFrame(columns=[c for c, _, _ in records.REQUEST_COLUMNS])
    empty_steps = pd.DataFrame(columns=[c for c, _, _ in records.STEP_COLUMNS])
    run = _write(
        tmp_path / "run",
        requests=empty_requests,
        steps=empty_steps,
        manifest=_manifest("failed", "server did not start: port 8000 in use"),
    )
    record = read_run(run, require_complete=False)
    assert record.requests.empty and record.steps.empty
    assert record.requests["computed_tokens"].dtype == "Int64"
    assert record.manifest["reason"] == "server did not start: port 8000 in use"


@pytest.mark.parametrize("change", ["edited", "added", "removed"])
def test_a_file_changed_after_writing_is_refused_naming_run_and_file(
    tmp_path: Path, change: str
) -> None:
    run = _write(tmp_path / "run", server_log="INFO x\n")
    # server.log is optional, so only the seal notices it removed
    target = run / {"edited": "metrics.json", "added": "extra.csv", "removed": "server.log"}[change]
    if change == "edited":
        target.write_text(target.read_text().replace("896.0", "897.0"))
    elif change == "added":
        target.write_text("a,b\n")
    else:
        target.unlink()
    with pytest.raises(RunRecordError) as excinfo:
        read_run(run)
    message = _one_line_error(excinfo)
    assert f"{target}: {change} after run" in message


def test_manifest_records_the_witness_only_when_a_study_has_one() -> None:
    common = dict(
        study="grid",
        backend="emulated",
        configuration=RblnConfiguration((1, 2), 2),
        variant="wait",
        condition="baseline-wait",
        replicate=0,
        n=2,
        plan_path="p.parquet",
        plan_sha256="a" * 64,
        plan_seed=1,
        run_seed=2,
        condition_order=["baseline-wait"],
    )
    prereg = {"study": "grid", "commit": "c" * 40, "committed_at": "2026-01-01T00:00:00+00:00"}
    plain = records.manifest_template(**common, prereg=prereg)
    assert plain["prereg"] == prereg  # the default pipeline's manifests are unchanged
    witness = {"remote": "git://127.0.0.1/w.git", "ref": "refs/rearrival/prereg/grid/" + "c" * 40}
    witnessed = records.manifest_template(**common, prereg=prereg | {"witness": witness})
    assert witnessed["prereg"] == prereg | {"witness": witness}
