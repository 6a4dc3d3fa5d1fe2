"""Stable import path for plan files (SPEC 3); the code lives in rearrival.model.plans."""

from rearrival.model.plans import Plan, PlanError, Session, load_plan, write_plan

__all__ = ["Plan", "PlanError", "Session", "load_plan", "write_plan"]
