"""CLI verbs of the measure area (registered by rearrival.cli)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Add this area's verbs to the top-level app."""
    app.command("channels")(channels)


# --- channels (rearrival.channels; SPEC sections 7-8) ---------------------------------------


def channels(
    run_dirs: Annotated[list[Path], typer.Argument(
        metavar="RUN_DIR", help="Run directories written by `rearrival run`.")],
    as_json: Annotated[bool, typer.Option(
        "--json", help="One JSON object per run, one per line.")] = False,
    profile: Annotated[Path | None, typer.Option(
        "--profile", help="Profile YAML; default: the measured RBLN-CA25 profile.")] = None,
) -> None:
    """Channel A (step-log device time), channel B (client in-flight union) and r = B - A.

    Paper Section II-D: A prices every decode step (f(b)+alpha+beta*n) and every request's
    computed prefill tokens; B is the union of the send-to-complete intervals. Only runs
    whose manifest status is 'complete' are read.
    """
    import json

    from rearrival.channels import channels as run_channels
    from rearrival.profile import load_profile
    from rearrival.records import read_run

    costs = load_profile(profile)
    for run_dir in run_dirs:
        values = run_channels(read_run(run_dir), costs)
        if as_json:
            typer.echo(json.dumps(values))
        else:
            typer.echo(f"{run_dir}: A={values['a_s']:.6f} s (decode {values['a_decode_s']:.6f}"
                       f" + prefill {values['a_prefill_s']:.6f}) B={values['b_s']:.6f} s "
                       f"r={values['r_s']:.6f} s")
