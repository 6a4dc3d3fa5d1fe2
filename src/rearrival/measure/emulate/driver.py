"""The client and the clock of an emulated run: a scripted client driving the engine.

Paper Section II-C, docs/DESIGN.md. One deterministic discrete-event loop in virtual
time sends the plan's requests (each session's round 0 at its start plus send jitter,
round k+1 after round k's response, its tool gap and the client turnaround), applies
HTTP ingress/egress latency, and steps the engine;
:func:`run_emulated` turns what happened into one run's records. Every random draw comes
from the run seed alone, through :func:`~rearrival.measure.emulate.engine.stream_seed`.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from rearrival.measure.emulate.engine import (
    METRIC_NAMES,
    Engine,
    StepOutcome,
    stream_seed,
)
from rearrival.measure.emulate.frames import (
    EvictionRow,
    RequestRows,
    StepRow,
    TokenRow,
    run_frames,
)
from rearrival.measure.emulate.truth import EmulateError, Truth, default_truth
from rearrival.measure.records.contract import ROUND_COLUMN
from rearrival.model.configuration import RblnConfiguration
from rearrival.model.cost.profile import Profile, measured_profile
from rearrival.model.plans.plan import Plan
from rearrival.vocabulary import ARRIVAL_TOLERANCE_S, EVICTED_BY_DUMMY_BLOCK


@dataclass(frozen=True)
class Script:
    """What the client sends: round 0 at a fixed time, each later round after a gap.

    Per session and round (turn): the prompt length, the generation length and the
    tool gap after that round's response (the last round's gap is never used).
    ``arrivals_s``, when given, pins every request's arrival at the engine at a time
    another run observed (never before the step that finished its previous round): the
    client's own feedback (response, gap, turnaround) and the ingress draws are then not
    used.
    """

    prompts: tuple[tuple[int, ...], ...]
    gens: tuple[tuple[int, ...], ...]
    gaps_s: tuple[tuple[float, ...], ...]
    first_send_s: tuple[float, ...]
    arrivals_s: Mapping[tuple[int, int], float] | None = None


@dataclass
class EmulatedRun:
    """Everything one emulated run produced, as plain data (docs/DESIGN.md §6 contents).

    ``requests`` and ``steps`` follow the run-record contract of TEAM.md exactly;
    ``tokens`` holds every token's arrival at the client (session, turn, index, t_s;
    server_s is its emission by the engine) and ``evictions`` every dropped KV slot,
    for timelines and the injection study.
    """

    requests: pd.DataFrame
    steps: pd.DataFrame
    tokens: pd.DataFrame
    evictions: pd.DataFrame
    server_log: str
    metrics: dict[str, dict[str, float]]
    counts: dict[str, int]
    configuration: RblnConfiguration
    variant: str
    seed: int
    plan_sha256: str | None
    truth_version: str


class Client:
    """The client and the HTTP front end around one engine, in virtual time.

    The front end is one asyncio process, so requests reach the scheduler in the order
    they were sent (each after its own ingress latency, never overtaking an earlier
    send): simultaneous first sends are admitted in actual send order (II-C). Tokens
    reach the client after the request's egress latency. Latencies and turnarounds are
    drawn per (session, turn) up front, so every condition run with the same seed sees
    the same client-side draws (common random numbers across paired conditions).
    """

    def __init__(self, script: Script, truth: Truth, seed: int, engine: Engine) -> None:
        self.script, self.engine = script, engine
        shape = (len(script.prompts), max(len(p) for p in script.prompts))
        http = np.random.default_rng(stream_seed(seed, "http"))
        self.ingress = _latency(http, truth.ingress_median_s, truth.latency_sigma, shape)
        self.egress = _latency(http, truth.egress_median_s, truth.latency_sigma, shape)
        client = np.random.default_rng(stream_seed(seed, "client-turnaround"))
        self.turnaround = client.uniform(*truth.turnaround_s, size=shape)
        self.sends: list[tuple[float, int, int]] = []
        self.last_arrival_s = -math.inf
        self.step_rows: list[StepRow] = []
        self.token_rows: list[TokenRow] = []
        self.eviction_rows: list[EvictionRow] = []
        self.requests: RequestRows = {}
        for session, send_s in enumerate(script.first_send_s):
            self.schedule(session, 0, send_s)

    def frames(self) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        """What this client recorded as (requests, steps, tokens, evictions) frames."""
        return run_frames(self.requests, self.step_rows, self.token_rows, self.eviction_rows)

    def schedule(self, session: int, turn: int, send_s: float) -> None:
        self.requests[(session, turn)] = {"send_s": send_s, "tokens": 0}
        heapq.heappush(self.sends, (send_s, session, turn))

    @property
    def next_send_s(self) -> float | None:
        return self.sends[0][0] if self.sends else None

    def deliver(self, until_s: float) -> None:
        """Hand every request sent by ``until_s`` to the engine, in send order."""
        while self.sends and self.sends[0][0] <= until_s + ARRIVAL_TOLERANCE_S:
            send_s, session, turn = heapq.heappop(self.sends)
            ingress = 0.0 if self.script.arrivals_s else float(self.ingress[session, turn])
            arrival = max(send_s + ingress, self.last_arrival_s)
            self.last_arrival_s = arrival
            self.engine.submit(
                (session, turn),
                session,
                self.script.prompts[session][turn],
                self.script.gens[session][turn],
                arrival,
            )

    def observe(self, outcome: StepOutcome) -> None:
        """Record a step; a completed round schedules the session's next round."""
        end = outcome.end_s
        self.step_rows.append((outcome.kind, outcome.n, outcome.b, outcome.start_s, end))
        if outcome.admission is not None:
            adm = outcome.admission
            self.requests[adm.request_id].update(
                admitted_s=outcome.start_s, reported_hit_tokens=adm.reported_hit_tokens
            )
        for ev in outcome.evictions:
            self.eviction_rows.append((ev.time_s, ev.slot, ev.session, ev.cached_tokens, ev.cause))
        for session, turn in outcome.emitted:
            row = self.requests[(session, turn)]
            t_s = end + float(self.egress[session, turn])
            self.token_rows.append((session, turn, row["tokens"], t_s, end))
            if row["tokens"] == 0:
                row["first_token_s"] = t_s
            row["tokens"] += 1
        for done in outcome.finished:
            session, turn = done.request_id
            row = self.requests[(session, turn)]
            row.update(
                complete_s=end + float(self.egress[session, turn]),
                prompt_tokens=done.prompt_tokens,
                cached_tokens=done.cached_tokens,
                computed_tokens=done.computed_tokens,
                generated_tokens=done.generated_tokens,
                prefill_s=done.prefill_s,
            )
            if turn + 1 < len(self.script.prompts[session]):
                self.schedule(session, turn + 1, self.follow_up_send_s(session, turn, end))

    def follow_up_send_s(self, session: int, turn: int, end_s: float) -> float:
        """When round ``turn + 1`` leaves: at its pinned arrival when the script has one
        (not before ``end_s``, the step that finished round ``turn``), else after the
        response, the tool gap and the turnaround."""
        if self.script.arrivals_s is not None:
            return max(self.script.arrivals_s[(session, turn + 1)], end_s)
        complete = self.requests[(session, turn)]["complete_s"]
        return complete + self.script.gaps_s[session][turn] + float(self.turnaround[session, turn])


def _latency(rng: np.random.Generator, median: float, sigma: float, size: Any) -> np.ndarray:
    return median * np.exp(sigma * rng.standard_normal(size))


def drive(
    script: Script, config: RblnConfiguration, truth: Truth, seed: int, profile: Profile
) -> tuple[Client, Engine]:
    """One discrete-event loop: deliver due sends, run a step, jump over idle time."""
    engine = Engine(config, truth=truth, profile=profile, seed=seed)
    client = Client(script, truth, seed, engine)
    now = 0.0
    while True:
        client.deliver(now)
        outcome = engine.step(now)
        if outcome is not None:
            now = outcome.end_s
            client.observe(outcome)
            continue
        upcoming = [t for t in (engine.next_arrival_s, client.next_send_s) if t is not None]
        if not upcoming:
            return client, engine
        if min(upcoming) <= now:
            raise RuntimeError(f"engine stalled at {now:.6f} s with a due request")
        now = min(upcoming)


def check_seed(seed: int) -> None:
    """Refuse a seed that is not a non-negative int (bools included): it names every draw."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise EmulateError(f"emulator seed must be an integer >= 0, got {seed!r}")


def first_sends(seed: int, truth: Truth, count: int) -> tuple[float, ...]:
    """Sessions start together, but real first sends spread over a few ms (II-C)."""
    rng = np.random.default_rng(stream_seed(seed, "client-first-send"))
    width = rng.uniform(*truth.first_send_spread_s)
    return tuple(float(t) for t in rng.uniform(0.0, width, size=count))


def run_emulated(
    plan: Plan,
    config: RblnConfiguration,
    *,
    variant: str = "wait",
    seed: int,
    truth: Truth | None = None,
    profile: Profile | None = None,
    arrivals_s: Mapping[tuple[int, int], float] | None = None,
) -> EmulatedRun:
    """One run of ``plan`` under one condition (``config`` and ``variant``) on the emulated
    stack (docs/DESIGN.md).

    Each session sends round 0 at its ``start_s`` plus first-send jitter, receives the
    response (engine completion + HTTP egress), waits the variant's tool gap plus the
    client turnaround, and sends the next round, whose prompt is the transcript so far
    plus the round's new tokens (``prompts()``; for the paper's session L1 = L0 + G0 +
    appended tokens). Same arguments give identical records; the run seed alone sets
    every random draw, in the same order for a two-round plan as before multi-round
    plans existed.

    ``arrivals_s`` ((session, round) -> virtual seconds, the arrivals an emulate-server
    stamped, :func:`rearrival.measure.emulate.observed.observed_arrivals`) admits every
    request when that run's engine received it instead: the virtual-time twin of a
    real-time run, compared on the arrivals that run had, as ``rearrival compare``
    runs the vLLM predictor on a real run's observed times (docs/DESIGN.md §15
    "Agreement"). A loaded machine delays the real client; this twin is delayed alike.
    """
    check_seed(seed)
    truth = truth or default_truth()
    profile = profile or measured_profile()
    conditioned = plan.variant(variant)
    sessions = conditioned.sessions
    jitter = first_sends(seed, truth, conditioned.n)
    position = {s.session: i for i, s in enumerate(sessions)}
    pinned = (
        None
        if arrivals_s is None
        else {(position[session], turn): t for (session, turn), t in arrivals_s.items()}
    )
    script = Script(
        prompts=tuple(s.prompts() for s in sessions),
        gens=tuple(tuple(r.gen_tokens for r in s.rounds) for s in sessions),
        gaps_s=tuple(tuple(r.gap_after_s for r in s.rounds) for s in sessions),
        first_send_s=tuple(
            s.start_s + t if pinned is None else pinned[(i, 0)]
            for i, (s, t) in enumerate(zip(sessions, jitter, strict=True))
        ),
        arrivals_s=pinned,
    )
    rec, engine = drive(script, config, truth, seed, profile)
    requests, steps, tokens, evictions = rec.frames()
    follow = requests[requests[ROUND_COLUMN] >= 1]
    reported = sum(
        1 for (_, turn), row in rec.requests.items() if turn >= 1 and row["reported_hit_tokens"] > 0
    )
    counts = {
        "reuse_hits": int((follow["cached_tokens"] > 0).sum()),
        "re_arrivals": len(follow),
        "reported_hits": int(reported),
        "evictions": len(evictions),
        "dummy_evictions": int((evictions["reason"] == EVICTED_BY_DUMMY_BLOCK).sum()),
        "decode_steps": int((steps["kind"] == "decode").sum()),
        "prefill_steps": int((steps["kind"] == "prefill").sum()),
    }
    return EmulatedRun(
        requests=requests,
        steps=steps,
        tokens=tokens,
        evictions=evictions,
        server_log="\n".join(engine.log_lines) + "\n",
        metrics={"before": dict.fromkeys(METRIC_NAMES, 0.0), "after": dict(engine.counters)},
        counts=counts,
        configuration=config,
        variant=variant,
        seed=seed,
        plan_sha256=plan.sha256(),
        truth_version=truth.version,
    )
