"""Shared prefixes and renewal links of a multi-round plan, checked
(docs/DESIGN.md §2 "Open traffic, shared prefixes and renewal").

A plan's prefix table has unique ids of at least one token; a session names a listed
prefix with its length, and follows (``after``) another existing session, never itself, at
a gap >= 0, with no start of its own; a session has at most one follower and no chain
closes a cycle (those sessions would never start). Each refusal is one line naming the
plan's source, the session and the fix. The checks read only ``session``, ``start_s``,
``prefix``, ``prefix_tokens`` and ``after`` of a session and ``id`` and ``tokens`` of a
prefix, so this module needs nothing of ``plan`` (which calls it from ``Plan`` and from
every loader).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rearrival.model.plans.plan_errors import PlanError


def is_count(value: Any, low: int) -> bool:
    """An integer (never a bool) of at least ``low``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def validate_links(
    sessions: Sequence[Any], prefixes: Sequence[Any], source: str, multi_round: bool
) -> None:
    """Refuse prefixes and renewal links the simulator could not run (docs/DESIGN.md §2),
    one line naming the session and the fix; ``multi_round`` says the sessions have
    rounds (a two-round paper plan has neither prefixes nor links)."""
    if not multi_round:
        if prefixes:
            raise PlanError(
                f"{source}: field 'prefixes' on a two-round (paper) plan; shared prefixes "
                "belong to multi-round sessions: write the sessions with 'rounds'"
            )
        return
    table = prefix_table(prefixes, source)
    followers: dict[int, int] = {}
    for s in sessions:
        where = f"{source}: session {s.session}"
        _check_prefix(s, table, where)
        if s.after is not None:
            _check_after(s, len(sessions), followers, where)
    _check_cycles(sessions, source)


def prefix_table(prefixes: Sequence[Any], source: str) -> dict[str, int]:
    """The prefix table as id -> tokens, refusing a duplicate id or a bad token count."""
    table: dict[str, int] = {}
    for index, p in enumerate(prefixes):
        where = f"{source}: prefixes[{index}]"
        if not isinstance(p.id, str) or not p.id:
            raise PlanError(f"{where}: field 'id' must be a non-empty string, got {p.id!r}")
        if p.id in table:
            raise PlanError(
                f"{where}: prefix id {p.id!r} appears twice; give each prefix its own id"
            )
        if not is_count(p.tokens, 1):
            raise PlanError(
                f"{where} ({p.id!r}): field 'tokens' must be a positive integer, "
                f"got {p.tokens!r}; drop the prefix or give its length"
            )
        table[p.id] = p.tokens
    return table


def _check_prefix(s: Any, table: dict[str, int], where: str) -> None:
    if s.prefix is None:
        if s.prefix_tokens:
            raise PlanError(
                f"{where}: prefix_tokens is {s.prefix_tokens} but the session names no "
                "prefix; set 'prefix' to an id of the plan's 'prefixes'"
            )
        return
    if s.prefix not in table:
        known = ", ".join(repr(k) for k in table) or "none"
        raise PlanError(
            f"{where}: field 'prefix' {s.prefix!r} is not in the plan's 'prefixes' "
            f"(ids: {known}); add it there with its tokens or name a listed one"
        )
    if s.prefix_tokens != table[s.prefix]:
        raise PlanError(
            f"{where}: prefix_tokens {s.prefix_tokens} differs from prefix {s.prefix!r}'s "
            f"{table[s.prefix]} tokens; a session's prefix has the table's length"
        )


def _check_after(s: Any, n: int, followers: dict[int, int], where: str) -> None:
    """One renewal link: an existing other session, a gap >= 0, no start of its own, and
    no second follower of the same session."""
    leader, gap = s.after.session, s.after.gap_s
    if not is_count(leader, 0) or leader >= n:
        raise PlanError(
            f"{where}: field 'after.session' {leader!r} names no session of the plan "
            f"(0..{n - 1}); name the session this one follows"
        )
    if leader == s.session:
        raise PlanError(
            f"{where}: field 'after.session' names the session itself; a session follows "
            "another one"
        )
    if isinstance(gap, bool) or not isinstance(gap, int | float) or not gap >= 0:
        raise PlanError(
            f"{where}: field 'after.gap_s' must be a number of seconds >= 0, got {gap!r}"
        )
    if not math.isfinite(gap):
        raise PlanError(f"{where}: field 'after.gap_s' must be finite, got {gap!r}")
    if s.start_s != 0:
        raise PlanError(
            f"{where}: has both 'start_s' ({s.start_s}) and 'after'; a renewed session "
            "starts when its leader finishes: drop 'start_s'"
        )
    if leader in followers:
        raise PlanError(
            f"{where}: session {leader} already has follower {followers[leader]}; a "
            "session has at most one follower: chain them (after the other follower)"
        )
    followers[leader] = s.session


def _check_cycles(sessions: Sequence[Any], source: str) -> None:
    """Refuse ``after`` links that close a cycle: such sessions would never start."""
    leader = [s.after.session if s.after is not None else -1 for s in sessions]
    done = [False] * len(sessions)
    for start in range(len(sessions)):
        path: list[int] = []
        on_path: set[int] = set()
        node = start
        while node >= 0 and not done[node]:
            if node in on_path:
                cycle = " -> ".join(str(i) for i in path[path.index(node) :])
                raise PlanError(
                    f"{source}: session {node}: field 'after' closes a cycle ({cycle} -> "
                    f"{node}), so none of them would ever start; give one of them a "
                    "'start_s' instead"
                )
            path.append(node)
            on_path.add(node)
            node = leader[node]
        for visited in path:
            done[visited] = True
