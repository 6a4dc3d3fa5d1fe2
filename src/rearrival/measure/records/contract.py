"""The run-record contract (docs/DESIGN.md §6): file names, table columns, manifest keys.

These constants are what every writer and reader of a run directory agrees on; the
other modules of this package check, write and read against them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from rearrival.errors import RearrivalError

REQUESTS_FILE = "requests.parquet"
STEPS_FILE = "steps.parquet"
TOKENS_FILE = "tokens.parquet"
METRICS_FILE = "metrics.json"
MANIFEST_FILE = "manifest.json"
SERVER_LOG_FILE = "server.log"

STATUSES = ("complete", "failed", "partial")
STEP_KINDS = ("prefill", "decode")

# (column, arrow type, nullable). "Nullable" integers are pandas Int64 in memory: an
# unknown count is recorded as unknown, never as 0 (UNKNOWN is an observation; docs/DESIGN.md §6).
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
