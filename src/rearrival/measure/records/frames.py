"""The one builder of each run-record frame (docs/DESIGN.md §6): requests, steps, tokens.

Every backend (the emulated twin's client, the HTTP replay client on emulated-http, rbln
and vllm) records plain ``RequestRecord``/``StepRecord``/``TokenRecord`` rows and turns
them into frames here, so the columns, their order and their dtypes are written once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from rearrival.measure.records.contract import (
    ITERATION_COLUMNS,
    ROUND_COLUMN,
    RequestRecord,
    StepRecord,
    TokenRecord,
)


def requests_frame(records: Sequence[RequestRecord]) -> pd.DataFrame:
    """requests.parquet rows in (session, round) order; unknown reuse stays unknown (Int64);
    with the replica and request id of every request when they were served by a fleet."""
    rows = sorted(records, key=lambda r: (r.session, r.round))
    frame = pd.DataFrame(
        {
            "session": pd.array([r.session for r in rows], dtype="int64"),
            ROUND_COLUMN: pd.array([r.round for r in rows], dtype="int64"),
            "send_s": np.array([r.send_s for r in rows], dtype="float64"),
            "first_token_s": np.array([r.first_token_s for r in rows], dtype="float64"),
            "complete_s": np.array([r.complete_s for r in rows], dtype="float64"),
            "prompt_tokens": pd.array([r.prompt_tokens for r in rows], dtype="int64"),
            "cached_tokens": pd.array([r.cached_tokens for r in rows], dtype="Int64"),
            "computed_tokens": pd.array([r.computed_tokens for r in rows], dtype="Int64"),
            "generated_tokens": pd.array([r.generated_tokens for r in rows], dtype="int64"),
            "prefill_s": np.array([r.prefill_s for r in rows], dtype="float64"),
        }
    )
    if rows and all(r.replica is not None for r in rows):  # a fleet run (FLEET_COLUMNS)
        frame["replica"] = pd.array([r.replica for r in rows], dtype="int64")
        frame["request_id"] = pd.array([r.request_id for r in rows], dtype="string")
    return frame


def steps_frame(records: Sequence[StepRecord]) -> pd.DataFrame:
    """steps.parquet rows numbered 0.. in order; with vLLM's iteration columns when the
    steps carry them (every step or none)."""
    frame = pd.DataFrame(
        {
            "step": pd.array(range(len(records)), dtype="int64"),
            "kind": pd.array([r.kind for r in records], dtype="string"),
            "n": pd.array([r.n for r in records], dtype="int64"),
            "b": pd.array([r.b for r in records], dtype="Int64"),
            "start_s": np.array([r.start_s for r in records], dtype="float64"),
            "end_s": np.array([r.end_s for r in records], dtype="float64"),
        }
    )
    carried = [r.iteration is not None for r in records]
    if any(carried):
        if not all(carried):
            raise ValueError("either every step carries vLLM's iteration counts or none does")
        for name, kind, _ in ITERATION_COLUMNS:
            values = [r.iteration[name] for r in records]  # type: ignore[index]
            frame[name] = (
                np.array(values, dtype="float64")
                if str(kind) == "double"
                else pd.array([int(v) for v in values], dtype="int64")
            )
    return frame


def tokens_frame(records: Sequence[TokenRecord], *, server_times: bool) -> pd.DataFrame:
    """tokens.parquet rows (session, round, index, t_s; ``server_times``: and server_s),
    for timelines; in the order the run produced them."""
    columns = ["session", ROUND_COLUMN, "index", "t_s"]
    rows = [(r.session, r.round, r.index, r.t_s) for r in records]
    if server_times:
        columns.append("server_s")
        rows = [(*row, r.server_s) for row, r in zip(rows, records, strict=True)]
    dtypes = {"session": "int64", ROUND_COLUMN: "int64", "index": "int64", "t_s": "float64"}
    if server_times:
        dtypes["server_s"] = "float64"
    return pd.DataFrame(rows, columns=columns).astype(dtypes)
