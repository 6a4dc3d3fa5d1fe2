"""The ``workload`` block of a study (docs/DESIGN.md §10): a study's input plans when they
are not the paper's two-round sessions, seeded agent sessions or sessions sampled from a
real trace. The generator's defaults are :class:`rearrival.model.plans.plangen.MultiRoundSpec`'s."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rearrival.config.errors import StudyConfigError
from rearrival.model.plans.plan import Plan
from rearrival.model.plans.plangen import (
    MultiRoundSpec,
    PlanGenError,
    derive_seed,
    generate_multi_round_plan,
)
from rearrival.model.plans.tools import ToolTable
from rearrival.model.plans.trace_plans import TraceError, file_sha256
from rearrival.model.plans.tracelab_import import plans_from_trace


@dataclass(frozen=True)
class TraceSource:
    """A real agent trace a study samples its sessions from (TraceLab round trace)."""

    path: str
    sha256: str
    max_context: int
    token_scale: float = 1.0
    on_overflow: str = "truncate"


@dataclass(frozen=True)
class Workload:
    """A study's input plans when they are not the paper's two-round sessions: seeded
    agent sessions (``kind`` multi_round, drawn by ``spec``) or sessions sampled from a
    real trace (``kind`` trace, ``trace``)."""

    kind: str
    spec: MultiRoundSpec | None = None
    trace: TraceSource | None = None

    def as_dict(self) -> dict[str, Any]:
        """What the study registers: the kind and every setting (for a trace, its sha256,
        so an edited trace file is a changed design)."""
        if self.trace is not None:
            t = self.trace
            return {
                "kind": self.kind,
                "path": t.path,
                "sha256": t.sha256,
                "token_scale": t.token_scale,
                "on_overflow": t.on_overflow,
            }
        return {"kind": self.kind, **self.spec.as_dict()}

    def plan(
        self, n: int, *, study_seed: int, replicate: int, block: int, tool_table: ToolTable
    ) -> Plan:
        """The plan of N sessions for one (replicate, block), seeded like every plan."""
        if self.spec is not None:
            return generate_multi_round_plan(
                n,
                study_seed=study_seed,
                replicate=replicate,
                block=block,
                tool_table=tool_table,
                spec=self.spec,
            )
        return _trace_plan(self.trace, n, study_seed, replicate, block)


def _trace_plan(source: TraceSource, n: int, study_seed: int, replicate: int, block: int) -> Plan:
    """N sessions sampled from the trace with a seed from (study seed, replicate, N,
    block); a trace that cannot give N whole sessions is refused, never shrunk."""
    seed = derive_seed(study_seed, replicate, n, block, "trace-sessions")
    try:
        result = plans_from_trace(
            source.path,
            sessions=n,
            seed=seed,
            max_context=source.max_context,
            on_overflow=source.on_overflow,
            token_scale=source.token_scale,
        )
    except TraceError as exc:
        raise StudyConfigError(f"workload.path {source.path}: {exc}") from None
    plan = result.plan
    if plan.n != n:
        raise StudyConfigError(
            f"workload.path {source.path}: {n - plan.n} of the {n} sampled sessions do not "
            f"fit the maximum sequence length {source.max_context} even in their first "
            "round; lower the study's n or set workload.token_scale"
        )
    meta = replace(plan.meta, study_seed=study_seed, replicate=replicate, block=block, n=n)
    return replace(plan, meta=meta)


TRACE_KEYS = ("path", "token_scale", "on_overflow")


def workload_from_mapping(
    name: str, raw: dict[str, Any] | None, max_seq_len: int, where: str
) -> Workload | None:
    """The study's workload block: a generator spec checked against the slot length, or a
    trace file (hashed, so an edited trace is a changed design)."""
    if raw is None:
        return None
    settings = {
        key: tuple(value) if isinstance(value, list) else value for key, value in raw.items()
    }
    kind = settings.pop("kind")
    key_of = f"{where}: studies.{name}.workload"
    foreign = [k for k in settings if (k in TRACE_KEYS) != (kind == "trace")]
    if foreign:
        raise StudyConfigError(
            f"{key_of}.{foreign[0]}: not a key of kind {kind}; a multi_round workload takes "
            "rounds, first_prompt_tokens, new_tokens, gen_tokens, start_spread_s, a trace "
            f"workload {', '.join(TRACE_KEYS)}"
        )
    if kind == "trace":
        return Workload(kind, trace=_trace_source(settings, max_seq_len, key_of))
    try:
        spec = MultiRoundSpec(**settings, max_context_tokens=max_seq_len)
    except PlanGenError as exc:
        key = exc.argument or "workload"
        raise StudyConfigError(f"{where}: studies.{name}.workload.{key}: {exc}") from None
    return Workload(kind, spec=spec)


def _trace_source(settings: dict[str, Any], max_seq_len: int, key_of: str) -> TraceSource:
    if "path" not in settings:
        raise StudyConfigError(f"{key_of}.path: a trace workload names its trace file")
    path = Path(settings["path"])
    if not path.is_file():
        raise StudyConfigError(
            f"{key_of}.path: no such file {path}; give a TraceLab round trace (.jsonl[.gz])"
        )
    return TraceSource(
        path=str(path),
        sha256=file_sha256(path),
        max_context=max_seq_len,
        token_scale=float(settings.get("token_scale", TraceSource.token_scale)),
        on_overflow=str(settings.get("on_overflow", TraceSource.on_overflow)),
    )
