"""Stable import path for plan files and trace imports (docs/DESIGN.md "Plans"); the code
lives in rearrival.model.plans.plan, .tracelab_import and .otel_import."""

from rearrival.model.plans.otel_import import plans_from_otel
from rearrival.model.plans.plan import (
    MultiRoundSession,
    Plan,
    PlanError,
    Round,
    Session,
    load_plan,
    write_plan,
)
from rearrival.model.plans.trace_plans import ImportResult, TraceError
from rearrival.model.plans.tracelab_import import plans_from_trace

__all__ = [
    "ImportResult",
    "MultiRoundSession",
    "Plan",
    "PlanError",
    "Round",
    "Session",
    "TraceError",
    "load_plan",
    "plans_from_otel",
    "plans_from_trace",
    "write_plan",
]
