"""Stable import path for plan files (docs/DESIGN.md §2); the code is rearrival.model.plans."""

from rearrival.model.plans import Plan, PlanError, Session, load_plan, write_plan

__all__ = ["Plan", "PlanError", "Session", "load_plan", "write_plan"]
