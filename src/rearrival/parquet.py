"""Data frames as Parquet files, written atomically: every stage output that is a table
(predictions, channels, search scores, calibration frames) goes through here, so the
same data always gives the same bytes and a reader never sees half a file.

Kept apart from ``rearrival.atomic`` so the modules that only write text and JSON
(the rbln driver, the ledger) do not pay pyarrow's import at start-up. A table built as
plain rows (the search's scores) is written by ``write_rows`` without a frame; pyarrow
itself still imports pandas, when installed, the first time it builds an array.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from rearrival.atomic import atomic_write_bytes
from rearrival.errors import StageError

if TYPE_CHECKING:
    import pandas as pd


def _write_table(table: pa.Table, out: Path) -> None:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    atomic_write_bytes(out, sink.getvalue().to_pybytes())


def write_frame(frame: pd.DataFrame, out: Path) -> None:
    """Parquet without the pandas index, published atomically (same data, same bytes)."""
    _write_table(pa.Table.from_pandas(frame, preserve_index=False), out)


def write_rows(rows: Sequence[Mapping[str, Any]], out: Path) -> None:
    """Parquet of plain rows (one mapping per row, the first row's keys as the columns),
    published atomically; no pandas metadata, so the bytes do not depend on pandas."""
    _write_table(pa.Table.from_pylist(list(rows)), out)


def read_frame(path: Path, stage: str) -> pd.DataFrame:
    """A stage's table; missing means that stage has not run (the message says which)."""
    import pandas as pd

    if not path.exists():
        raise StageError(f"{path}: missing; run the {stage} stage first")
    return pd.read_parquet(path)
