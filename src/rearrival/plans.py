"""Stable import path for plan files (docs/DESIGN.md "Plans"); the code lives in
rearrival.model.plans."""

from rearrival.model.plans import (
    MultiRoundSession,
    Plan,
    PlanError,
    Round,
    Session,
    load_plan,
    write_plan,
)

__all__ = ["MultiRoundSession", "Plan", "PlanError", "Round", "Session", "load_plan", "write_plan"]
