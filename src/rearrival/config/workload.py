"""The ``workload`` block of a study (docs/DESIGN.md §10): a study's input plans when they
are not the paper's two-round sessions, seeded agent sessions or sessions sampled from a
real trace. The generator's defaults are :class:`rearrival.model.plans.plangen.MultiRoundSpec`'s.

Settings only: the block is checked and a trace file hashed (its sha256 is part of the
registered design); the stages that write plans draw them
(``rearrival.model.plans.workload.WorkloadPlans``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rearrival.config.errors import StudyConfigError
from rearrival.config.keys import object_of, properties_of
from rearrival.model.plans.plangen import MultiRoundSpec, PlanGenError
from rearrival.model.plans.trace_plans import file_sha256
from rearrival.model.plans.workload import TraceSource


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


KINDS = ("multi_round", "trace")

# What the schema says of the generator's keys (MultiRoundSpec's fields; the slot length is
# the model's and the tool cap the paper's, neither is a key) and of a trace's.
GENERATOR_KEYS = {
    "rounds": {
        "description": "Rounds per session [lo, hi] (uniform); one tool call between rounds.",
        "items": {"minimum": 1},
    },
    "first_prompt_tokens": {
        "description": "First prompt [lo, hi] tokens.",
        "items": {"minimum": 1},
    },
    "new_tokens": {
        "description": "Tokens each tool result appends to the transcript [lo, hi].",
        "items": {"minimum": 0},
    },
    "gen_tokens": {"description": "Tokens each round generates [lo, hi].", "items": {"minimum": 1}},
    "start_spread_s": {
        "description": "Session starts uniform in [0, this] seconds (open arrivals).",
        "minimum": 0,
    },
}
TRACE_KEY_WORDS = {
    "path": {"description": "kind trace: a TraceLab normalized round trace (.jsonl or .jsonl.gz)."},
    "token_scale": {
        "description": "kind trace: what-if factor on every token count (a labelled what-if, "
        "e.g. to fit a long-context trace).",
        "exclusiveMinimum": 0,
    },
    "on_overflow": {
        "description": "kind trace: a round over the maximum sequence length ends its session "
        "there (truncate, counted) or stops the plans stage (refuse).",
        "enum": ["truncate", "refuse"],
    },
}
TRACE_KEYS = tuple(TRACE_KEY_WORDS)


def workload_schema() -> dict[str, Any]:
    """The schema of a study's ``workload`` block; its description states the defaults a
    left-out key takes, read from the generator and the trace reader."""
    spec = MultiRoundSpec()
    drawn = ", ".join(f"{k} {list(getattr(spec, k))}" for k in list(GENERATOR_KEYS)[:4])
    description = (
        "Input plans of the study. Left out: the paper's two-round sessions (one tool wait). "
        "kind multi_round: seeded agent sessions with several tool calls and a growing "
        "transcript (paper II-C's draws per round; keys left out take the generator's "
        f"defaults: {drawn}, start_spread_s {spec.start_spread_s:g}). kind trace: each plan "
        "samples N whole sessions (the study's n) from a TraceLab round trace at path, seeded "
        f"per replicate (token_scale default {TraceSource.token_scale:g}, on_overflow default "
        f"{TraceSource.on_overflow}). Part of the registered design (a trace by its sha256)."
    )
    kind = {
        "description": "multi_round (seeded agent sessions) or trace (sessions sampled from a "
        "real trace).",
        "type": "string",
        "enum": list(KINDS),
    }
    properties = (
        {"kind": kind}
        | properties_of(MultiRoundSpec, GENERATOR_KEYS)
        | properties_of(TraceSource, TRACE_KEY_WORDS)
    )
    return object_of(properties, description, ["kind"])


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
        spec = MultiRoundSpec(**settings, max_seq_len=max_seq_len)
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
        max_seq_len=max_seq_len,
        token_scale=float(settings.get("token_scale", TraceSource.token_scale)),
        on_overflow=str(settings.get("on_overflow", TraceSource.on_overflow)),
    )
