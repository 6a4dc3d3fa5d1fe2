"""The error of a plan that cannot be used (docs/DESIGN.md "Plans"), apart so that the
plan model and its checks (``plan``, ``plan_links``) share it without importing each
other."""

from __future__ import annotations

from rearrival.errors import RearrivalError


class PlanError(RearrivalError, ValueError):
    """A plan file or plan row that cannot be used; the message names file, field and fix."""
