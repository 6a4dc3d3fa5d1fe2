"""Writing run records atomically (docs/DESIGN.md §6).

A directory appears under its final name only when complete: everything is written into
a temporary sibling directory, ``manifest.json`` last, and the directory is renamed in
one step, so a killed writer leaves a hidden temp directory, never a half run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from rearrival.atomic import umask_mode
from rearrival.measure.records.contract import (
    MANIFEST_FILE,
    METRICS_FILE,
    REQUESTS_FILE,
    SERVER_LOG_FILE,
    STEPS_FILE,
    TOKENS_FILE,
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
)

PARQUET_COMPRESSION = "zstd"


def _parquet_bytes(table: pa.Table) -> bytes:
    """Same table, same bytes: fixed codec, no statistics, no pandas index metadata."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression=PARQUET_COMPRESSION, write_statistics=False)
    return sink.getvalue().to_pybytes()


def _json_bytes(data: Any) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n").encode()


def _refuse_existing(out_dir: Path) -> None:
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise RunRecordError(
            f"{out_dir}: exists and is not a directory; choose another output directory"
        )
    if (out_dir / MANIFEST_FILE).exists():
        raise RunRecordError(
            f"{out_dir}: already holds a run record; delete it or choose "
            "another output directory (runs are never overwritten)"
        )
    if any(out_dir.iterdir()):
        raise RunRecordError(
            f"{out_dir}: directory is not empty; delete it or choose another output directory"
        )


def write_run(
    out_dir: str | Path,
    *,
    requests: pd.DataFrame,
    steps: pd.DataFrame,
    metrics: dict[str, Any],
    manifest: dict[str, Any],
    server_log: str | None = None,
    tokens: pd.DataFrame | None = None,
    logs: Mapping[str, str] | None = None,
) -> Path:
    """Validate one run against the contract and publish it atomically at ``out_dir``.

    Files go into a temporary sibling directory, ``manifest.json`` last, and the
    directory is renamed into place, so a reader sees the whole run or nothing. An
    existing run (or any non-empty directory) is never overwritten. ``logs`` are further
    logs kept by name (a fleet run's router and server logs), sealed like every file.
    """
    out_dir = Path(out_dir)
    _refuse_existing(out_dir)
    check_manifest(manifest, f"{out_dir}/{MANIFEST_FILE}")
    complete = manifest["status"] == "complete"
    requests_where, steps_where = f"{out_dir}/{REQUESTS_FILE}", f"{out_dir}/{STEPS_FILE}"
    tables = {
        REQUESTS_FILE: contract_table(
            requests, request_columns(requests.columns), requests_where, complete
        ),
        STEPS_FILE: contract_table(steps, step_columns(steps.columns), steps_where, complete),
    }
    check_requests(tables[REQUESTS_FILE], requests_where, complete)
    check_steps(tables[STEPS_FILE], steps_where)
    if tokens is not None:
        table = pa.Table.from_pandas(tokens, preserve_index=False)
        tables[TOKENS_FILE] = table.replace_schema_metadata(None)
    check_metrics(metrics, f"{out_dir}/{METRICS_FILE}")

    contents = {name: _parquet_bytes(table) for name, table in tables.items()}
    contents[METRICS_FILE] = _json_bytes(metrics)
    if server_log is not None:
        contents[SERVER_LOG_FILE] = server_log.encode("utf-8")
    for name, text in (logs or {}).items():
        contents[name] = text.encode("utf-8")
    # the manifest seals the run: the sha256 of every file it wrote (checked by read_run)
    manifest = manifest | {
        "files": {name: hashlib.sha256(data).hexdigest() for name, data in sorted(contents.items())}
    }
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}.", suffix=".tmp"))
    try:
        for name, data in {**contents, MANIFEST_FILE: _json_bytes(manifest)}.items():
            _write_named(tmp / name, data, out_dir / name)
        os.chmod(tmp, umask_mode(0o777))  # mkdtemp makes 0700; a run dir is a result dir
        try:
            os.rename(tmp, out_dir)  # replaces only an empty dir; fails if someone won the race
        except OSError as exc:
            raise RunRecordError(
                f"{out_dir}: could not be created ({exc.strerror}); delete it "
                "or choose another output directory"
            ) from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def _write_named(path: Path, data: bytes, named: Path) -> None:
    """Write one record file; an OSError (a full disk names no file) names ``named``,
    where the file was to be published."""
    try:
        path.write_bytes(data)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(named)) from exc
