"""CLI verbs of the simulate area (registered by rearrival.cli)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this area's verbs to the top-level app."""
