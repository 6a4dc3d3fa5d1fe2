"""The arrivals an emulate-server's engine received, read back from its log.

A run over HTTP happens in real time: a client on a loaded machine sends late, and a
re-arrival can then meet another session in the engine where the plan's own timing
keeps them apart (issue 36: the step log had (2, 2) where the in-process emulator had
(1, 1)). Comparing that run with the in-process emulator is fair only on the arrivals
the server really had, as ``rearrival compare`` runs the vLLM predictor on a real run's
observed times (docs/DESIGN.md §15 "Agreement"). The server stamps each request with the
virtual time it reached the engine and logs it (:func:`arrival_line`);
:func:`observed_arrivals` assigns those stamps to the run's (session, round), for
:func:`rearrival.measure.emulate.driver.run_emulated`'s ``arrivals_s``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Hashable

import pandas as pd

from rearrival.measure.emulate.truth import EmulateError
from rearrival.measure.records.contract import ROUND_COLUMN

_ARRIVAL = re.compile(
    r"\[emulate\.server\] arrival request=(?P<request>\S+) key=(?P<key>\S+) "
    r"prompt_tokens=(?P<prompt>\d+) max_tokens=(?P<gen>\d+) arrival_s=(?P<at>\S+)$"
)

Signature = tuple[tuple[int, int], ...]


def arrival_line(
    arrival_s: float, request_id: str, key: Hashable, prompt_tokens: int, max_tokens: int
) -> str:
    """The server log line of one request reaching the engine; ``arrival_s`` is written
    exactly (repr), so a replay at it runs the same float arithmetic."""
    return (
        f"INFO t={arrival_s:.6f} [emulate.server] arrival request={request_id} key={key} "
        f"prompt_tokens={prompt_tokens} max_tokens={max_tokens} arrival_s={arrival_s!r}"
    )


def observed_arrivals(server_log: str, requests: pd.DataFrame) -> dict[tuple[int, int], float]:
    """Per (session, round) of ``requests`` (a complete run's records), the virtual time
    its request reached the server's engine.

    The server knows sessions only by prefix key (every round of a client session maps to
    its round 0's key), so keys are matched to sessions by their rounds' (prompt,
    generation) lengths, ties in order of first arrival against first send: sessions that
    tie are interchangeable for the engine, so either assignment gives the same work.
    """
    by_key: dict[str, list[tuple[float, int, int]]] = defaultdict(list)
    for line in server_log.splitlines():
        if match := _ARRIVAL.search(line):
            by_key[match["key"]].append(
                (float(match["at"]), int(match["prompt"]), int(match["gen"]))
            )
    server: dict[Signature, list[list[float]]] = defaultdict(list)
    for rows in sorted(by_key.values(), key=lambda rows: min(rows)[0]):
        rows.sort()
        server[tuple((p, g) for _, p, g in rows)].append([t for t, _, _ in rows])
    client: dict[Signature, list[int]] = defaultdict(list)
    ordered = requests.sort_values(["session", ROUND_COLUMN])
    firsts = ordered[ordered[ROUND_COLUMN] == 0].sort_values("send_s")["session"]
    for session in firsts:
        rows = ordered[ordered["session"] == session]
        signature = tuple(zip(rows["prompt_tokens"], rows["generated_tokens"], strict=True))
        client[tuple((int(p), int(g)) for p, g in signature)].append(int(session))
    arrivals: dict[tuple[int, int], float] = {}
    for signature, sessions in client.items():
        stamps = server.get(signature, [])
        if len(stamps) != len(sessions):
            raise EmulateError(
                f"server log: {len(stamps)} sessions arrived with rounds {signature}, the "
                f"run's requests have {len(sessions)}; give the log of the server that "
                "served this run"
            )
        for session, times in zip(sessions, stamps, strict=True):
            arrivals.update({(session, turn): t for turn, t in enumerate(times)})
    return arrivals
