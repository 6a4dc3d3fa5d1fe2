"""Validation of run-record tables and JSON against the contract (docs/DESIGN.md §6).

Both ``write_run`` and ``read_run`` run these checks, so a run that breaks the contract
is refused when written and again when a file was damaged or edited afterwards.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import pandas as pd
import pyarrow as pa

from rearrival.measure.records.contract import (
    CONFIGURATION_KEYS,
    DECODE,
    MANIFEST_KEYS,
    MIXED,
    PREFILL,
    ROUND_COLUMN,
    STATUSES,
    VLLM_CONFIGURATION_KEYS,
    RunRecordError,
)
from rearrival.vocabulary import BACKENDS, VARIANTS


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


def contract_table(
    frame: pd.DataFrame,
    columns: tuple[tuple[str, pa.DataType, bool], ...],
    where: str,
    complete: bool = True,
) -> pa.Table:
    """``frame`` as an Arrow table with exactly the contract's columns, types and order."""
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


def check_requests(table: pa.Table, where: str, complete: bool = True) -> None:
    """Refuse request rows no channel could use: bad rounds, negative counts, bad times."""
    rows = table.to_pydict()
    _check_rounds(rows["session"], rows[ROUND_COLUMN], where)
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


def _check_rounds(sessions: list[int], rounds: list[int], where: str) -> None:
    """Each session's rows carry its round indices 0 .. K-1 (column ROUND_COLUMN), each
    once.

    A round index that is negative, repeated, or not below the session's row count is the
    first row that breaks this; with none such, the indices are exactly 0 .. K-1.
    """
    counts: dict[int, int] = {}
    for session in sessions:
        counts[session] = counts.get(session, 0) + 1
    seen: set[tuple[int, int]] = set()
    for i, (session, index) in enumerate(zip(sessions, rounds, strict=True)):
        if not 0 <= index < counts[session] or (session, index) in seen:
            raise RunRecordError(
                f"{where}: row {i} column '{ROUND_COLUMN}' is {index}; session {session}'s "
                "rows must carry its round indices 0, 1, ... once each (0 is the first request)"
            )
        seen.add((session, index))


def check_steps(table: pa.Table, where: str) -> None:
    """Refuse step rows channel A could not price: unknown kind, bad (n, b), gaps."""
    rows = table.to_pydict()
    iteration = "elapsed_s" in rows
    for i, (step, kind, n, b) in enumerate(
        zip(rows["step"], rows["kind"], rows["n"], rows["b"], strict=True)
    ):
        if step != i:
            raise RunRecordError(
                f"{where}: row {i} column 'step' is {step}, expected {i} "
                "(steps are numbered 0.. in order)"
            )
        if iteration:
            _check_iteration_step(rows, i, where)
            continue
        if kind not in (PREFILL, DECODE):
            raise RunRecordError(
                f"{where}: row {i} column 'kind' is {kind!r}; use 'prefill' or 'decode'"
            )
        if kind == DECODE and (b is None or n < 1 or b < n):
            raise RunRecordError(
                f"{where}: row {i} is a decode step with n={n}, b={b}; a "
                "decode step needs 1 <= n <= b (the chosen bucket)"
            )
        if kind == PREFILL and (n != 1 or b is not None):
            raise RunRecordError(
                f"{where}: row {i} is a prefill step with n={n}, b={b}; a "
                "prefill step has n=1 and no bucket"
            )


def _check_iteration_step(rows: dict[str, list[Any]], i: int, where: str) -> None:
    """A vLLM iteration row (docs/DESIGN.md §15): its kind follows its counts, ``n`` is its
    decode requests and ``b`` its decode tokens as run (at least the tokens), absent
    when nothing decodes."""
    context, decode = rows["context_requests"][i], rows["generation_requests"][i]
    tokens = rows["generation_tokens"][i]
    kind, n, b = rows["kind"][i], rows["n"][i], rows["b"][i]
    expected = MIXED if context and decode else PREFILL if context else DECODE
    counts = (context, rows["context_tokens"][i], decode, tokens)
    if (
        kind != expected
        or n != decode
        or (b is None) != (tokens == 0)
        or (b is not None and b < tokens)
        or min(counts) < 0
        or not (context or decode)
        or not rows["elapsed_s"][i] >= 0
    ):
        raise RunRecordError(
            f"{where}: row {i} (vLLM iteration {rows['iteration'][i]}) has kind={kind!r}, "
            f"n={n}, b={b} for {context} context and {decode} generation requests "
            f"({tokens} tokens); kind, n and b must follow the iteration's counts"
        )


def check_metrics(metrics: Any, where: str) -> None:
    """Refuse a metrics scrape that is not two mappings of counter name to number."""
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


def check_manifest(manifest: Any, where: str) -> None:
    """Refuse a manifest lacking a contract key or holding a value outside the vocabulary."""
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
    keys = (
        VLLM_CONFIGURATION_KEYS
        if isinstance(configuration, dict) and configuration.get("substrate") == "vllm"
        else CONFIGURATION_KEYS
    )
    if not isinstance(configuration, dict) or any(k not in configuration for k in keys):
        raise RunRecordError(f"{where}: manifest 'configuration' needs {', '.join(keys)}")
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


def schema_difference(
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
