"""Reading run records back (docs/DESIGN.md §6): every value re-checked, every file's
sha256 compared with its manifest, and incomplete runs refused unless asked for."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from rearrival.measure.records.contract import (
    MANIFEST_FILE,
    METRICS_FILE,
    REQUEST_COLUMNS,
    REQUESTS_FILE,
    SERVER_LOG_FILE,
    STEP_COLUMNS,
    STEPS_FILE,
    TOKENS_FILE,
    RunRecord,
    RunRecordError,
    request_columns,
    step_columns,
)
from rearrival.measure.records.validate import (
    check_manifest,
    check_metrics,
    check_requests,
    check_steps,
    contract_table,
    schema_difference,
)
from rearrival.measure.steplog import StepLogError, parse_step_log


def _read_table(
    path: Path,
    columns: tuple[tuple[str, pa.DataType, bool], ...],
    contract: Callable[[list[str]], tuple[tuple[str, pa.DataType, bool], ...]] | None = None,
) -> pd.DataFrame:
    """One contract table; ``contract`` picks the columns from the file's own names (the
    steps of a vLLM run carry the iteration columns)."""
    if not path.is_file():
        raise RunRecordError(
            f"{path}: missing; the run record is incomplete, re-run the "
            "condition into a fresh output directory"
        )
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise RunRecordError(
            f"{path}: not a readable Parquet file (truncated or damaged: "
            f"{str(exc).splitlines()[0]}); re-run the condition into a fresh "
            "output directory"
        ) from None
    found = [(field.name, field.type) for field in table.schema]
    if contract is not None:
        columns = contract([name for name, _ in found])
    expected = [(name, kind) for name, kind, _ in columns]
    if found != expected:
        raise RunRecordError(
            f"{path}: {schema_difference(found, expected)}, so it does not match the run "
            "record contract (docs/DESIGN.md, run records); re-run the condition with this "
            "rearrival version"
        )
    frame = {}
    for name, kind, nullable in columns:
        column = table.column(name)
        if kind == pa.int64() and nullable:
            frame[name] = pd.array(column.to_pylist(), dtype="Int64")
        else:
            frame[name] = column.to_pandas()
    return pd.DataFrame(frame)


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunRecordError(
            f"{path}: missing; the {what} was not written, re-run the "
            "condition into a fresh output directory"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RunRecordError(
            f"{path}: not valid JSON ({exc}); the file is damaged, re-run "
            "the condition into a fresh output directory"
        ) from None


def read_run(run_dir: str | Path, require_complete: bool = True) -> RunRecord:
    """Read and validate one run directory.

    With ``require_complete`` (the default, and the only mode decisions use) a run whose
    manifest status is not 'complete' is refused with the recorded reason (docs/DESIGN.md §6).
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunRecordError(
            f"{run_dir}: no such run directory; check the path or produce it with `rearrival run`"
        )
    manifest_path = run_dir / MANIFEST_FILE
    if not manifest_path.is_file():
        raise RunRecordError(
            f"{manifest_path}: missing, so the run never finished; delete "
            f"{run_dir} and re-run the condition"
        )
    manifest = _read_json(manifest_path, "manifest")
    check_manifest(manifest, str(manifest_path))
    if require_complete and manifest["status"] != "complete":
        raise RunRecordError(
            f"{run_dir}: run status is '{manifest['status']}' (reason: "
            f"{manifest['reason']}); it cannot be used, re-run the condition "
            "into a fresh output directory"
        )
    requests_path, steps_path = run_dir / REQUESTS_FILE, run_dir / STEPS_FILE
    requests = _read_table(requests_path, REQUEST_COLUMNS, request_columns)
    steps = _read_table(steps_path, STEP_COLUMNS, step_columns)
    # Re-check values: a file edited or damaged after writing must not reach channel A.
    complete = manifest["status"] == "complete"
    check_requests(
        contract_table(requests, request_columns(requests.columns), str(requests_path), complete),
        str(requests_path),
        complete,
    )
    steps_table = contract_table(steps, step_columns(steps.columns), str(steps_path), complete)
    check_steps(steps_table, str(steps_path))
    metrics = _read_json(run_dir / METRICS_FILE, "metrics scrape")
    check_metrics(metrics, str(run_dir / METRICS_FILE))
    log_path = run_dir / SERVER_LOG_FILE
    server_log = None
    if log_path.is_file():
        try:
            server_log = log_path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise RunRecordError(
                f"{log_path}: not UTF-8 text (garbage in the step log); "
                "re-run the condition into a fresh output directory"
            ) from None
        try:
            parse_step_log(log_path)
        except StepLogError as exc:
            raise RunRecordError(str(exc)) from None
    tokens_path = run_dir / TOKENS_FILE
    tokens = None
    if tokens_path.is_file():
        try:
            tokens = pq.read_table(tokens_path).to_pandas()
        except (pa.ArrowException, OSError):
            raise RunRecordError(
                f"{tokens_path}: not a readable Parquet file; re-run the "
                "condition into a fresh output directory"
            ) from None
    _check_sealed(run_dir, manifest)
    return RunRecord(
        requests=requests,
        steps=steps,
        metrics=metrics,
        manifest=manifest,
        server_log=server_log,
        path=run_dir,
        tokens=tokens,
    )


def _check_sealed(run_dir: Path, manifest: dict[str, Any]) -> None:
    """Every file the run wrote still has the sha256 its manifest recorded, and no file
    was added or removed since (manifests written before sealing have no ``files``)."""
    if "files" not in manifest:
        return
    sealed = manifest["files"]
    found = {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in run_dir.iterdir()
        if p.is_file() and p.name != MANIFEST_FILE
    }
    for name in sorted(set(sealed) | set(found)):
        change = (
            "removed"
            if name not in found
            else "added"
            if name not in sealed
            else "edited"
            if sealed[name] != found[name]
            else None
        )
        if change:
            raise RunRecordError(
                f"{run_dir / name}: {change} after run {manifest['run_id']} "
                "wrote its manifest (sha256 in manifest.json 'files'); "
                "restore the measured file or re-run the condition"
            )
