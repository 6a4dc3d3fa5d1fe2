"""The ``rearrival`` command line: one verb per pipeline stage (docs/DESIGN.md).

Each area of the library registers its own verbs from ``rearrival.commands``; heavy
imports happen inside the verbs so ``--help`` and small verbs stay fast. Any library
error that names a file and a fix becomes one line on stderr and exit code 2.
"""

from __future__ import annotations

import sys
from typing import Any

import typer
from typer.core import TyperGroup

from rearrival.commands import ALL_AREAS
from rearrival.commands.panels import USER_PANEL
from rearrival.errors import RearrivalError


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


app = typer.Typer(
    cls=PanelledGroup,
    name="rearrival",
    help="Preregistered experiments on tool waiting and re-arrival in compile-time-static "
    "LLM serving.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help wraps long defaults; Rich's boxes cut them off
)
for register in ALL_AREAS:
    register(app)


@app.command("version")
def version() -> None:
    """Print the rearrival version and the measured profile it uses by default."""
    from rearrival import __version__
    from rearrival.model.cost.profile import measured_profile

    typer.echo(f"rearrival {__version__} (profile {measured_profile().version})")


def main() -> None:
    """Console entry point: clear one-line errors instead of tracebacks for bad input."""
    try:
        app()
    except RearrivalError as exc:
        typer.echo(f"rearrival: error: {exc}", err=True)
        sys.exit(2)
