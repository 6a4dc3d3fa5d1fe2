"""The plans of a study's workload when they are not the paper's two-round sessions
(docs/DESIGN.md §11): seeded agent sessions drawn from a :class:`MultiRoundSpec`, or N
whole sessions sampled from a real trace (TraceLab round trace).

A stage that writes plans (the plans stage, a study's own search) makes one
:class:`WorkloadPlans` and asks it for every (N, replicate, block): a trace is parsed
once per stage, not once per plan, and never hashed again (its sha256 is the one the
study definition registered).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

from rearrival.model.plans.plan import Plan
from rearrival.model.plans.plangen import MultiRoundSpec, derive_seed, generate_multi_round_plan
from rearrival.model.plans.tools import ToolTable
from rearrival.model.plans.trace_plans import ImportOptions, TraceError, TraceSession, build_plan
from rearrival.model.plans.tracelab_import import SOURCE, read_tracelab


@dataclass(frozen=True)
class TraceSource:
    """A real agent trace a study samples its sessions from, by path and sha256."""

    path: str
    sha256: str
    max_seq_len: int
    token_scale: float = 1.0
    on_overflow: str = "truncate"


class WorkloadPlans:
    """The plans of one workload: ``spec``'s agent sessions or ``trace``'s sessions."""

    def __init__(self, spec: MultiRoundSpec | None = None, trace: TraceSource | None = None):
        if (spec is None) == (trace is None):
            raise ValueError("a workload draws its sessions from a spec or a trace, one of them")
        self.spec, self.trace = spec, trace

    @cached_property
    def _parsed(self) -> tuple[list[TraceSession], dict]:
        """The trace's sessions and reading notes, read on first use only."""
        return read_tracelab(Path(self.trace.path))

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
        return self._trace_plan(n, study_seed, replicate, block)

    def _trace_plan(self, n: int, study_seed: int, replicate: int, block: int) -> Plan:
        """N sessions sampled from the trace with a seed from (study seed, replicate, N,
        block); a trace that cannot give N whole sessions is refused, never shrunk."""
        source = self.trace
        seed = derive_seed(study_seed, replicate, n, block, "trace-sessions")
        sessions, notes = self._parsed
        options = ImportOptions(
            sessions=n,
            seed=seed,
            max_seq_len=source.max_seq_len,
            on_overflow=source.on_overflow,
            token_scale=source.token_scale,
        )
        path = Path(source.path)
        plan = build_plan(
            sessions,
            path=path,
            source=SOURCE,
            trace_sha256=source.sha256,
            options=options,
            extra_notes=notes,
        ).plan
        if plan.n != n:
            raise TraceError(
                f"{source.path}: {n - plan.n} of the {n} sampled sessions do not fit the "
                f"maximum sequence length {source.max_seq_len} even in their first round; "
                "lower the study's n or set workload.token_scale"
            )
        meta = replace(plan.meta, study_seed=study_seed, replicate=replicate, block=block, n=n)
        return replace(plan, meta=meta)
