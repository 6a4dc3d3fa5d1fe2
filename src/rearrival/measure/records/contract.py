"""The run-record contract (docs/DESIGN.md §6): file names, table columns, manifest keys.

These constants are what every writer and reader of a run directory agrees on; the
other modules of this package check, write and read against them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
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
# A step prefills, decodes, or (vLLM's chunked prefill, docs/DESIGN.md §15) does both.
PREFILL, DECODE, MIXED = "prefill", "decode", "mixed"
STEP_KINDS = (PREFILL, DECODE, MIXED)

# The request's round index in its session, 0 .. K-1 (the paper's session: 0 = first
# request, 1 = re-arrival), called `round` everywhere in code and plans. On disk the
# column keeps the name it had before multi-round sessions existed, so every record
# written since keeps its bytes and its sealed sha256; readers index frames by this name.
ROUND_COLUMN = "turn"

# (column, arrow type, nullable). "Nullable" integers are pandas Int64 in memory: an
# unknown count is recorded as unknown, never as 0 (UNKNOWN is an observation; docs/DESIGN.md §6).
REQUEST_COLUMNS: tuple[tuple[str, pa.DataType, bool], ...] = (
    ("session", pa.int64(), False),
    (ROUND_COLUMN, pa.int64(), False),
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
# What vLLM's per-iteration log line adds to a step (``--enable-logging-iteration-details``,
# docs/DESIGN.md §15): written by the vllm backend after the columns above, absent from
# every other backend's steps (so their records keep their bytes). On such a step ``n`` is
# the generation (decode) requests and ``b`` the decode tokens as run, padded up to the
# next CUDA-graph capture size (eager: unpadded), unknown when nothing decodes.
ITERATION_COLUMNS: tuple[tuple[str, pa.DataType, bool], ...] = (
    ("iteration", pa.int64(), False),
    ("context_requests", pa.int64(), False),
    ("context_tokens", pa.int64(), False),
    ("generation_requests", pa.int64(), False),
    ("generation_tokens", pa.int64(), False),
    ("elapsed_s", pa.float64(), False),
    ("kv_cache_usage", pa.float64(), False),
)

# What a fleet run (vLLM servers behind vllm-router, README "A study on a real fleet") adds to
# a request: the replica that served it (its index in the manifest's fleet servers) and the
# request id the client sent (``X-Request-Id``), by which that server's log names it.
# Written only by the fleet backend, after the columns above, so every other backend's
# requests keep their bytes.
FLEET_COLUMNS: tuple[tuple[str, pa.DataType, bool], ...] = (
    ("replica", pa.int64(), False),
    ("request_id", pa.string(), False),
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
# A vLLM run's manifest configuration (rearrival.model.configuration.VllmConfiguration)
# carries its substrate, so a reader knows which knobs to expect.
VLLM_CONFIGURATION_KEYS = (
    "substrate",
    "buckets",
    "batch_size",
    "num_blocks",
    "block_size",
    "max_num_batched_tokens",
)
PREREG_KEYS = ("study", "commit", "committed_at")


def request_columns(names: object) -> tuple[tuple[str, pa.DataType, bool], ...]:
    """The requests contract a table with these column names is held to: with the fleet
    columns when it has any of them, else the base columns."""
    fleet = {name for name, _, _ in FLEET_COLUMNS}
    has_fleet = any(str(name) in fleet for name in names)  # type: ignore[attr-defined]
    return REQUEST_COLUMNS + FLEET_COLUMNS if has_fleet else REQUEST_COLUMNS


def step_columns(names: object) -> tuple[tuple[str, pa.DataType, bool], ...]:
    """The steps contract a table with these column names is held to: with vLLM's
    iteration columns when it has any of them, else the base columns."""
    iteration = {name for name, _, _ in ITERATION_COLUMNS}
    has_iteration = any(str(name) in iteration for name in names)  # type: ignore[attr-defined]
    return STEP_COLUMNS + ITERATION_COLUMNS if has_iteration else STEP_COLUMNS


@dataclass(frozen=True)
class RequestRecord:
    """One request of a run (a row of requests.parquet), as every backend records it.

    Times are plan seconds from the run origin. ``cached_tokens`` and ``computed_tokens``
    are None when the server did not report reuse (never 0: UNKNOWN is an observation);
    ``prefill_s`` is NaN when the server does not report the prefill's duration.
    """

    session: int
    round: int
    send_s: float
    first_token_s: float
    complete_s: float
    prompt_tokens: int
    cached_tokens: int | None
    computed_tokens: int | None
    generated_tokens: int
    prefill_s: float = math.nan
    replica: int | None = None  # fleet runs only (FLEET_COLUMNS)
    request_id: str | None = None


@dataclass(frozen=True)
class StepRecord:
    """One engine step (a row of steps.parquet); ``iteration`` holds vLLM's logged counts
    (``ITERATION_COLUMNS`` by name) on the vllm backend, None elsewhere."""

    kind: str
    n: int
    b: int | None
    start_s: float = math.nan
    end_s: float = math.nan
    iteration: dict[str, float] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class TokenRecord:
    """One generated token's arrival at the client (a row of tokens.parquet);
    ``server_s`` its emission by the engine where the backend knows it (the twin)."""

    session: int
    round: int
    index: int
    t_s: float
    server_s: float | None = None


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
