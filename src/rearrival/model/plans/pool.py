"""The pool a workload draws its sessions from (docs/DESIGN.md §2 "Open
traffic, shared prefixes and renewal"): a plan file, a folder of plan files, or a
TraceLab round trace.

A pool is a multi-round ``Plan``: its sessions (a two-round paper session becomes its two
rounds, the same prompts) and the prefix table they name. Several files are joined in
name order, sessions renumbered and their ``after`` links moved with them; a prefix id two
files give different lengths is refused. A trace is imported by the rules of ``plans
from-trace`` (shared prefixes on, starts as the trace's timestamps say), so a pool read
from a trace is the plan that command writes.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rearrival.model.plans.plan import (
    AnySession,
    MultiRoundSession,
    Plan,
    PlanError,
    PlanMeta,
    Prefix,
    load_plan,
)
from rearrival.model.plans.tracelab_import import plans_from_trace

PLAN_SUFFIXES = (".json", ".parquet")
TRACE_SUFFIXES = (".jsonl", ".gz")


def load_pool(
    path: str | Path, *, token_scale: float = 1.0, max_seq_len: int | None = None
) -> Plan:
    """The pool at ``path``; ``token_scale`` and ``max_seq_len`` apply to a trace only (as
    `plans from-trace` takes them)."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in PLAN_SUFFIXES)
        if not files:
            raise PlanError(
                f"{path}: the pool folder holds no plan files (.json, .parquet); pass a plan "
                "file, a folder of them or a TraceLab round trace"
            )
        return join_pools([(str(p), load_plan(p)) for p in files])
    if path.suffix in TRACE_SUFFIXES:
        result = plans_from_trace(
            path, max_seq_len=max_seq_len, token_scale=token_scale, prefixes=True
        )
        return join_pools([(str(path), result.plan)], result.plan.meta)
    if path.suffix not in PLAN_SUFFIXES:
        raise PlanError(
            f"{path}: a pool is a plan file (.json, .parquet), a folder of them or a TraceLab "
            "round trace (.jsonl, .jsonl.gz)"
        )
    return join_pools([(str(path), load_plan(path))])


def join_pools(plans: list[tuple[str, Plan]], meta: PlanMeta | None = None) -> Plan:
    """One multi-round plan of every session of ``plans`` (in order), renumbered."""
    sessions: list[MultiRoundSession] = []
    table: dict[str, tuple[Prefix, str]] = {}
    for name, plan in plans:
        for prefix in plan.prefixes:
            seen = table.setdefault(prefix.id, (prefix, name))
            if seen[0] != prefix:
                raise PlanError(
                    f"{name}: prefix {prefix.id!r} has {prefix.tokens} tokens but "
                    f"{seen[0].tokens} in {seen[1]}; give the two prefixes different ids"
                )
        offset = len(sessions)
        sessions.extend(_renumbered(s, offset) for s in plan.sessions)
    prefixes = tuple(prefix for prefix, _ in table.values())
    pool_meta = meta or PlanMeta(source="pool", notes={"files": [name for name, _ in plans]})
    return Plan(tuple(sessions), pool_meta, prefixes)


def _renumbered(s: AnySession, offset: int) -> MultiRoundSession:
    """A pool session numbered after the earlier files' (its ``after`` moved with it)."""
    if not isinstance(s, MultiRoundSession):
        return MultiRoundSession(offset + s.session, s.rounds, 0.0)
    after = s.after if s.after is None else replace(s.after, session=s.after.session + offset)
    return replace(s, session=s.session + offset, after=after)
