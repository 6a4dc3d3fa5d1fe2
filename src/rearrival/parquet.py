"""Data frames as Parquet files, written atomically: every stage output that is a table
(predictions, channels, search scores, calibration frames) goes through here, so the
same data always gives the same bytes and a reader never sees half a file.

Kept apart from ``rearrival.atomic`` so the modules that only write text and JSON
(the rbln driver, the ledger) do not pay pandas' import (about 0.7 s) at start-up.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from rearrival.atomic import atomic_write_bytes
from rearrival.errors import StageError


def write_frame(frame: pd.DataFrame, out: Path) -> None:
    """Parquet without the pandas index, published atomically (same data, same bytes)."""
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), sink, compression="zstd")
    atomic_write_bytes(out, sink.getvalue().to_pybytes())


def read_frame(path: Path, stage: str) -> pd.DataFrame:
    """A stage's table; missing means that stage has not run (the message says which)."""
    if not path.exists():
        raise StageError(f"{path}: missing; run the {stage} stage first")
    return pd.read_parquet(path)
