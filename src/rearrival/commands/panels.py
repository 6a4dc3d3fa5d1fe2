"""How ``rearrival --help`` (and every group's help) lists verbs: in two groups, the
verbs a user runs and the pipeline's own stages, which the Snakemake rules call (each a
verb's ``rich_help_panel``), each summary whole."""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperGroup

USER_PANEL = "Commands"
PIPELINE_PANEL = "Pipeline stages (called by the Snakemake rules; rarely typed by hand)"


class PanelledGroup(TyperGroup):
    """Plain help (no Rich boxes) that lists the verbs under their ``rich_help_panel``,
    the user's first, each summary whole: click's default cuts every summary to the
    terminal width with '...'."""

    def format_commands(self, ctx: typer.Context, formatter: Any) -> None:
        panels: dict[str, list[tuple[str, str]]] = {USER_PANEL: []}
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is None or command.hidden:
                continue
            panel = getattr(command, "rich_help_panel", None) or USER_PANEL
            panels.setdefault(panel, []).append((name, command.get_short_help_str(limit=10_000)))
        for panel, rows in panels.items():
            if rows:
                with formatter.section(panel):
                    formatter.write_dl(rows)
