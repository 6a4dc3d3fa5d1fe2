"""Which replica served each request of a fleet run, and the checks that hold per replica
(README "A study on a real fleet").

The client sends every request with an ``X-Request-Id`` (``rearrival.measure.client``);
vLLM names the request by it (``cmpl-<id>``), and a server started with
``--enable-log-requests`` logs ``Added request cmpl-<id>-<n>-<hex>.`` when its engine takes
it. The replica of a request is the one server whose log holds that line: the router is
never asked (its log names the worker it picked but not the request), so the placement is
the servers' own record. A request logged by no server or by two is one clear problem.

Per replica, the cached tokens its requests report must sum to that server's delta of
``vllm:prompt_tokens_cached_total``, and its iteration lines must cover exactly its
requests (``rearrival.measure.vllm.iterations``): the fleet's totals agreeing is not enough.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from rearrival.measure.counters import CACHED_COUNTER
from rearrival.measure.records.contract import RequestRecord
from rearrival.measure.steplog import StepLogError
from rearrival.measure.vllm.iterations import IterationStepLog

# vLLM's AsyncLLM line for a request its engine took: "Added request cmpl-rq-s3-r1-0-9ff265d4."
_ADDED = re.compile(r"Added request cmpl-(?P<id>[\w-]+?)-\d+-[0-9a-f]+\.")


def logged_request_ids(log_text: str) -> set[str]:
    """The request ids one server's log says its engine took."""
    return {match.group("id") for match in _ADDED.finditer(log_text)}


def placement(server_logs: Sequence[str]) -> tuple[dict[str, int], list[str]]:
    """Replica index per request id, from the servers' logs; and the ids two servers
    logged (the run's problem: a request admitted twice)."""
    where: dict[str, int] = {}
    twice = []
    for replica, text in enumerate(server_logs):
        for request_id in sorted(logged_request_ids(text)):
            if request_id in where:
                twice.append(request_id)
            where[request_id] = replica
    return where, twice


def placement_problem(
    requests: Sequence[RequestRecord], replicas: Mapping[str, int], twice: Sequence[str]
) -> str | None:
    """Why the placement cannot be trusted, or None."""
    if twice:
        return f"request {twice[0]} is in two servers' logs; it was admitted twice"
    unplaced = [r for r in requests if r.replica is None]
    if unplaced:
        first = unplaced[0]
        return (
            f"session {first.session} round {first.round} (request {first.request_id}) is in "
            "no server's log; start the servers with --enable-log-requests"
        )
    return None


def replica_reuse_problem(
    requests: Sequence[RequestRecord],
    server_metrics: Sequence[tuple[Mapping[str, float], Mapping[str, float]]],
) -> str | None:
    """Each server's requests must report the cached tokens its own counter moved by."""
    for replica, (before, after) in enumerate(server_metrics):
        if CACHED_COUNTER not in before or CACHED_COUNTER not in after:
            return f"replica {replica}: /metrics has no {CACHED_COUNTER} before and after"
        moved = after[CACHED_COUNTER] - before[CACHED_COUNTER]
        reported = sum(int(r.cached_tokens or 0) for r in requests if r.replica == replica)
        if reported != moved:
            return (
                f"replica {replica}: its requests report {reported} cached tokens but its "
                f"{CACHED_COUNTER} moved by {moved:g}; the server's reuse reports disagree "
                "with its counter"
            )
    return None


@dataclass(frozen=True)
class FleetStepLog:
    """steps.parquet of a fleet run: every replica's iteration lines, replica by replica
    (``replica`` column order is the manifest's servers), each replica's iterations
    checked against that replica's requests. The log text the client passes is ignored:
    a fleet has one log per server (``logs``), kept whole in the run directory."""

    logs: tuple[str, ...]
    buckets: tuple[int, ...] = ()

    def _one(self) -> IterationStepLog:
        return IterationStepLog(self.buckets)

    def steps(self, log_text: str) -> pd.DataFrame:
        frames = []
        for replica, text in enumerate(self.logs):
            try:
                frames.append(self._one().steps(text))
            except StepLogError as exc:
                raise StepLogError(f"replica {replica}: {exc}") from None
        # a replica that logged no iteration (killed before its first step) adds nothing;
        # concatenating its empty frame would widen every integer column to float
        frames = [f for f in frames if not f.empty] or [self._one().steps("")]
        frame = pd.concat(frames, ignore_index=True)
        frame["step"] = pd.array(range(len(frame)), dtype="int64")
        return frame

    def coverage_problem(
        self,
        steps: pd.DataFrame,
        requests: Sequence[RequestRecord],
        counters: Mapping[str, float],
    ) -> str | None:
        """Each replica's iterations against its own requests."""
        for replica, text in enumerate(self.logs):
            own = [r for r in requests if r.replica == replica]
            problem = self._one().coverage_problem(self._one().steps(text), own, counters)
            if problem:
                return f"replica {replica}: {problem}"
        return None
