"""Input plans (paper Section II-C; docs/DESIGN.md "Plans"): the fixed inputs of a replicate.

A plan fixes every session's token counts and tool waits; it never holds outcomes. Every
condition of a replicate runs the same plan, so this module is the one place where
inputs are defined, validated, hashed and stored.

Two shapes share one interface. The paper's session (``Session``) is one first request,
one tool wait and one re-arrival. A real agent session (``MultiRoundSession``) makes K >= 1
rounds: round k sends the whole transcript so far (every earlier round's new and
generated tokens) plus its own new tokens, after the previous round's gap, and the
session's first round is sent at ``start_s``. Both expose ``session``, ``start_s`` and
``rounds`` (a tuple of ``Round``), which is all the simulator, the emulator and the
client read; a two-round row maps to the rounds [(prompt, gen, wait), (appended,
follow-up gen, 0)], so every two-round plan keeps its file bytes, its hash and its
results.

Multi-round plans may also name shared prefixes and renew sessions (docs/DESIGN.md §2
"Open traffic, shared prefixes and renewal"): a plan-level table of
``Prefix`` entries, a session's ``prefix`` (its id) and ``after`` (the session it follows).
The columns and hash fields that carry them are added only when a plan uses them, so a
plan without them keeps its rows, bytes and hash.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rearrival.atomic import atomic_write_bytes
from rearrival.model.plans.plan_errors import PlanError
from rearrival.model.plans.plan_links import is_count, prefix_table, validate_links
from rearrival.vocabulary import VARIANTS

if TYPE_CHECKING:
    import pyarrow as pa

GENERATOR_VERSION = "rearrival-plans/2"
MULTI_ROUND_VERSION = "rearrival-plans/multi-round/1"
APPENDED_TOKENS = 8

# Each column is (name, its Arrow type's name in pyarrow); pyarrow is imported only to read
# or write a Parquet plan (``arrow_schema``), so a verb that never does (an advice on
# generated plans) does not pay its import.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("session", "int64"),
    ("prompt_tokens", "int64"),
    ("gen_tokens", "int64"),
    ("followup_gen_tokens", "int64"),
    ("appended_tokens", "int64"),
    ("tool_wait_s", "float64"),
    ("tool_name", "string"),
)

# The multi-round Parquet shape: one row per (session, round).
ROUND_COLUMNS: tuple[tuple[str, str], ...] = (
    ("session", "int64"),
    ("round", "int64"),
    ("start_s", "float64"),
    ("new_tokens", "int64"),
    ("gen_tokens", "int64"),
    ("gap_after_s", "float64"),
    ("tool_name", "string"),
)
# Added to the multi-round shape only when the plan uses them (docs/DESIGN.md §2): a
# session's prefix id, and the session it follows and the gap (``after``); null where a
# session has none. The prefix table is the file metadata under PREFIXES_KEY.
PREFIX_COLUMNS: tuple[tuple[str, str], ...] = (("prefix", "string"),)
AFTER_COLUMNS: tuple[tuple[str, str], ...] = (
    ("after_session", "int64"),
    ("after_gap_s", "float64"),
)
PREFIXES_KEY = b"rearrival.prefixes"
# The keys a JSON session may carry; anything else is refused, naming it.
TWO_ROUND_KEYS = frozenset(name for name, _ in COLUMNS)
MULTI_ROUND_KEYS = frozenset({"session", "start_s", "rounds", "prefix", "after"})


@dataclass(frozen=True)
class Round:
    """One request of a session: the tokens it appends to the transcript, the tokens it
    generates, and the tool wait after its response (0 on a session's last round)."""

    new_tokens: int
    gen_tokens: int
    gap_after_s: float = 0.0
    tool_name: str = ""


@dataclass(frozen=True)
class Session:
    """The paper's session (Section II-C): first request, one tool wait, one re-arrival."""

    session: int
    prompt_tokens: int
    gen_tokens: int
    followup_gen_tokens: int
    appended_tokens: int
    tool_wait_s: float
    tool_name: str

    @property
    def followup_prompt_tokens(self) -> int:
        """L1 = L0 + G0 + appended: the follow-up extends prompt and generated text."""
        return self.prompt_tokens + self.gen_tokens + self.appended_tokens

    @property
    def start_s(self) -> float:
        """The paper's sessions all start at t = 0."""
        return 0.0

    @property
    def rounds(self) -> tuple[Round, ...]:
        """The two requests as rounds: the first, then the follow-up after the wait."""
        return (
            Round(self.prompt_tokens, self.gen_tokens, self.tool_wait_s, self.tool_name),
            Round(self.appended_tokens, self.followup_gen_tokens, 0.0, ""),
        )

    def prompts(self) -> tuple[int, ...]:
        """Prompt length of each round: (L0, L1)."""
        return (self.prompt_tokens, self.followup_prompt_tokens)

    def with_gaps(self, gaps: tuple[float, ...]) -> Session:
        """The same session with the tool wait ``gaps[0]`` (one gap per round)."""
        return replace(self, tool_wait_s=gaps[0])


@dataclass(frozen=True)
class Prefix:
    """A prompt prefix that several sessions send first (docs/DESIGN.md §2): an agent's
    system prompt and tool definitions. Its tokens are the same in every session that names
    it; on vLLM its full blocks are ordinary cached blocks any session may hit."""

    id: str
    tokens: int


@dataclass(frozen=True)
class After:
    """Session renewal (docs/DESIGN.md §2): the session's round 0 arrives ``gap_s`` seconds
    after session ``session``'s last round finishes (closed-loop traffic; with gap 0 the
    authors' ``successor``)."""

    session: int
    gap_s: float = 0.0


@dataclass(frozen=True)
class MultiRoundSession:
    """A real agent session: K >= 1 rounds, each after the previous round's tool gap.

    ``prefix`` names one of the plan's ``Prefix`` entries and ``prefix_tokens`` is its
    length (the plan checks the two agree): round 0's prompt is the prefix followed by round
    0's new tokens, so every prompt of the session starts with it. ``after`` replaces
    ``start_s`` for a renewed session (``start_s`` is then 0 and unused)."""

    session: int
    rounds: tuple[Round, ...]
    start_s: float = 0.0
    prefix: str | None = None
    prefix_tokens: int = 0
    after: After | None = None

    def prompts(self) -> tuple[int, ...]:
        """Prompt length of each round: the shared prefix, every earlier round's new and
        generated tokens (the transcript a re-arrival resends) plus the round's own new
        tokens."""
        out, transcript = [], self.prefix_tokens
        for r in self.rounds:
            out.append(transcript + r.new_tokens)
            transcript += r.new_tokens + r.gen_tokens
        return tuple(out)

    def with_gaps(self, gaps: tuple[float, ...]) -> MultiRoundSession:
        """The same session with new gaps, one per round."""
        rounds = tuple(replace(r, gap_after_s=g) for r, g in zip(self.rounds, gaps, strict=True))
        return replace(self, rounds=rounds)


AnySession = Session | MultiRoundSession


@dataclass(frozen=True)
class PlanMeta:
    """Provenance stored in the Parquet file metadata; never used as an input to runs."""

    seed: int | None = None
    n: int | None = None
    study_seed: int | None = None
    replicate: int | None = None
    block: int | None = None
    variant: str = "wait"
    tool_table: str | None = None
    cap_fraction: float | None = None
    generator_version: str = GENERATOR_VERSION
    # Multi-round plans only (left out of a two-round file's metadata when unset, so
    # those files keep their bytes): where the sessions came from ("generator",
    # "tracelab", "otel"), and for imports the trace's sha256 and the import flags.
    source: str | None = None
    trace_sha256: str | None = None
    import_flags: dict[str, Any] | None = None
    notes: dict[str, Any] | None = None

    def as_dict(self, n: int) -> dict[str, Any]:
        """The metadata as stored; multi-round fields only when set."""
        data = asdict(self) | {"n": n}
        for name in MULTI_ROUND_META:
            if data[name] is None:
                del data[name]
        return data


MULTI_ROUND_META = ("source", "trace_sha256", "import_flags", "notes")


@dataclass(frozen=True)
class Plan:
    """The sessions of one replicate plus provenance."""

    sessions: tuple[AnySession, ...]
    meta: PlanMeta = field(default_factory=PlanMeta)
    prefixes: tuple[Prefix, ...] = ()

    def __post_init__(self) -> None:
        validate_sessions(self.sessions, "<plan>")
        validate_links(self.sessions, self.prefixes, "<plan>", self.multi_round)

    @property
    def n(self) -> int:
        return len(self.sessions)

    @property
    def multi_round(self) -> bool:
        """True for the multi-round shape (validation refuses a mix of the two)."""
        return isinstance(self.sessions[0], MultiRoundSession)

    @property
    def requests(self) -> int:
        """Requests the plan sends: the sum of every session's rounds."""
        return sum(len(s.rounds) for s in self.sessions)

    @property
    def renews(self) -> bool:
        """True when a session follows another (``after``, docs/DESIGN.md §2)."""
        return any(getattr(s, "after", None) is not None for s in self.sessions)

    def extra_columns(self) -> tuple[tuple[str, str], ...]:
        """The Parquet columns beyond ROUND_COLUMNS this plan needs: none without
        prefixes and renewal, so such a plan keeps its rows and bytes."""
        return (PREFIX_COLUMNS if self.prefixes else ()) + (AFTER_COLUMNS if self.renews else ())

    def rows(self) -> list[dict[str, Any]]:
        """The stored rows: one per session (two-round) or per (session, round)."""
        if not self.multi_round:
            return [asdict(s) for s in self.sessions]
        extra = [name for name, _ in self.extra_columns()]
        return [
            {"session": s.session, "round": k, "start_s": s.start_s}
            | _round_row(r)
            | {name: _link_value(s, name) for name in extra}
            for s in self.sessions
            for k, r in enumerate(s.rounds)
        ]

    def sha256(self) -> str:
        """Hash of the inputs only (rows in session order, and the prefix table when
        there is one), stable across machines."""
        return self._sha256

    @cached_property
    def _sha256(self) -> str:
        """The hash, computed once per plan (a frozen plan's rows never change; a
        million-request workload spends seconds on it)."""
        content: Any = self.rows()
        if self.prefixes:
            content = {"prefixes": [asdict(p) for p in self.prefixes], "rows": content}
        canonical = json.dumps(content, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    def variant(self, kind: str) -> Plan:
        """The plan a condition runs: ``wait`` as planned, ``control`` with no tool wait,
        ``equal`` with every wait set to the plan's mean (total wait kept)."""
        if kind not in VARIANTS:
            raise PlanError(f"unknown variant '{kind}'; use one of {', '.join(VARIANTS)}")
        gaps = [tuple(r.gap_after_s for r in s.rounds) for s in self.sessions]
        if kind == "control":
            gaps = [tuple(0.0 for _ in g) for g in gaps]
        elif kind == "equal":
            # Every tool call (every round but a session's last) gets the mean wait, so
            # the total wait is kept; for two-round plans this is the plan's mean wait.
            calls = [w for g in gaps for w in g[:-1]]
            mean = sum(calls) / len(calls) if calls else 0.0
            gaps = [tuple([mean] * (len(g) - 1) + [0.0]) for g in gaps]
        pairs = zip(self.sessions, gaps, strict=True)
        sessions = tuple(s.with_gaps(g) for s, g in pairs)
        return Plan(sessions, replace(self.meta, variant=kind), self.prefixes)


def _round_row(r: Round) -> dict[str, Any]:
    """``asdict(r)`` without its deep copy: a million-round workload's rows in seconds."""
    return {
        "new_tokens": r.new_tokens,
        "gen_tokens": r.gen_tokens,
        "gap_after_s": r.gap_after_s,
        "tool_name": r.tool_name,
    }


def _link_value(s: MultiRoundSession, name: str) -> Any:
    """A session's value in one of the prefix or renewal columns (None: it has none)."""
    if name == "prefix":
        return s.prefix
    if s.after is None:
        return None
    return s.after.session if name == "after_session" else s.after.gap_s


def validate_sessions(sessions: tuple[AnySession, ...], source: str) -> None:
    """Reject plans the simulator or a server could not run, naming the field and fix."""
    if not sessions:
        raise PlanError(f"{source}: plan has no sessions; generate one with `rearrival plan`")
    multi = isinstance(sessions[0], MultiRoundSession)
    for index, s in enumerate(sessions):
        where = f"{source}: session row {index}"
        if isinstance(s, MultiRoundSession) != multi:
            raise PlanError(
                f"{source}: session {index} is {'two' if multi else 'multi'}-round but "
                f"session 0 is {'multi' if multi else 'two'}-round; a plan uses one shape "
                "(write every session as 'rounds' to mix lengths)"
            )
        if s.session != index:
            raise PlanError(
                f"{where}: field 'session' is {s.session}, expected {index} "
                "(sessions are numbered 0..N-1 in order)"
            )
        if multi:
            _validate_rounds(s, f"{source}: session {index}")
            continue
        for name in ("prompt_tokens", "gen_tokens", "followup_gen_tokens"):
            if getattr(s, name) < 1:
                raise PlanError(f"{where}: field '{name}' must be a positive integer")
        if s.appended_tokens < 0:
            raise PlanError(f"{where}: field 'appended_tokens' must be >= 0")
        if not s.tool_wait_s >= 0:  # also rejects NaN
            raise PlanError(f"{where}: field 'tool_wait_s' must be a number >= 0")


def _validate_rounds(s: MultiRoundSession, where: str) -> None:
    """A multi-round session the simulator can run: rounds, counts, gaps, start."""
    if not s.rounds:
        raise PlanError(f"{where}: has no rounds; a session makes at least one request")
    if not (math.isfinite(s.start_s) and s.start_s >= 0):
        raise PlanError(f"{where}: field 'start_s' must be a number of seconds >= 0")
    last = len(s.rounds) - 1
    for k, r in enumerate(s.rounds):
        here = f"{where} round {k}"
        if not is_count(r.new_tokens, 1 if k == 0 else 0):
            low = "a positive integer" if k == 0 else "an integer >= 0"
            raise PlanError(f"{here}: field 'new_tokens' must be {low}, got {r.new_tokens!r}")
        if not is_count(r.gen_tokens, 1):
            raise PlanError(
                f"{here}: field 'gen_tokens' must be a positive integer, got {r.gen_tokens!r}"
            )
        if not (math.isfinite(r.gap_after_s) and r.gap_after_s >= 0):
            raise PlanError(f"{here}: field 'gap_after_s' must be a number of seconds >= 0")
        if k == last and r.gap_after_s != 0:
            raise PlanError(
                f"{here}: field 'gap_after_s' is {r.gap_after_s} on the session's last round; "
                "nothing comes back after it, so set it to 0"
            )


def check_context(plan: Plan, max_seq_len: int, source: str) -> None:
    """Refuse a plan whose transcript outgrows a configuration's maximum sequence length:
    a slot holds at most ``max_seq_len`` tokens, so such a round cannot be served."""
    for s in plan.sessions:
        for k, (prompt, r) in enumerate(zip(s.prompts(), s.rounds, strict=True)):
            if prompt + r.gen_tokens > max_seq_len:
                raise PlanError(
                    f"{source}: session {s.session} round {k}: field 'new_tokens': the "
                    f"transcript reaches {prompt + r.gen_tokens} tokens, over the maximum "
                    f"sequence length {max_seq_len}; truncate the session before this round "
                    "or use a configuration compiled for a longer context"
                )


def _token_count(value: Any, field_name: str, where: str) -> int:
    """An integer token count from a row; 3.0 is accepted, 3.5 or "3" are not."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise PlanError(f"{where}: field '{field_name}' must be an integer, got {value!r}")
    return value


def _seconds(value: Any, field_name: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PlanError(f"{where}: field '{field_name}' must be a number of seconds, got {value!r}")
    return float(value)


def _round_from_row(row: dict[str, Any], where: str) -> Round:
    if not isinstance(row, dict):
        raise PlanError(f"{where}: a round is an object with new_tokens, gen_tokens, gap_after_s")
    for name in ("new_tokens", "gen_tokens"):
        if name not in row:
            raise PlanError(
                f"{where}: lacks field '{name}'; a round has new_tokens, gen_tokens, "
                "gap_after_s (0 on the last round) and tool_name"
            )
    tool = row.get("tool_name")
    return Round(
        _token_count(row["new_tokens"], "new_tokens", where),
        _token_count(row["gen_tokens"], "gen_tokens", where),
        _seconds(row.get("gap_after_s", 0.0), "gap_after_s", where),
        "" if tool is None else str(tool),
    )


def _refuse_unknown(row: dict[str, Any], known: frozenset[str], where: str, shape: str) -> None:
    """Refuse a key the plan would otherwise ignore (a misspelt or misplaced field)."""
    unknown = sorted(set(row) - known)
    if not unknown:
        return
    hint = ""
    if unknown[0] in MULTI_ROUND_KEYS:
        hint = "; 'prefix' and 'after' belong to multi-round sessions (with 'rounds')"
    raise PlanError(
        f"{where}: unknown field {unknown[0]!r} in a {shape} session{hint}; its fields are "
        f"{', '.join(sorted(known))}"
    )


def _after_from_json(value: Any, where: str) -> After:
    if not isinstance(value, dict) or "session" not in value or set(value) - {"session", "gap_s"}:
        raise PlanError(
            f'{where}: field \'after\' must be an object {{"session": j, "gap_s": g}} '
            "naming the session this one follows and the seconds after it finishes"
        )
    return After(
        _token_count(value["session"], "after.session", where),
        _seconds(value.get("gap_s", 0.0), "after.gap_s", where),
    )


def _prefix_of(value: Any, table: dict[str, int], where: str) -> tuple[str | None, int]:
    """A session's prefix id and its tokens from the plan's table (None: no prefix)."""
    if value is None:
        return None, 0
    if not isinstance(value, str) or value not in table:
        known = ", ".join(repr(k) for k in table) or "none"
        raise PlanError(
            f"{where}: field 'prefix' {value!r} is not in the plan's 'prefixes' (ids: "
            f"{known}); add it there with its tokens or name a listed one"
        )
    return value, table[value]


def _multi_session_from_json(
    row: dict[str, Any], index: int, source: str, table: dict[str, int]
) -> MultiRoundSession:
    where = f"{source}: session {index}"
    _refuse_unknown(row, MULTI_ROUND_KEYS, where, "multi-round")
    rounds = row["rounds"]
    if not isinstance(rounds, list):
        raise PlanError(f"{where}: field 'rounds' must be a list of rounds")
    after = None if row.get("after") is None else _after_from_json(row["after"], where)
    if after is not None and "start_s" in row:
        raise PlanError(
            f"{where}: has both 'start_s' and 'after'; a renewed session starts when the "
            "session it follows finishes: drop 'start_s'"
        )
    prefix, tokens = _prefix_of(row.get("prefix"), table, where)
    return MultiRoundSession(
        session=_token_count(row.get("session", index), "session", where),
        rounds=tuple(_round_from_row(r, f"{where} round {k}") for k, r in enumerate(rounds)),
        start_s=_seconds(row.get("start_s", 0.0), "start_s", where),
        prefix=prefix,
        prefix_tokens=tokens,
        after=after,
    )


def prefixes_from_json(raw: Any, source: str) -> tuple[Prefix, ...]:
    """The plan-level ``prefixes`` list (JSON or the Parquet metadata) as ``Prefix``
    entries; duplicates and bad counts are refused by ``validate_links``."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise PlanError(f'{source}: field \'prefixes\' must be a list of {{"id", "tokens"}}')
    out = []
    for index, entry in enumerate(raw):
        where = f"{source}: prefixes[{index}]"
        if not isinstance(entry, dict) or set(entry) != {"id", "tokens"}:
            raise PlanError(
                f'{where}: a prefix is {{"id": "agent-a", "tokens": 1500}}, got {entry!r}'
            )
        out.append(Prefix(entry["id"], entry["tokens"]))
    prefixes = tuple(out)
    prefix_table(prefixes, source)
    return prefixes


def _links_from_row(
    row: dict[str, Any], table: dict[str, int], where: str
) -> tuple[str | None, int, After | None]:
    """A Parquet row's prefix and renewal columns (absent or null: none)."""
    prefix, tokens = _prefix_of(row.get("prefix"), table, where)
    leader, gap = row.get("after_session"), row.get("after_gap_s")
    if (leader is None) != (gap is None):
        raise PlanError(
            f"{where}: columns 'after_session' and 'after_gap_s' are set together or not "
            "at all; give both for a renewed session"
        )
    if leader is None:
        return prefix, tokens, None
    after = After(_token_count(leader, "after_session", where), _seconds(gap, "after_gap_s", where))
    return prefix, tokens, after


def _multi_sessions_from_rows(
    rows: list[dict[str, Any]], source: str, table: dict[str, int]
) -> list[MultiRoundSession]:
    """Parquet rows (one per session and round, in order) grouped into sessions."""
    sessions: list[MultiRoundSession] = []
    for index, row in enumerate(rows):
        where = f"{source}: row {index} (session {row.get('session')}, round {row.get('round')})"
        session = _token_count(row["session"], "session", where)
        k = _token_count(row["round"], "round", where)
        prefix, tokens, after = _links_from_row(row, table, where)
        if k == 0:
            if session != len(sessions):
                raise PlanError(
                    f"{where}: field 'session' is {session}, expected {len(sessions)} "
                    "(sessions are numbered 0..N-1, rows sorted by session then round)"
                )
            start = _seconds(row["start_s"], "start_s", where)
            sessions.append(MultiRoundSession(session, (), start, prefix, tokens, after))
        elif not sessions or session != len(sessions) - 1 or k != len(sessions[-1].rounds):
            raise PlanError(
                f"{where}: field 'round' out of order; rows are sorted by session then "
                "round, rounds numbered 0..K-1"
            )
        elif row["start_s"] != sessions[-1].start_s:
            raise PlanError(f"{where}: field 'start_s' differs from the session's round 0")
        elif (prefix, after) != (sessions[-1].prefix, sessions[-1].after):
            raise PlanError(
                f"{where}: columns 'prefix', 'after_session', 'after_gap_s' differ from the "
                "session's round 0; they are the session's, the same on each of its rows"
            )
        current = sessions[-1]
        sessions[-1] = replace(current, rounds=(*current.rounds, _round_from_row(row, where)))
    return sessions


def _session_from_row(row: dict[str, Any], index: int, source: str) -> Session:
    missing = [name for name, _ in COLUMNS if name not in row]
    if missing:
        raise PlanError(
            f"{source}: session row {index} lacks field '{missing[0]}'; "
            f"a plan row has {', '.join(n for n, _ in COLUMNS)}"
        )
    where = f"{source}: session row {index}"
    _refuse_unknown(row, TWO_ROUND_KEYS, where, "two-round (paper)")
    counts = {
        name: _token_count(row[name], name, where)
        for name in (
            "session",
            "prompt_tokens",
            "gen_tokens",
            "followup_gen_tokens",
            "appended_tokens",
        )
    }
    return Session(
        **counts,
        tool_wait_s=_seconds(row["tool_wait_s"], "tool_wait_s", where),
        tool_name=str(row["tool_name"]),
    )


def plan_from_rows(
    rows: list[dict[str, Any]], meta: PlanMeta, source: str, prefixes: tuple[Prefix, ...] = ()
) -> Plan:
    """A plan from two-round rows (one per session) or multi-round JSON sessions (each with
    a 'rounds' list, naming ``prefixes`` by id); a mix of the two is refused naming the
    first session that differs."""
    shapes = ["rounds" in r if isinstance(r, dict) else False for r in rows]
    if any(shapes) and not all(shapes):
        odd = shapes.index(not shapes[0])
        raise PlanError(
            f"{source}: session {odd} has {'no ' if shapes[0] else ''}'rounds' list but "
            f"session 0 has {'one' if shapes[0] else 'none'}; a plan is all two-round rows "
            "or all multi-round sessions"
        )
    if rows and shapes[0]:
        table = prefix_table(prefixes, source)
        sessions: tuple[AnySession, ...] = tuple(
            _multi_session_from_json(r, i, source, table) for i, r in enumerate(rows)
        )
    else:
        sessions = tuple(_session_from_row(r, i, source) for i, r in enumerate(rows))
    validate_sessions(sessions, source)
    validate_links(sessions, prefixes, source, isinstance(sessions[0], MultiRoundSession))
    return Plan(sessions, meta, prefixes)


def _meta_from_json(raw: dict[str, Any]) -> PlanMeta:
    known = {k: raw[k] for k in PlanMeta.__dataclass_fields__ if k in raw}
    return PlanMeta(**known)


# The file `rearrival plans from-trace` and `from-otel` write into their --out directory.
IMPORTED_PLAN_FILE = "plan.parquet"
IMPORTED_SOURCES = {"tracelab": "from-trace", "otel": "from-otel"}


def _remake(path: Path, meta: PlanMeta | None) -> str:
    """The command that writes this plan again: the trace import that wrote it (by its
    recorded source, or for an unreadable file by the name imports give it), else the
    generator."""
    source = meta.source if meta is not None else None
    if source in IMPORTED_SOURCES:
        return f"`rearrival plans {IMPORTED_SOURCES[source]}` from its trace"
    if source is None and path.name == IMPORTED_PLAN_FILE:
        return "`rearrival plans from-trace` or `rearrival plans from-otel` from its trace"
    return "`rearrival plan`"


def load_plan(path: str | Path) -> Plan:
    """Read a Parquet plan (with metadata) or a JSON ``{"sessions": [...]}`` plan."""
    path = Path(path)
    if not path.exists():
        raise PlanError(f"{path}: no such plan file; create one with `rearrival plan`")
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise PlanError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc
        if not isinstance(data, dict) or not isinstance(data.get("sessions"), list):
            raise PlanError(f"{path}: a JSON plan is an object with a 'sessions' list")
        prefixes = prefixes_from_json(data.get("prefixes"), str(path))
        meta = _meta_from_json(data.get("meta", {}))
        return plan_from_rows(data["sessions"], meta, str(path), prefixes)
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise PlanError(
            f"{path}: not a readable Parquet plan ({exc}); regenerate it with {_remake(path, None)}"
        ) from exc
    metadata = table.schema.metadata or {}
    raw_meta = metadata.get(b"rearrival.plan")
    meta = _meta_from_json(json.loads(raw_meta)) if raw_meta else PlanMeta()
    raw_prefixes = metadata.get(PREFIXES_KEY)
    prefixes = prefixes_from_json(json.loads(raw_prefixes) if raw_prefixes else None, str(path))
    if "round" in table.column_names:
        plan = _multi_round_from_table(table, meta, str(path), prefixes)
    else:
        plan = plan_from_rows(table.to_pylist(), meta, str(path), prefixes)
    stored = (table.schema.metadata or {}).get(b"rearrival.sha256")
    if stored and stored.decode() != plan.sha256():
        raise PlanError(
            f"{path}: content does not match its stored sha256; the file was "
            f"edited or damaged, regenerate it with {_remake(path, meta)}"
        )
    return plan


def _multi_round_from_table(
    table: pa.Table, meta: PlanMeta, source: str, prefixes: tuple[Prefix, ...]
) -> Plan:
    missing = [name for name, _ in ROUND_COLUMNS if name not in table.column_names]
    if missing:
        raise PlanError(
            f"{source}: multi-round plan lacks column '{missing[0]}'; its columns are "
            f"{', '.join(n for n, _ in ROUND_COLUMNS)}"
        )
    if not table.num_rows:
        raise PlanError(f"{source}: plan has no sessions; generate one with `rearrival plan`")
    table_of = prefix_table(prefixes, source)
    sessions = tuple(_multi_sessions_from_rows(table.to_pylist(), source, table_of))
    validate_sessions(sessions, source)
    validate_links(sessions, prefixes, source, isinstance(sessions[0], MultiRoundSession))
    return Plan(sessions, meta, prefixes)


def arrow_schema(layout: tuple[tuple[str, str], ...]) -> pa.Schema:
    """The Arrow schema of a column layout (``COLUMNS``, ``ROUND_COLUMNS`` plus extras)."""
    import pyarrow as pa

    return pa.schema([(name, getattr(pa, kind)()) for name, kind in layout])


def plan_table(plan: Plan) -> pa.Table:
    """Arrow table of the plan with seed, N, generator version and sha256 in metadata."""
    import pyarrow as pa

    rows = plan.rows()
    layout = ROUND_COLUMNS + plan.extra_columns() if plan.multi_round else COLUMNS
    schema = arrow_schema(layout)
    columns = {name: [row[name] for row in rows] for name, _ in layout}
    metadata = {
        b"rearrival.plan": json.dumps(plan.meta.as_dict(plan.n), sort_keys=True).encode(),
        b"rearrival.sha256": plan.sha256().encode(),
    }
    if plan.prefixes:
        metadata[PREFIXES_KEY] = json.dumps([asdict(p) for p in plan.prefixes]).encode()
    return pa.table(columns, schema=schema.with_metadata(metadata))


def _json_session(s: MultiRoundSession) -> dict[str, Any]:
    """A multi-round session as JSON: ``after`` in place of ``start_s`` when it has one,
    ``prefix`` only when it names one."""
    out: dict[str, Any] = {"session": s.session}
    if s.after is None:
        out["start_s"] = s.start_s
    else:
        out["after"] = asdict(s.after)
    if s.prefix is not None:
        out["prefix"] = s.prefix
    return out | {"rounds": [_round_row(r) for r in s.rounds]}


def write_plan(plan: Plan, path: str | Path) -> Path:
    """Write a plan as Parquet (byte-identical for identical plans) or JSON, atomically."""
    path = Path(path)
    if path.suffix == ".json":
        sessions = (
            plan.rows() if not plan.multi_round else [_json_session(s) for s in plan.sessions]
        )
        body: dict[str, Any] = {"meta": plan.meta.as_dict(plan.n), "sessions": sessions}
        if plan.prefixes:
            body["prefixes"] = [asdict(p) for p in plan.prefixes]
        atomic_write_bytes(path, (json.dumps(body, indent=1, sort_keys=True) + "\n").encode())
        return path
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(plan_table(plan), sink, compression="zstd", write_statistics=False)
    atomic_write_bytes(path, sink.getvalue().to_pybytes())
    return path
