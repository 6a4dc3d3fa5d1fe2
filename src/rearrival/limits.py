"""The bounds on what a verb's options can ask for, defined once (docs/DESIGN.md §12,
"Bounds"): no ``rearrival`` verb can be made to use more than 2 GiB by its options alone.

Each bound is checked before the work it limits is started (before a plan is drawn, a
candidate is enumerated or a sample is taken), and a value over it is one line naming the
option, the bound and why, exit code 2. A study's own size (config/schema.yaml) and the
files a user brings (plans, traces) are inputs, not options; the memory estimate of the
search (``rearrival.search.space``) counts them too.
"""

from __future__ import annotations

from rearrival.errors import RearrivalError

# Concurrent sessions N of one plan (`plan --n`, `search --n`, `advise --n`): the same
# bound config/schema.yaml puts on a study's n, for the same reason: on real hardware a
# run takes about its makespan, roughly 0.95 s per session beyond the slots (N=1024:
# about 16 minutes per run), and the paper's largest N is 16.
MAX_SESSIONS = 1024
SESSIONS_WHY = "the bound config/schema.yaml puts on a study's n: about 0.95 s per session"
# Batch size and KV slots of a configuration (`simulate`, `run`, `emulate-server`,
# `search --batch-sizes`): a plan of at most MAX_SESSIONS sessions never runs more
# requests at once, so a larger batch or more slots never fill; the shipped devices hold
# 49 slots (paper Table XV). Tables of a configuration grow with its batch size.
MAX_BATCH_SIZE = MAX_SESSIONS
BATCH_SIZE_WHY = (
    "a plan of at most 1,024 sessions never runs more requests at once; the shipped "
    "devices hold 49 KV slots"
)
# KV blocks of a vLLM pool (`simulate --substrate vllm --num-blocks`): 1,024 sessions of
# 16,384 tokens in 16-token blocks; the simulator keeps a few integers per block.
MAX_KV_BLOCKS = 1_048_576
KV_BLOCKS_WHY = "1,024 sessions of 16,384 tokens in 16-token blocks"
# Candidates one search may enumerate and score, after the filters that remove them by
# size alone (compile budget, device memory): about three times the README's fleet-scale
# search (32,230 candidates, 12.8 s on 54 plans); the space is counted before it is
# enumerated (rearrival.search.space), so a larger one is refused before it costs memory.
MAX_CANDIDATES = 100_000
# Estimated peak memory of a search or an advice's search, workers included
# (rearrival.search.space.Footprint): the 2 GiB the README's speed table targets.
MAX_MEMORY_GIB = 2.0
# Resampled session sets of `advise --trace --resamples` (each is kept as one number; the
# nearest-rank 5 % and 95 % quantiles move by under 0.01 % of the draws beyond this).
MAX_RESAMPLES = 10_000
RESAMPLES_WHY = "the spread's 5 % and 95 % quantiles are settled long before"
# Draws of `tools show --draws` (each draw is kept while the shares are counted; a
# million give each share to about 0.001, the slow test's own sample).
MAX_DRAWS = 1_000_000
DRAWS_WHY = "every draw is kept while the shares are counted"
# Sessions and requests of one open or closed workload (`plans open`, `plans closed`):
# an hour of agent traffic is about 400 sessions and 2,000 requests (issue 34's speed
# target), so 100,000 sessions is over ten simulated days of it. Every request is a
# row of the plan file: `plans open` of 99,441 sessions and 994,410 requests peaked at
# 0.92 GiB writing Parquet and 1.32 GiB writing JSON (/usr/bin/time, 2026-12-03), within
# the 2 GiB.
MAX_WORKLOAD_SESSIONS = 100_000
WORKLOAD_SESSIONS_WHY = "an hour of agent traffic is about 400 sessions"
MAX_WORKLOAD_REQUESTS = 1_000_000
WORKLOAD_REQUESTS_WHY = "each request is a row of the plan file; a million peak at 1.3 GiB"


class LimitError(RearrivalError, ValueError):
    """An option asks for more than its documented bound; names the option and the bound."""


def bound_problem(what: str, value: int, bound: int, why: str) -> str | None:
    """What is wrong with ``value`` above ``bound``, in one line naming both and why."""
    if value > bound:
        return f"{what} {value:,} is over the bound {bound:,} ({why}; rearrival.limits)"
    return None


def check_at_most(option: str, value: int, bound: int, why: str) -> None:
    """Refuse an option's ``value`` above ``bound`` in one line."""
    problem = bound_problem(f"option {option}", value, bound, why)
    if problem is not None:
        raise LimitError(problem)


# Replicas of a simulated fleet (`simulate --replicas`, docs/DESIGN.md §16): each replica holds its
# own engine state (a vLLM pool of up to MAX_KV_BLOCKS blocks), so the bound keeps a fleet
# of the largest pools within the memory bound (about 90 MB of Python lists per engine of
# MAX_KV_BLOCKS blocks).
MAX_REPLICAS = 16
REPLICAS_WHY = "16 engines of the largest pool stay within the 2 GiB bound"

# Fleets of one capacity search (`rearrival capacity`: configurations x fleet sizes x
# routers), counted before any is enumerated. Each fleet is about 20 simulations of the
# horizon (the bracket, the bisection to 2 %, the check above, a 6-rate grid; measured by
# benchmarks/bench_capacity.py); the target is 500 fleets of one simulated hour in
# 60 s, so ten times that is ten minutes at the target and the most a run should ask for.
MAX_CAPACITY_FLEETS = 5_000
CAPACITY_FLEETS_WHY = "each fleet is about 20 simulations of the horizon (bisection and grid)"
# Rates of the grid each fleet adds to its bisection to see its attainment curve whole.
MAX_CAPACITY_GRID = 64
CAPACITY_GRID_WHY = "each grid rate is one more simulation of every fleet"
# Resampled session pools of `capacity --rate` (one simulation of the pick each).
MAX_CAPACITY_RESAMPLES = 1_000
CAPACITY_RESAMPLES_WHY = "each resample is one simulation of the chosen fleet"
