"""What the README tells a new user to type exists and leaves the checkout clean (issue
29): options it passes belong to the verbs it names, its examples write only where git
ignores, and each part of the study definition is described in its section."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import typer

from rearrival.cli import app

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def _sections() -> dict[str, str]:
    parts = re.split(r"^## (.+)$", README, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def _command_lines() -> list[list[str]]:
    """Every `rearrival ...` line of the README's fenced code blocks, as words."""
    blocks = re.findall(r"```(?:sh|bash)\n(.*?)```", README, flags=re.DOTALL)
    joined = [re.sub(r"\\\n\s*", " ", block) for block in blocks]  # continued lines
    lines = [line.split("#", 1)[0].strip() for block in joined for line in block.splitlines()]
    return [shlex.split(line) for line in lines if line.startswith("rearrival ")]


def _options(words: list[str]) -> set[str]:
    """The options the verb a command line names accepts."""
    command = typer.main.get_command(app)
    for word in words[1:]:
        sub = getattr(command, "commands", {}).get(word)
        if sub is None:
            break
        command = sub
    return {opt for param in command.params for opt in param.opts}


def test_every_option_the_readme_passes_belongs_to_its_verb() -> None:
    lines = _command_lines()
    assert len(lines) > 10
    for words in lines:
        given = {w.split("=", 1)[0] for w in words if w.startswith("--")}
        assert given <= _options(words), (words, given - _options(words))


def test_the_small_study_names_the_verbs_that_take_its_config() -> None:
    """The README told the user to give 'the verbs below' --config after the small study,
    audit among them, which has no such option: each sentence that passes --config names
    its verbs, and each takes it."""
    text = " ".join(README.split())
    sentences = [s for s in re.split(r"(?<=[.;:])\s", text) if "`--config " in s]
    assert sentences
    for sentence in sentences:
        verbs = re.findall(r"`rearrival ([a-z-]+)", sentence)
        assert verbs, sentence
        for verb in verbs:
            assert "--config" in _options(["rearrival", verb]), (verb, sentence)


def test_the_readme_mentions_audit_violations_only() -> None:
    assert "--violations-only" in _options(["rearrival", "audit"])
    assert any(
        words[:2] == ["rearrival", "audit"] and "--violations-only" in words
        for words in _command_lines()
    )


def test_cost_constants_and_model_are_described_with_the_study_settings() -> None:
    """They sat inside the Kubernetes paragraph of "Running on a cluster"."""
    sections = _sections()
    own = sections["Using it on your own study"]
    for bullet in ("- **Cost constants**:", "- **Model**:", "- **Backend**:"):
        assert bullet in own, bullet
    assert "**Cost constants**" not in sections["Running on a cluster"]


def test_readme_examples_write_only_where_git_ignores() -> None:
    """The trace example wrote an untracked plans/ into the repository."""
    written = [words[words.index("--out") + 1] for words in _command_lines() if "--out" in words]
    assert written
    inside = [p for p in written if not p.startswith(("../", "/")) and p != p.upper()]
    assert inside
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", *inside],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    assert sorted(ignored) == sorted(inside)
