"""Input plans (docs/DESIGN.md §2, paper Section II-C): the fixed inputs of one replicate.

A plan fixes every session's prompt length, generation lengths, appended tokens and
tool wait; it never holds outcomes. Every condition of a replicate runs the same plan,
so this module is the one place where inputs are defined, validated, hashed and stored.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from rearrival.atomic import atomic_write_bytes
from rearrival.errors import RearrivalError
from rearrival.vocabulary import VARIANTS

GENERATOR_VERSION = "rearrival-plans/2"
APPENDED_TOKENS = 8

COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("session", pa.int64()),
    ("prompt_tokens", pa.int64()),
    ("gen_tokens", pa.int64()),
    ("followup_gen_tokens", pa.int64()),
    ("appended_tokens", pa.int64()),
    ("tool_wait_s", pa.float64()),
    ("tool_name", pa.string()),
)
SCHEMA = pa.schema(list(COLUMNS))


class PlanError(RearrivalError, ValueError):
    """A plan file or plan row that cannot be used; the message names file, field and fix."""


@dataclass(frozen=True)
class Session:
    """One agent session: first request, one tool wait, one re-arrival."""

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


@dataclass(frozen=True)
class Plan:
    """The sessions of one replicate plus provenance."""

    sessions: tuple[Session, ...]
    meta: PlanMeta = field(default_factory=PlanMeta)

    def __post_init__(self) -> None:
        validate_sessions(self.sessions, "<plan>")

    @property
    def n(self) -> int:
        return len(self.sessions)

    def rows(self) -> list[dict[str, Any]]:
        return [asdict(s) for s in self.sessions]

    def sha256(self) -> str:
        """Hash of the inputs only (rows in session order), stable across machines."""
        canonical = json.dumps(self.rows(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    def variant(self, kind: str) -> Plan:
        """The plan a condition runs: ``wait`` as planned, ``control`` with no tool wait,
        ``equal`` with every wait set to the plan's mean (total wait kept)."""
        if kind not in VARIANTS:
            raise PlanError(f"unknown variant '{kind}'; use one of {', '.join(VARIANTS)}")
        if kind == "wait":
            waits = [s.tool_wait_s for s in self.sessions]
        elif kind == "control":
            waits = [0.0] * self.n
        else:
            mean = sum(s.tool_wait_s for s in self.sessions) / self.n
            waits = [mean] * self.n
        pairs = zip(self.sessions, waits, strict=True)
        sessions = tuple(replace(s, tool_wait_s=w) for s, w in pairs)
        return Plan(sessions, replace(self.meta, variant=kind))


def validate_sessions(sessions: tuple[Session, ...], source: str) -> None:
    """Reject plans the simulator or a server could not run, naming the field and fix."""
    if not sessions:
        raise PlanError(f"{source}: plan has no sessions; generate one with `rearrival plan`")
    for index, s in enumerate(sessions):
        where = f"{source}: session row {index}"
        if s.session != index:
            raise PlanError(
                f"{where}: field 'session' is {s.session}, expected {index} "
                "(sessions are numbered 0..N-1 in order)"
            )
        for name in ("prompt_tokens", "gen_tokens", "followup_gen_tokens"):
            if getattr(s, name) < 1:
                raise PlanError(f"{where}: field '{name}' must be a positive integer")
        if s.appended_tokens < 0:
            raise PlanError(f"{where}: field 'appended_tokens' must be >= 0")
        if not s.tool_wait_s >= 0:  # also rejects NaN
            raise PlanError(f"{where}: field 'tool_wait_s' must be a number >= 0")


def _session_from_row(row: dict[str, Any], index: int, source: str) -> Session:
    missing = [name for name, _ in COLUMNS if name not in row]
    if missing:
        raise PlanError(
            f"{source}: session row {index} lacks field '{missing[0]}'; "
            f"a plan row has {', '.join(n for n, _ in COLUMNS)}"
        )
    try:
        return Session(
            session=int(row["session"]),
            prompt_tokens=int(row["prompt_tokens"]),
            gen_tokens=int(row["gen_tokens"]),
            followup_gen_tokens=int(row["followup_gen_tokens"]),
            appended_tokens=int(row["appended_tokens"]),
            tool_wait_s=float(row["tool_wait_s"]),
            tool_name=str(row["tool_name"]),
        )
    except (TypeError, ValueError) as exc:
        raise PlanError(f"{source}: session row {index}: {exc}") from exc


def plan_from_rows(rows: list[dict[str, Any]], meta: PlanMeta, source: str) -> Plan:
    sessions = tuple(_session_from_row(r, i, source) for i, r in enumerate(rows))
    validate_sessions(sessions, source)
    return Plan(sessions, meta)


def _meta_from_json(raw: dict[str, Any]) -> PlanMeta:
    known = {k: raw[k] for k in PlanMeta.__dataclass_fields__ if k in raw}
    return PlanMeta(**known)


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
        return plan_from_rows(data["sessions"], _meta_from_json(data.get("meta", {})), str(path))
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise PlanError(
            f"{path}: not a readable Parquet plan ({exc}); regenerate it with `rearrival plan`"
        ) from exc
    raw_meta = (table.schema.metadata or {}).get(b"rearrival.plan")
    meta = _meta_from_json(json.loads(raw_meta)) if raw_meta else PlanMeta()
    plan = plan_from_rows(table.to_pylist(), meta, str(path))
    stored = (table.schema.metadata or {}).get(b"rearrival.sha256")
    if stored and stored.decode() != plan.sha256():
        raise PlanError(
            f"{path}: content does not match its stored sha256; the file was "
            "edited or damaged, regenerate it with `rearrival plan`"
        )
    return plan


def plan_table(plan: Plan) -> pa.Table:
    """Arrow table of the plan with seed, N, generator version and sha256 in metadata."""
    columns = {name: [getattr(s, name) for s in plan.sessions] for name, _ in COLUMNS}
    meta = asdict(plan.meta) | {"n": plan.n}
    metadata = {
        b"rearrival.plan": json.dumps(meta, sort_keys=True).encode(),
        b"rearrival.sha256": plan.sha256().encode(),
    }
    return pa.table(columns, schema=SCHEMA.with_metadata(metadata))


def write_plan(plan: Plan, path: str | Path) -> Path:
    """Write a plan as Parquet (byte-identical for identical plans) or JSON, atomically."""
    path = Path(path)
    if path.suffix == ".json":
        body = {"meta": asdict(plan.meta) | {"n": plan.n}, "sessions": plan.rows()}
        atomic_write_bytes(path, (json.dumps(body, indent=1, sort_keys=True) + "\n").encode())
        return path
    sink = pa.BufferOutputStream()
    pq.write_table(plan_table(plan), sink, compression="zstd", write_statistics=False)
    atomic_write_bytes(path, sink.getvalue().to_pybytes())
    return path
