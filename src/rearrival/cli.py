"""The ``rearrival`` command line: one verb per pipeline stage (docs/DESIGN.md).

Each area of the library registers its own verbs from ``rearrival.commands``; heavy
imports happen inside the verbs so ``--help`` and small verbs stay fast. Any library
error that names a file and a fix becomes one line on stderr and exit code 2.
"""

from __future__ import annotations

import sys

import typer

from rearrival.commands import ALL_AREAS
from rearrival.commands.panels import PanelledGroup
from rearrival.errors import RearrivalError, disk_problem

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
    """Print the rearrival version and the profile simulate, search and advise use here
    by default, with why."""
    from rearrival import __version__
    from rearrival.commands.profile import profile_for_config
    from rearrival.config.location import DEFAULT_CONFIG

    choice = profile_for_config(DEFAULT_CONFIG, None, config_given=False)
    typer.echo(f"rearrival {__version__}")
    typer.echo(
        f"profile of simulate, search and advise here: {choice.profile.description()}: {choice.why}"
    )


def main() -> None:
    """Console entry point: clear one-line errors instead of tracebacks for bad input, and
    for an option click refuses (a value out of range, a misspelled option) one line naming
    the verb and its --help, not click's four-line usage box; a full disk or an unwritable
    folder is one line; a SIGTERM, SIGINT or SIGHUP stops every server the verb started and
    is one line naming what was running, exit code 128 + the signal
    (rearrival.measure.process_groups). Typer vendors click (``typer._click``, pinned with
    typer); its exceptions are those."""
    from typer._click import exceptions as click

    from rearrival.measure.process_groups import Interrupted, stopping_on_signals

    try:
        with stopping_on_signals():
            code = app(standalone_mode=False)
    except RearrivalError as exc:
        typer.echo(f"rearrival: error: {exc}", err=True)
        sys.exit(2)
    except OSError as exc:  # a full disk or an unwritable folder: the user's to fix
        problem = disk_problem(exc)
        if problem is None:
            raise
        typer.echo(f"rearrival: error: {problem}", err=True)
        sys.exit(2)
    except Interrupted as stop:
        typer.echo(f"rearrival: {stop.signal_name}: {stop}", err=True)
        sys.exit(stop.exit_code)
    except click.NoArgsIsHelpError as exc:
        typer.echo(exc.ctx.get_help() if exc.ctx is not None else exc.format_message())
        sys.exit(2)
    except click.UsageError as exc:
        verb = exc.ctx.command_path if exc.ctx is not None else "rearrival"
        typer.echo(
            f"rearrival: error: {verb}: {exc.format_message()} (see `{verb} --help`)", err=True
        )
        sys.exit(2)
    except click.ClickException as exc:
        typer.echo(f"rearrival: error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("Aborted!", err=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
