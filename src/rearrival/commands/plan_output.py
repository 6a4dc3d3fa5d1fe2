"""The one check of a plan verb's ``--out`` (``plan``, ``plans open``, ``plans closed``): a
plan file is Parquet or JSON (``rearrival.model.plans.pool.PLAN_SUFFIXES``)."""

from __future__ import annotations

from pathlib import Path

from rearrival.errors import RearrivalError


class PlanOutputError(RearrivalError, ValueError):
    """An output path the plan verb cannot write."""


def check_plan_out(out: Path) -> None:
    """Refuse an ``--out`` that is not a plan file, in one line."""
    from rearrival.model.plans.pool import PLAN_SUFFIXES

    if out.suffix not in PLAN_SUFFIXES:
        raise PlanOutputError(f"option --out '{out}': a plan file ends in .parquet or .json")
