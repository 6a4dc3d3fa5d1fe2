"""`rearrival --help` is the first thing a new user reads (issue 29): every verb's summary
is whole, and the pipeline's own stages are listed apart from the user's verbs."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

from rearrival.cli import app

# the verbs the Snakemake rules call, which a user rarely types
PIPELINE_VERBS = {"study", "run", "channels", "decide", "prereg", "calibrate-compile"}


def _sections(text: str) -> dict[str, list[str]]:
    """Help sections (a line ending in ':' at column 0) -> the verb names listed in them."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line and not line[0].isspace() and line.endswith(":"):
            current = line[:-1]
            sections[current] = []
        elif current is not None and re.match(r"^  \S", line):
            sections[current].append(line.split()[0])
    return sections


@pytest.mark.parametrize("columns", [80, 100, 160])
def test_every_summary_is_whole_and_internal_verbs_are_apart(monkeypatch, columns) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    shown = CliRunner().invoke(app, ["--help"], terminal_width=columns)
    assert shown.exit_code == 0
    usage, _, listing = shown.output.partition("\n")
    assert usage.endswith("COMMAND [ARGS]...") and "..." not in listing  # no summary is cut
    assert all(len(line) <= columns for line in shown.output.splitlines())
    sections = {k: v for k, v in _sections(shown.output).items() if k not in ("Usage", "Options")}
    group = typer.main.get_command(app)
    listed = [verb for verbs in sections.values() for verb in verbs]
    assert sorted(listed) == sorted(group.commands)  # every verb once
    pipeline = [name for name, verbs in sections.items() if set(verbs) & PIPELINE_VERBS]
    assert len(pipeline) == 1 and set(sections[pipeline[0]]) == PIPELINE_VERBS
    # the user's verbs come first
    assert list(sections)[-1] == pipeline[0] and len(sections) == 2
    flat = re.sub(r"(\w)- (\w)", r"\1-\2", " ".join(shown.output.split()))  # wrapped at a hyphen
    for name, command in group.commands.items():
        summary = command.get_short_help_str(limit=10_000)
        assert " ".join(f"{name} {summary}".split()) in flat, name


def _groups(command, path=()):
    """Every group of the command tree, with the words that reach it."""
    if hasattr(command, "commands"):
        yield path, command
        for name, sub in command.commands.items():
            yield from _groups(sub, (*path, name))


def test_no_group_cuts_a_summary(monkeypatch) -> None:
    """The same in `rearrival study --help`, `plans --help` and every other group."""
    monkeypatch.setenv("COLUMNS", "80")
    groups = list(_groups(typer.main.get_command(app)))
    assert len(groups) >= 7
    for path, group in groups:
        shown = CliRunner().invoke(app, [*path, "--help"], terminal_width=80)
        assert shown.exit_code == 0, path
        listing = shown.output[shown.output.index("\nCommands:\n") :]
        assert "..." not in listing, path
        flat = re.sub(r"(\w)- (\w)", r"\1-\2", " ".join(listing.split()))
        for name, command in group.commands.items():
            assert f"{name} {command.get_short_help_str(limit=10_000)}" in flat, (path, name)
