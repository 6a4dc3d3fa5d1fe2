"""Run records (docs/DESIGN.md §6): the one file contract between measurement and decisions.

Every backend (emulated, emulated-http, rbln) writes a run directory through
``write_run`` and every later stage reads it through ``read_run``, so decisions never
know which backend produced a run (docs/DESIGN.md §5). A directory appears under its final
name only when complete: everything is written into a temporary sibling directory,
``manifest.json`` last, and the directory is renamed in one step. A killed writer
therefore leaves a hidden temp directory, never a half run that a decision could use.

Failed or cut-short runs are written too (status ``failed``/``partial`` with a reason),
because the paper keeps its withheld and failed evidence (Section II-D); ``read_run``
refuses them unless the caller asks for incomplete runs explicitly.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import re
import shutil
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from rearrival.atomic import umask_mode
from rearrival.errors import RearrivalError
from rearrival.measure.steplog import StepLogError, parse_step_log
from rearrival.vocabulary import BACKENDS, VARIANTS

REQUESTS_FILE = "requests.parquet"
STEPS_FILE = "steps.parquet"
TOKENS_FILE = "tokens.parquet"
METRICS_FILE = "metrics.json"
MANIFEST_FILE = "manifest.json"
SERVER_LOG_FILE = "server.log"

STATUSES = ("complete", "failed", "partial")
STEP_KINDS = ("prefill", "decode")

# (column, arrow type, nullable). "Nullable" integers are pandas Int64 in memory: an
# unknown count is recorded as unknown, never as 0 (STYLE: UNKNOWN is an observation).
# 'turn' is the request's round index in its session, 0 .. K-1 (the paper's session:
# 0 = first request, 1 = re-arrival); the name is kept so existing records keep their bytes.
REQUEST_COLUMNS: tuple[tuple[str, pa.DataType, bool], ...] = (
    ("session", pa.int64(), False),
    ("turn", pa.int64(), False),
    ("send_s", pa.float64(), False),
    ("first_token_s", pa.float64(), False),
    ("complete_s", pa.float64(), False),
    ("prompt_tokens", pa.int64(), False),
    ("cached_tokens", pa.int64(), True),
    ("computed_tokens", pa.int64(), True),
    ("generated_tokens", pa.int64(), False),
    ("prefill_s", pa.float64(), True),
)
STEP_COLUMNS: tuple[tuple[str, pa.DataType, bool], ...] = (
    ("step", pa.int64(), False),
    ("kind", pa.string(), False),
    ("n", pa.int64(), False),
    ("b", pa.int64(), True),
    ("start_s", pa.float64(), True),
    ("end_s", pa.float64(), True),
)

MANIFEST_KEYS = (
    "run_id",
    "study",
    "backend",
    "configuration",
    "variant",
    "condition",
    "replicate",
    "n",
    "plan_path",
    "plan_sha256",
    "seeds",
    "software",
    "patch_sha256",
    "prereg",
    "started_at",
    "finished_at",
    "condition_order",
    "status",
    "reason",
    "time_scale",
)
CONFIGURATION_KEYS = ("buckets", "batch_size", "slots")
PREREG_KEYS = ("study", "commit", "committed_at")

# Distributions whose versions explain a run; absent ones are recorded as absent.
SOFTWARE = (
    "rearrival",
    "pandas",
    "pyarrow",
    "numpy",
    "scipy",
    "snakemake",
    "aiohttp",
    "vllm",
    "vllm-rbln",
    "optimum-rbln",
)
PARQUET_COMPRESSION = "zstd"


class RunRecordError(RearrivalError, ValueError):
    """A run directory that cannot be written or used; names the file and the fix."""


@dataclass(frozen=True)
class RunRecord:
    """One run as read back: the Parquet tables as DataFrames plus JSON and the step log.

    ``tokens`` holds optional per-token arrival times of streaming backends (not part of
    the docs/DESIGN.md §6 contract, written as given); ``None`` when the run has none.
    """

    requests: pd.DataFrame
    steps: pd.DataFrame
    metrics: dict[str, Any]
    manifest: dict[str, Any]
    server_log: str | None
    path: Path
    tokens: pd.DataFrame | None = None

    @property
    def run_id(self) -> str:
        return str(self.manifest["run_id"])

    @property
    def replicate(self) -> int:
        return int(self.manifest["replicate"])


# --- small helpers backends use to fill manifests consistently -------------------------


def utc_now_iso() -> str:
    """Current UTC time as ISO 8601 with an explicit +00:00 offset (manifest times)."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def software_versions() -> dict[str, str]:
    """Versions of Python and the packages that shape a run ('absent' when not installed).

    Recorded in every manifest so a result can be traced to the exact stack (docs/DESIGN.md §6).
    """
    versions = {"python": platform.python_version()}
    for name in SOFTWARE:
        try:
            versions[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


def _slug(value: object) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", str(value)).strip("-") or "x"


def new_run_id(study: str, condition: str, replicate: int, backend: str) -> str:
    """Deterministic, file-name-safe id: readable parts plus a short hash of the exact
    inputs, so two labels that slugify alike still get different ids."""
    canonical = json.dumps([study, condition, int(replicate), backend])
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:8]
    parts = (_slug(study), _slug(condition), f"r{int(replicate)}", _slug(backend), digest)
    return ".".join(parts)


def manifest_template(
    *,
    study: str,
    backend: str,
    buckets: list[int] | tuple[int, ...],
    batch_size: int,
    slots: int | None,
    variant: str,
    condition: str,
    replicate: int,
    n: int,
    plan_path: str,
    plan_sha256: str,
    plan_seed: int | None,
    run_seed: int,
    condition_order: list[str] | tuple[str, ...],
    time_scale: float = 1.0,
    patch_sha256: str | None = None,
    prereg: dict[str, Any] | None = None,
    run_id: str | None = None,
    started_at: str | None = None,
) -> dict[str, Any]:
    """A manifest with every contract key; status starts as 'partial' (the run has not
    finished) until ``finish_manifest`` marks the outcome. ``slots`` None means
    batch_size slots (eager attention, docs/DESIGN.md §1)."""
    return {
        "run_id": run_id or new_run_id(study, condition, replicate, backend),
        "study": study,
        "backend": backend,
        "configuration": {
            "buckets": [int(b) for b in buckets],
            "batch_size": int(batch_size),
            "slots": int(batch_size if slots is None else slots),
        },
        "variant": variant,
        "condition": condition,
        "replicate": int(replicate),
        "n": int(n),
        "plan_path": str(plan_path),
        "plan_sha256": plan_sha256,
        "seeds": {"plan": plan_seed, "run": int(run_seed)},
        "software": software_versions(),
        "patch_sha256": patch_sha256,
        "prereg": _prereg_entry(prereg or {}),
        "started_at": started_at or utc_now_iso(),
        "finished_at": None,
        "condition_order": [str(c) for c in condition_order],
        "status": "partial",
        "reason": "run did not finish",
        "time_scale": float(time_scale),
    }


def _prereg_entry(prereg: dict[str, Any]) -> dict[str, Any]:
    """The manifest's ``prereg`` field; ``witness`` (remote and ref) only when the study
    has a witness, so manifests of the default pipeline keep their three keys."""
    entry = {key: prereg.get(key) for key in PREREG_KEYS}
    if prereg.get("witness"):
        entry["witness"] = dict(prereg["witness"])
    return entry


def finish_manifest(
    manifest: dict[str, Any],
    *,
    status: str = "complete",
    reason: str | None = None,
    finished_at: str | None = None,
) -> dict[str, Any]:
    """A copy of ``manifest`` with the run's outcome and end time filled in."""
    return manifest | {
        "status": status,
        "reason": reason,
        "finished_at": finished_at or utc_now_iso(),
    }


# --- validation ----------------------------------------------------------------------------


def _is_int_dtype(series: pd.Series) -> bool:
    return pd.api.types.is_integer_dtype(series.dtype) and not pd.api.types.is_bool_dtype(
        series.dtype
    )


def _column_array(
    frame: pd.DataFrame, name: str, kind: pa.DataType, nullable: bool, where: str
) -> pa.Array:
    """One contract column as an Arrow array, refusing dtypes that would change meaning.

    ``nullable`` is the contract's nullability, widened by the caller for float columns
    of runs that did not complete (a request cut off by a dying server has no end time).
    """
    series = frame[name]
    if series.empty:  # an empty frame built without dtypes (e.g. a run that failed early)
        return pa.array([], type=kind)
    if kind == pa.string():
        values = series.tolist()
        if any(not isinstance(v, str) for v in values):
            raise RunRecordError(f"{where}: column '{name}' must hold strings only")
        return pa.array(values, type=pa.string())
    if kind == pa.int64():
        if _is_int_dtype(series):
            pass
        elif nullable and series.isna().all():
            series = series.astype("Int64")
        else:
            raise RunRecordError(
                f"{where}: column '{name}' has dtype {series.dtype}, expected "
                f"{'Int64 (nullable)' if nullable else 'int64'}; cast it with "
                f".astype('{'Int64' if nullable else 'int64'}')"
            )
        if not nullable and series.isna().any():
            raise RunRecordError(f"{where}: column '{name}' has missing values; it is required")
        return pa.array(series.astype("Int64"), type=pa.int64(), from_pandas=True)
    if not pd.api.types.is_numeric_dtype(series.dtype) or pd.api.types.is_bool_dtype(series.dtype):
        raise RunRecordError(
            f"{where}: column '{name}' has dtype {series.dtype}, expected float64 seconds"
        )
    floats = series.astype("float64")
    if not nullable and floats.isna().any():
        raise RunRecordError(f"{where}: column '{name}' has missing values; it is required")
    return pa.array(floats.to_numpy(), type=pa.float64())


def _contract_table(
    frame: pd.DataFrame,
    columns: tuple[tuple[str, pa.DataType, bool], ...],
    where: str,
    complete: bool = True,
) -> pa.Table:
    names = [name for name, _, _ in columns]
    missing = [name for name in names if name not in frame.columns]
    if missing:
        raise RunRecordError(
            f"{where}: missing column '{missing[0]}'; the contract (docs/DESIGN.md §6) "
            f"needs {', '.join(names)}"
        )
    extra = [str(c) for c in frame.columns if c not in names]
    if extra:
        raise RunRecordError(
            f"{where}: unexpected column '{extra[0]}'; the contract (docs/DESIGN.md §6) "
            f"has exactly {', '.join(names)}"
        )
    arrays = [
        _column_array(frame, name, kind, nullable or (not complete and kind == pa.float64()), where)
        for name, kind, nullable in columns
    ]
    schema = pa.schema(
        [pa.field(name, kind, nullable=nullable) for name, kind, nullable in columns]
    )
    return pa.Table.from_arrays(arrays, schema=schema)


def _check_requests(table: pa.Table, where: str, complete: bool = True) -> None:
    rows = table.to_pydict()
    _check_rounds(rows["session"], rows["turn"], where)
    for name in ("prompt_tokens", "generated_tokens", "cached_tokens", "computed_tokens"):
        for i, value in enumerate(rows[name]):
            if value is not None and value < 0:
                raise RunRecordError(f"{where}: row {i} column '{name}' is negative ({value})")
    for i, (send, done) in enumerate(zip(rows["send_s"], rows["complete_s"], strict=True)):
        known = not (math.isnan(send) or math.isnan(done))
        if (complete or known) and not (
            math.isfinite(send) and math.isfinite(done) and done >= send
        ):
            raise RunRecordError(
                f"{where}: row {i} has send_s={send}, complete_s={done}; a "
                "request needs finite times with complete_s >= send_s"
            )


def _check_rounds(sessions: list[int], turns: list[int], where: str) -> None:
    """Each session's rows carry its round indices 0 .. K-1 (column 'turn'), each once.

    A turn that is negative, repeated, or not below the session's row count is the
    first row that breaks this; with none such, the turns are exactly 0 .. K-1.
    """
    counts: dict[int, int] = {}
    for session in sessions:
        counts[session] = counts.get(session, 0) + 1
    seen: set[tuple[int, int]] = set()
    for i, (session, turn) in enumerate(zip(sessions, turns, strict=True)):
        if not 0 <= turn < counts[session] or (session, turn) in seen:
            raise RunRecordError(
                f"{where}: row {i} column 'turn' is {turn}; session {session}'s rows "
                "must carry its round indices 0, 1, ... once each (0 is the first request)"
            )
        seen.add((session, turn))


def _check_steps(table: pa.Table, where: str) -> None:
    """Refuse step rows channel A could not price: unknown kind, bad (n, b), gaps."""
    rows = table.to_pydict()
    for i, (step, kind, n, b) in enumerate(
        zip(rows["step"], rows["kind"], rows["n"], rows["b"], strict=True)
    ):
        if step != i:
            raise RunRecordError(
                f"{where}: row {i} column 'step' is {step}, expected {i} "
                "(steps are numbered 0.. in order)"
            )
        if kind not in STEP_KINDS:
            raise RunRecordError(
                f"{where}: row {i} column 'kind' is {kind!r}; use 'prefill' or 'decode'"
            )
        if kind == "decode" and (b is None or n < 1 or b < n):
            raise RunRecordError(
                f"{where}: row {i} is a decode step with n={n}, b={b}; a "
                "decode step needs 1 <= n <= b (the chosen bucket)"
            )
        if kind == "prefill" and (n != 1 or b is not None):
            raise RunRecordError(
                f"{where}: row {i} is a prefill step with n={n}, b={b}; a "
                "prefill step has n=1 and no bucket"
            )


def _check_metrics(metrics: Any, where: str) -> None:
    if not isinstance(metrics, dict) or set(metrics) != {"before", "after"}:
        raise RunRecordError(
            f"{where}: metrics must be {{'before': {{...}}, 'after': {{...}}}} "
            "(use {} for a side that was not scraped)"
        )
    for side in ("before", "after"):
        scrape = metrics[side]
        if not isinstance(scrape, dict):
            raise RunRecordError(f"{where}: metrics['{side}'] must be a mapping name -> value")
        for name, value in scrape.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise RunRecordError(
                    f"{where}: metrics['{side}']['{name}'] is {value!r}; counter values are numbers"
                )


def _check_manifest(manifest: Any, where: str) -> None:
    if not isinstance(manifest, dict):
        raise RunRecordError(f"{where}: the manifest must be a JSON object")
    missing = [key for key in MANIFEST_KEYS if key not in manifest]
    if missing:
        raise RunRecordError(
            f"{where}: manifest lacks key '{missing[0]}'; build it with "
            "rearrival.measure.records.manifest_template"
        )
    expected = {"backend": BACKENDS, "variant": VARIANTS, "status": STATUSES}
    for key, allowed in expected.items():
        if manifest[key] not in allowed:
            raise RunRecordError(
                f"{where}: manifest '{key}' is {manifest[key]!r}; use one of {', '.join(allowed)}"
            )
    if manifest["status"] != "complete" and not manifest["reason"]:
        raise RunRecordError(
            f"{where}: manifest status is '{manifest['status']}' but 'reason' "
            "is empty; say why the run did not complete"
        )
    configuration = manifest["configuration"]
    if not isinstance(configuration, dict) or any(
        k not in configuration for k in CONFIGURATION_KEYS
    ):
        raise RunRecordError(
            f"{where}: manifest 'configuration' needs {', '.join(CONFIGURATION_KEYS)}"
        )
    for key in ("started_at", "finished_at"):
        try:
            datetime.fromisoformat(str(manifest[key]))
        except ValueError:
            raise RunRecordError(
                f"{where}: manifest '{key}' is {manifest[key]!r}; use an ISO "
                "8601 UTC time (records.utc_now_iso())"
            ) from None
    if not isinstance(manifest["seeds"], dict) or "run" not in manifest["seeds"]:
        raise RunRecordError(f"{where}: manifest 'seeds' needs 'plan' and 'run'")


# --- writing -------------------------------------------------------------------------------


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
) -> Path:
    """Validate one run against the contract and publish it atomically at ``out_dir``.

    Files go into a temporary sibling directory, ``manifest.json`` last, and the
    directory is renamed into place, so a reader sees the whole run or nothing. An
    existing run (or any non-empty directory) is never overwritten.
    """
    out_dir = Path(out_dir)
    _refuse_existing(out_dir)
    _check_manifest(manifest, f"{out_dir}/{MANIFEST_FILE}")
    complete = manifest["status"] == "complete"
    requests_where, steps_where = f"{out_dir}/{REQUESTS_FILE}", f"{out_dir}/{STEPS_FILE}"
    tables = {
        REQUESTS_FILE: _contract_table(requests, REQUEST_COLUMNS, requests_where, complete),
        STEPS_FILE: _contract_table(steps, STEP_COLUMNS, steps_where, complete),
    }
    _check_requests(tables[REQUESTS_FILE], requests_where, complete)
    _check_steps(tables[STEPS_FILE], steps_where)
    if tokens is not None:
        table = pa.Table.from_pandas(tokens, preserve_index=False)
        tables[TOKENS_FILE] = table.replace_schema_metadata(None)
    _check_metrics(metrics, f"{out_dir}/{METRICS_FILE}")

    contents = {name: _parquet_bytes(table) for name, table in tables.items()}
    contents[METRICS_FILE] = _json_bytes(metrics)
    if server_log is not None:
        contents[SERVER_LOG_FILE] = server_log.encode("utf-8")
    # the manifest seals the run: the sha256 of every file it wrote (checked by read_run)
    manifest = manifest | {
        "files": {name: hashlib.sha256(data).hexdigest() for name, data in sorted(contents.items())}
    }
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}.", suffix=".tmp"))
    try:
        for name, data in contents.items():
            (tmp / name).write_bytes(data)
        (tmp / MANIFEST_FILE).write_bytes(_json_bytes(manifest))
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


# --- reading -------------------------------------------------------------------------------


def _schema_difference(
    found: list[tuple[str, pa.DataType]], expected: list[tuple[str, pa.DataType]]
) -> str:
    """Which column differs and how: missing, unexpected, out of order, or its type
    (both lists of names can be equal while a type is not)."""
    found_types, expected_types = dict(found), dict(expected)
    missing = [name for name in expected_types if name not in found_types]
    extra = [name for name in found_types if name not in expected_types]
    if missing:
        return f"column '{missing[0]}' is missing"
    if extra:
        return f"column '{extra[0]}' is not in the contract"
    for name, kind in expected:
        if found_types[name] != kind:
            return f"column '{name}' has type {found_types[name]}, the contract's is {kind}"
    order = [name for name, _ in expected]
    return f"columns are in the order {[n for n, _ in found]}, the contract's is {order}"


def _read_table(path: Path, columns: tuple[tuple[str, pa.DataType, bool], ...]) -> pd.DataFrame:
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
    expected = [(name, kind) for name, kind, _ in columns]
    found = [(field.name, field.type) for field in table.schema]
    if found != expected:
        raise RunRecordError(
            f"{path}: {_schema_difference(found, expected)}, so it does not match the run "
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
    _check_manifest(manifest, str(manifest_path))
    if require_complete and manifest["status"] != "complete":
        raise RunRecordError(
            f"{run_dir}: run status is '{manifest['status']}' (reason: "
            f"{manifest['reason']}); it cannot be used, re-run the condition "
            "into a fresh output directory"
        )
    requests_path, steps_path = run_dir / REQUESTS_FILE, run_dir / STEPS_FILE
    requests = _read_table(requests_path, REQUEST_COLUMNS)
    steps = _read_table(steps_path, STEP_COLUMNS)
    # Re-check values: a file edited or damaged after writing must not reach channel A.
    complete = manifest["status"] == "complete"
    _check_requests(
        _contract_table(requests, REQUEST_COLUMNS, str(requests_path), complete),
        str(requests_path),
        complete,
    )
    _check_steps(_contract_table(steps, STEP_COLUMNS, str(steps_path), complete), str(steps_path))
    metrics = _read_json(run_dir / METRICS_FILE, "metrics scrape")
    _check_metrics(metrics, str(run_dir / METRICS_FILE))
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
