"""What the emulated client recorded, as the run-record frames of docs/DESIGN.md §6.

The requests, steps and tokens frames come from the one builder of each
(``rearrival.measure.records.frames``), the same the replay client uses; the evictions
table, which only the twin can observe, is laid out here.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import pandas as pd

from rearrival.measure.records.contract import RequestRecord, StepRecord, TokenRecord
from rearrival.measure.records.frames import requests_frame, steps_frame, tokens_frame

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

    ``requests_by_key`` maps (session, round) to the request's recorded fields; the step,
    token and eviction rows are in the order the run produced them.
    """
    requests = requests_frame(
        [
            RequestRecord(
                session=session,
                round=round_index,
                send_s=row["send_s"],
                first_token_s=row["first_token_s"],
                complete_s=row["complete_s"],
                prompt_tokens=row["prompt_tokens"],
                cached_tokens=row["cached_tokens"],
                computed_tokens=row["computed_tokens"],
                generated_tokens=row["generated_tokens"],
                prefill_s=row["prefill_s"],
            )
            for (session, round_index), row in requests_by_key.items()
        ]
    )
    steps = steps_frame([StepRecord(*row) for row in step_rows])
    tokens = tokens_frame([TokenRecord(*row) for row in token_rows], server_times=True)
    evictions = pd.DataFrame(
        eviction_rows, columns=["time_s", "slot", "session", "cached_tokens", "reason"]
    )
    return requests, steps, tokens, evictions
