"""What the emulated client recorded, as the run-record frames of docs/DESIGN.md §6.

Kept apart from the driver so the record layout (columns and dtypes of the requests,
steps, tokens and evictions tables) is in one place, free of the event loop.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np
import pandas as pd

RequestRows = dict[tuple[int, int], dict[str, Any]]
StepRow = tuple[str, int, int | None, float, float]
TokenRow = tuple[int, int, int, float, float]
EvictionRow = tuple[float, int, Hashable, int, str]


def run_frames(
    requests_by_key: RequestRows,
    step_rows: list[StepRow],
    token_rows: list[TokenRow],
    eviction_rows: list[EvictionRow],
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(requests, steps, tokens, evictions) frames from the client's rows.

    ``requests_by_key`` maps (session, turn) to the request's recorded fields; the step,
    token and eviction rows are in the order the run produced them. Dtypes follow the
    run-record contract (nullable Int64 where the rbln backend may not know a value).
    """
    keys = sorted(requests_by_key)
    rows = [requests_by_key[k] for k in keys]
    requests = pd.DataFrame(
        {
            "session": pd.array([k[0] for k in keys], dtype="int64"),
            "turn": pd.array([k[1] for k in keys], dtype="int64"),
            "send_s": np.array([r["send_s"] for r in rows], dtype="float64"),
            "first_token_s": np.array([r["first_token_s"] for r in rows], dtype="float64"),
            "complete_s": np.array([r["complete_s"] for r in rows], dtype="float64"),
            "prompt_tokens": pd.array([r["prompt_tokens"] for r in rows], dtype="int64"),
            "cached_tokens": pd.array([r["cached_tokens"] for r in rows], dtype="Int64"),
            "computed_tokens": pd.array([r["computed_tokens"] for r in rows], dtype="Int64"),
            "generated_tokens": pd.array([r["generated_tokens"] for r in rows], dtype="int64"),
            "prefill_s": np.array([r["prefill_s"] for r in rows], dtype="float64"),
        }
    )
    kinds, ns, bs, starts, ends = (
        zip(*step_rows, strict=True) if step_rows else ((), (), (), (), ())
    )
    steps = pd.DataFrame(
        {
            "step": pd.array(range(len(kinds)), dtype="int64"),
            "kind": pd.array(kinds, dtype="string"),
            "n": pd.array(ns, dtype="int64"),
            "b": pd.array(bs, dtype="Int64"),
            "start_s": np.array(starts, dtype="float64"),
            "end_s": np.array(ends, dtype="float64"),
        }
    )
    tokens = pd.DataFrame(
        token_rows, columns=["session", "turn", "index", "t_s", "server_s"]
    ).astype(
        {
            "session": "int64",
            "turn": "int64",
            "index": "int64",
            "t_s": "float64",
            "server_s": "float64",
        }
    )
    evictions = pd.DataFrame(
        eviction_rows, columns=["time_s", "slot", "session", "cached_tokens", "reason"]
    )
    return requests, steps, tokens, evictions
