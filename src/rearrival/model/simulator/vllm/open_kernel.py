"""An open workload at any rate as the compiled vLLM kernel reads it, without building the
plan (docs/DESIGN.md §2 "Open traffic", §15, §17 "Capacity").

``plans open`` draws the same pool sessions in the same order at every rate and only the
start times scale (``workloads_open.OpenDraws``), so the plan at rate r is the first n(r)
draws, each a copy of its pool session. Its kernel rows are therefore gathered from the
pool's own per-request rows: prompt, generation, round and gap per request come from the
pool session drawn; the chain identities are numbered session after session as
``inputs.vllm_inputs`` numbers them (each session's blocks, then every shared prefix's in
the order sessions first name it); a round 0 is sent at its start and every later round
when the one before it finishes (open plans renew nothing). A capacity search reads this
instead of building a ``Plan`` of ten thousand sessions, its lists and its identities at
every rate of a bisection; ``tests/test_capacity_fast.py`` holds the rows to
``inputs.kernel_plan(vllm_inputs(open_plan(...)))``, array for array.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rearrival.model.configuration import VllmConfiguration
from rearrival.model.plans.plan import Plan
from rearrival.model.plans.workloads_open import Arrivals, OpenDraws, check_rate, check_started
from rearrival.model.simulator.plan_arrays import plan_arrays
from rearrival.model.simulator.vllm.inputs import KernelPlan, pool_refusal


@dataclass(frozen=True)
class OpenKernelPlan:
    """The open plan at one rate: its kernel rows, its sessions and their starts."""

    kernel: KernelPlan
    sessions: int
    starts: np.ndarray  # per session

    @property
    def prompt(self) -> np.ndarray:
        return self.kernel.plan_i[0]

    @property
    def gen(self) -> np.ndarray:
        return self.kernel.plan_i[1]


@dataclass(frozen=True)
class _PoolRows:
    """The pool's own per-request rows and, per pool session, where its rows start and
    how many there are."""

    prompt: np.ndarray
    gen: np.ndarray
    round_of: np.ndarray
    gap: np.ndarray
    first: np.ndarray
    rounds: np.ndarray
    prefix_of: np.ndarray  # per pool session: its prefix's index, or -1
    prefix_tokens: np.ndarray


class OpenKernelPlans:
    """One pool's Poisson open plans over ``horizon_s`` for ``seed``, at any rate."""

    def __init__(self, pool: Plan, horizon_s: float, seed: int) -> None:
        self.pool = pool
        self.horizon_s = float(horizon_s)
        self.draws = OpenDraws(pool.n, self.horizon_s, seed, Arrivals())
        a = plan_arrays(pool)
        first = np.array(a.first, dtype=np.int64)
        self.rows = _PoolRows(
            np.array(a.prompt, dtype=np.int64),
            np.array(a.gen, dtype=np.int64),
            np.array(a.round_of, dtype=np.int64),
            np.array(a.gap, dtype=np.float64),
            first[:-1],
            np.diff(first),
            np.array(a.prefix_of, dtype=np.int64),
            np.array(a.prefix_tokens, dtype=np.int64),
        )

    def starts(self, rate: float) -> list[float]:
        """The session starts of the plan at ``rate`` (``open_plan``'s, checked alike)."""
        check_rate(self.pool.sessions, rate, self.horizon_s)
        return self.draws.at(rate)[0]

    def at(self, rate: float, configuration: VllmConfiguration, source: str) -> OpenKernelPlan:
        """The kernel rows of the plan at ``rate`` (at least one session) for
        ``configuration``'s block size, refused as ``check_pool`` refuses the plan when
        a request cannot fit its pool."""
        check_rate(self.pool.sessions, rate, self.horizon_s)
        starts, picks = self.draws.at(rate)
        check_started(starts, self.horizon_s)
        drawn = np.array(picks, dtype=np.int64)
        rows, bs = self.rows, configuration.block_size
        lengths = rows.rounds[drawn]
        first = np.zeros(len(drawn) + 1, dtype=np.int64)
        np.cumsum(lengths, out=first[1:])
        requests = int(first[-1])
        session = np.repeat(np.arange(len(drawn), dtype=np.int64), lengths)
        rid = np.arange(requests, dtype=np.int64)
        source_rid = rid + np.repeat(rows.first[drawn] - first[:-1], lengths)
        prompt, gen = rows.prompt[source_rid], rows.gen[source_rid]
        round_of = rows.round_of[source_rid]
        held = prompt + gen - 1
        _check_fits(held, session, round_of, configuration, source)
        key_base, shared, prefix_base, keys = _identities(rows, drawn, first, held, bs)
        start = np.zeros(requests)
        start[first[:-1]] = starts
        last = first[1:][session] - 1
        plan_i = np.stack(
            [
                prompt,
                gen,
                round_of,
                first[:-1][session],
                (round_of == 0).astype(np.int64),
                key_base[session],
                shared[session],
                prefix_base[session],
                np.where(rid < last, rid - session, -1),
                np.full(requests, -1, dtype=np.int64),
            ]
        )
        gap = rows.gap[source_rid]
        kernel = KernelPlan(plan_i, gap, np.zeros(requests), start, max(keys, 1))
        return OpenKernelPlan(kernel, len(drawn), np.array(starts))


def _check_fits(
    held: np.ndarray,
    session: np.ndarray,
    round_of: np.ndarray,
    configuration: VllmConfiguration,
    source: str,
) -> None:
    """``check_pool`` on the gathered rows."""
    bs = configuration.block_size
    need = -(-held // bs)
    over = np.flatnonzero(need > configuration.usable_blocks)
    if over.size:
        rid = int(over[0])
        raise pool_refusal(
            source,
            int(session[rid]),
            int(round_of[rid]),
            int(held[rid]),
            configuration,
            int(need.max()),
        )


def _identities(
    rows: _PoolRows, drawn: np.ndarray, first: np.ndarray, held: np.ndarray, bs: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Per drawn session its first chain identity, its shared prefix blocks and its
    prefix's first identity (-1: none), and the identities in all
    (``inputs._chain_identities``)."""
    blocks = -(-held[first[1:] - 1] // bs)  # a session's last round holds the most
    key_base = np.zeros(len(drawn), dtype=np.int64)
    np.cumsum(blocks[:-1], out=key_base[1:])
    keys = int(blocks.sum())
    prefix = rows.prefix_of[drawn]
    full = np.where(prefix >= 0, rows.prefix_tokens[drawn] // bs, 0)
    prefix_base = np.full(len(drawn), -1, dtype=np.int64)
    named = np.flatnonzero(prefix >= 0)
    if named.size:
        ids, at = np.unique(prefix[named], return_index=True)
        bases = np.empty(int(ids.max()) + 1, dtype=np.int64)
        for k in np.argsort(at, kind="stable"):  # numbered in the order first named
            bases[ids[k]] = keys
            keys += int(full[named[at[k]]])
        prefix_base[named] = bases[prefix[named]]
    return key_base, full, prefix_base, keys
