"""Which one study definition file the workflow's rules read, and reading it once.

Why: every rule calls a ``rearrival`` verb with ``--config FILE``, so the study the DAG is
built from and the study the jobs run must be the same single file. Snakemake's
``--configfile`` merges its file into the ``configfile:`` of the Snakefile
(config/config.yaml): the DAG would then be built from a mix of two studies while the
jobs read config/config.yaml alone. Snakemake's ``--replace-workflow-config`` discards
the Snakefile's config instead, which is the documented way to run another study
(``make test-study`` runs the small one so); a merge is refused in one line, and so is
``--config KEY=VALUE`` (it would change the DAG but not the file the jobs read).

The DAG is built from the file as every verb reads it (``load_study_config``: one
schema check, the models' defaults), never from Snakemake's own parse of it, so the
workflow and its jobs cannot disagree on a value or a default.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import Any

from rearrival.errors import RearrivalError


class ConfigFileError(RearrivalError):
    """A combination of config files the rules cannot read as one study definition."""


def study_config_file(
    loaded: Sequence[str | PathLike[str]],
    command_line: Sequence[str | PathLike[str]],
    replaced: bool,
) -> str:
    """The file passed to every rule: the Snakefile's ``configfile:`` unless one
    ``--configfile`` replaces it. ``loaded`` is ``workflow.configfiles`` (the command
    line's files, then those the Snakefile loaded), ``command_line`` the command line's."""
    directive = [f for f in loaded if f not in command_line]
    if not command_line:
        return str(directive[0])
    if len(command_line) == 1 and (replaced or not directive):
        return _relative(Path(command_line[0]))
    given = " ".join(map(str, command_line))
    merged_into = f" into {directive[0]}" if directive and not replaced else ""
    raise ConfigFileError(
        f"--configfile {given} would be merged{merged_into}, a mix of studies the rules "
        "cannot read as one file; run one study definition in place of config/config.yaml: "
        "`snakemake --configfile FILE --replace-workflow-config all` (`make test-study` "
        "does this for the small study)"
    )


def _relative(path: Path) -> str:
    """Snakemake makes ``--configfile`` absolute; inside the working directory the rules
    get it relative, as they get config/config.yaml, so a moved checkout reruns nothing."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def refuse_command_line_values(overrides: Mapping[str, Any], config_file: str) -> None:
    """``snakemake --config KEY=VALUE`` is refused: the jobs read ``config_file``."""
    if overrides:
        given = " ".join(f"{key}=..." for key in overrides)
        raise ConfigFileError(
            f"--config {given}: the jobs read {config_file}, not the command line; "
            f"edit {config_file} (or pass another file with --configfile FILE "
            "--replace-workflow-config)"
        )


@contextlib.contextmanager
def refusing_in_one_line() -> Iterator[None]:
    """While the DAG is built, a refusal of the study definition is its one line on
    stderr and exit code 2 (bad input), not Snakemake's traceback around it."""
    try:
        yield
    except RearrivalError as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(2) from None
