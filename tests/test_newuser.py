"""A new user's pass (issue 23): result modes, the small study, errors with a way forward."""

from __future__ import annotations

import io
import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from conftest import config_with_search, small_config, snakemake, workflow_repo
from typer.testing import CliRunner

from rearrival.atomic import atomic_directory, atomic_write_bytes, atomic_write_json
from rearrival.cli import app
from rearrival.config.errors import StudyConfigError
from rearrival.config.study import load_study_config, tool_table_for
from rearrival.progress import progress
from rearrival.report.results import Results
from rearrival.report.scorecard import Scorecard, ScoreRow, scorecard_markdown, summary_lines
from rearrival.report.table_model import Column, Part, Table, table_markdown
from rearrival.vocabulary import INJECTION_BACKEND
from rearrival.workflow.configfile import ConfigFileError, study_config_file


@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077])
def test_atomic_writes_get_the_mode_the_umask_gives(tmp_path: Path, mask: int) -> None:
    """mkstemp makes 0600 and mkdtemp 0700; what is renamed into place must be readable
    as an ordinary write would be (reports/ was 0600 under umask 022)."""
    with umask(mask):
        atomic_write_bytes(tmp_path / "a.bin", b"x")
        atomic_write_json(tmp_path / "sub" / "b.json", {"k": 1})
        with atomic_directory(tmp_path / "dir") as staging:
            (staging / "c.txt").write_text("c")
    assert mode(tmp_path / "a.bin") == 0o666 & ~mask
    assert mode(tmp_path / "sub" / "b.json") == 0o666 & ~mask
    assert mode(tmp_path / "dir") == 0o777 & ~mask
    assert mode(tmp_path / "dir" / "c.txt") == 0o666 & ~mask


# --- errors with a way forward ----------------------------------------------------------

REPO = Path(__file__).resolve().parents[1]
CONFIG_FILE = REPO / "config" / "config.yaml"
SUMMARY = {"tool_by_name": {"Read": {"n": 5, "p50": 10, "p90": 50, "p99": 90}}}


def test_missing_study_definition_names_where_it_looked_and_the_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StudyConfigError) as caught:
        load_study_config("config/config.yaml")
    message = str(caught.value)
    assert str(tmp_path / "config" / "config.yaml") in message
    assert "--config" in message and "\n" not in message


def _config_with_tool_table(where: Path, tool_table: str) -> Path:
    raw = yaml.safe_load(CONFIG_FILE.read_text())
    raw["tool_table"] = tool_table
    where.mkdir(parents=True, exist_ok=True)
    path = where / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_relative_tool_table_resolves_against_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As snakemake's paths do: `tools build --out summary.json` in the directory the
    workflow runs in, then `tool_table: summary.json`, whatever directory the config is in."""
    config = _config_with_tool_table(tmp_path / "config", "summary.json")
    (tmp_path / "config" / "summary.json").write_text("not the one")
    (tmp_path / "summary.json").write_text(json.dumps(SUMMARY))
    monkeypatch.chdir(tmp_path)
    assert [row.tool for row in tool_table_for(load_study_config(config)).rows] == ["Read"]


def test_missing_tool_table_names_the_config_and_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _config_with_tool_table(tmp_path / "config", "traces/summary.json")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StudyConfigError) as caught:
        tool_table_for(load_study_config(config))
    message = str(caught.value)
    assert message.startswith(f"{config}: tool_table 'traces/summary.json'")
    assert str(tmp_path / "traces" / "summary.json") in message
    assert "current directory" in message and "rearrival tools build" in message


# --- no suggestion that fails on the backend in use -------------------------------------


@pytest.mark.parametrize("backend", ["emulated", "emulated-http", "rbln"])
def test_absent_injection_note_suggests_only_what_the_backend_can_run(
    tmp_path: Path, backend: str
) -> None:
    """`all` leaves the injection out off the emulated backend, and `snakemake
    results/injection/gaps.parquet` fails there: the note must not suggest it."""
    cfg = replace(load_study_config(CONFIG_FILE), backend=backend)
    res = Results(cfg, tmp_path)
    assert res.gaps() is None
    (note,) = res.missing
    if backend == INJECTION_BACKEND:
        assert "snakemake results/injection/gaps.parquet" in note
    else:
        assert "snakemake" not in note
        assert f"only on backend {INJECTION_BACKEND}" in note and backend in note


# --- the small study, replacing the config ----------------------------------------------


def test_one_configfile_replaces_the_snakefile_config_only_when_asked() -> None:
    default = ["config/config.yaml"]
    assert study_config_file(default, [], replaced=False) == "config/config.yaml"
    small = [Path(".test/config/config.yaml")]
    both = [*small, *default]  # workflow.configfiles: the command line's first
    assert study_config_file(both, small, replaced=True) == ".test/config/config.yaml"
    assert study_config_file(small, small, replaced=False) == ".test/config/config.yaml"
    with pytest.raises(ConfigFileError, match=r"merged into config/config.yaml.*--replace-"):
        study_config_file(both, small, replaced=False)
    two = [*small, Path("other.yaml")]
    with pytest.raises(ConfigFileError, match="make test-study"):
        study_config_file([*two, *default], two, replaced=True)


def _workflow_commands(work: Path, home: Path, *args: str) -> tuple[int, str]:
    done = snakemake(work, home, "-n", "-p", "all", *args)  # --configfile takes nargs
    return done.returncode, done.stdout + done.stderr


def test_small_study_runs_alone_in_place_of_the_full_config(tmp_path: Path) -> None:
    """`make test-study`'s flags: every job is built from and reads the small study alone
    (a --configfile merge built the DAG from both while the jobs read the full one)."""
    home = tmp_path / "home"
    home.mkdir()
    full = yaml.safe_load(CONFIG_FILE.read_text())
    work = workflow_repo(tmp_path, full)
    small_file = work / ".test" / "config" / "config.yaml"
    small_file.parent.mkdir(parents=True)
    small_file.write_text(yaml.safe_dump(small_config(), sort_keys=False))
    flags = ("--configfile", ".test/config/config.yaml")
    code, output = _workflow_commands(work, home, *flags, "--replace-workflow-config")
    assert code == 0, output[-3000:]
    configs = set(re.findall(r"--config (\S+)", output))
    assert configs == {".test/config/config.yaml"}
    planned = set(re.findall(r"rearrival study plans --config \S+ --study (\w+)", output))
    assert planned == set(small_config()["studies"]) != set(full["studies"])
    code, output = _workflow_commands(work, home, *flags)
    assert code != 0 and "--replace-workflow-config" in output


# --- progress and readable output -------------------------------------------------------


class Terminal(io.StringIO):
    """A stream that says it is a terminal (tqdm draws only when told a width)."""

    def isatty(self) -> bool:
        return True


def test_progress_draws_on_a_terminal_and_is_silent_in_logs() -> None:
    log, terminal = io.StringIO(), Terminal()
    assert list(progress(range(3), 3, "scoring", "plan", stream=log)) == [0, 1, 2]
    assert log.getvalue() == ""
    assert list(progress(range(3), 3, "scoring", "plan", stream=terminal)) == [0, 1, 2]
    assert "scoring" in terminal.getvalue() and "0/3" in terminal.getvalue()


def test_search_result_names_the_filter_counts_within_100_columns(tmp_path: Path) -> None:
    """Batch size 56 does not fit the devices (at most 49 slots): its 55 candidates are
    counted as removed by the memory filter, the batch-4 ones are searched."""
    config = config_with_search(
        tmp_path, {"n": [3], "seeds": 1, "blocks": 1, "top": 2, "restricted_n": []}
    )
    out = tmp_path / "out"
    args = ["--batch-sizes", "4,56", "--max-buckets", "3", "--workers", "1"]
    result = CliRunner().invoke(app, ["search", *args, "--out", str(out), "--config", str(config)])
    assert result.exit_code == 0, result.output
    first, second = result.stdout.splitlines()
    assert first == (
        f"{out}: searched 3 of 58 candidates (0 over the compile budget, 55 over device memory)"
    )
    assert second.startswith("selected 4:")
    assert len(second) <= 100


def test_the_install_says_what_it_installs_before_it_starts() -> None:
    """`make all` on a fresh clone installs for minutes; its first lines say what."""
    done = subprocess.run(
        ["make", "-n", "-B", ".venv/.installed"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    lines = done.stdout.splitlines()
    pip = next(i for i, line in enumerate(lines) if "pip install" in line)
    warm = next(i for i, line in enumerate(lines) if "warm_up" in line)
    assert any("installing rearrival" in line for line in lines[:pip])
    assert any("compiling the simulator core" in line for line in lines[pip:warm])


def _wide_table() -> Table:
    """Table III's shape: three columns identify a row, twelve long-headed numbers."""
    columns = (
        Column("n", "N", "int"),
        Column("variant", "variant"),
        Column("configuration", "configuration"),
        *(Column(f"v{i}", f"re-arrival computed tokens {i}", "int") for i in range(12)),
    )
    rows = tuple(
        {"n": n, "variant": "wait", "configuration": c, **{f"v{i}": 1000 * i for i in range(12)}}
        for n in (5, 6)
        for c in ("baseline", "slots8")
    )
    return Table("III", "Slot intervention", "caption " * 40, (Part("slots", columns, rows),))


def test_wide_markdown_tables_split_into_column_blocks_within_100_columns() -> None:
    text = table_markdown(_wide_table())
    lines = text.splitlines()
    assert max(map(len, lines)) <= 100
    headers = [line for line in lines if line.startswith("| N ")]
    assert len(headers) > 1  # split into blocks
    for header in headers:  # every block repeats the columns that identify a row
        assert [c.strip() for c in header.split("|")[1:4]] == ["N", "variant", "configuration"]
    for i in range(12):  # every column is in exactly one block
        assert sum(f"re-arrival computed tokens {i} " in h for h in headers) == 1
    assert text.count("| 6   | wait    | slots8 ") == len(headers)


def test_a_narrow_markdown_table_stays_one_table() -> None:
    wide = _wide_table()
    narrow = replace(wide, parts=(replace(wide.parts[0], columns=wide.parts[0].columns[:5]),))
    lines = table_markdown(narrow).splitlines()
    assert sum(line.startswith("| N ") for line in lines) == 1


def test_scorecard_reads_at_100_columns() -> None:
    long = "a reason that goes on " * 12
    rows = tuple(
        ScoreRow(
            f"finding_{i}", long, "III-D", "0.232; 0.167", "", "not comparable", long, long, False
        )
        for i in range(3)
    )
    card = Scorecard(rows, ("emulated",))
    assert max(map(len, scorecard_markdown(card).splitlines())) <= 100
    entries = summary_lines(card)
    assert len(entries) == 3
    for i, entry in enumerate(entries):
        first, *rest = entry.splitlines()
        assert first.startswith(f"not comparable  finding_{i}: paper 0.232; 0.167")
        assert rest and all(line.startswith(" " * 16) for line in rest)
        assert max(map(len, entry.splitlines())) <= 100


# --- help that stays whole and points inside the repository -----------------------------


def test_search_help_keeps_every_default_whole_at_80_columns() -> None:
    result = CliRunner().invoke(app, ["search", "--help"], terminal_width=80)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # wrapped lines joined
    for whole in (
        "[default: config/config.yaml]",
        "--memory-filter / --no-memory-filter",
        "(default: search.batch_sizes)",
        "(default: search.max_buckets)",
        "(default: search.memory_filter)",
    ):
        assert whole in text
    assert "…" not in result.output


def test_decide_help_takes_the_replicate_count_from_the_config() -> None:
    result = CliRunner().invoke(app, ["decide", "--help"], terminal_width=100)
    text = " ".join(result.output.split())
    assert "three replicates" not in text and "config's replicates:" in text


def test_patch_check_says_vllm_rbln_is_absent_with_exit_1(monkeypatch) -> None:
    """No vllm-rbln in this Python: no state is promised; 'absent', where it looked, the
    flag that fixes it, and exit code 1 (2 stays for bad input)."""
    import rearrival.measure.patch as patch

    monkeypatch.setattr(patch.importlib.util, "find_spec", lambda name: None)
    result = CliRunner().invoke(app, ["rbln", "patch", "check"])
    assert result.exit_code == 1
    assert result.output.startswith("absent: vllm-rbln is not installed")
    assert sys.executable in result.output and "--site-packages" in result.output


def test_tools_show_takes_what_tools_build_takes_and_writes(tmp_path: Path) -> None:
    """Both verbs take their input as an argument; show reads the trace build reads or
    the summary.json build writes, and prints the same table from either."""
    from test_cli_plans import TRACE as trace

    summary = tmp_path / "summary.json"
    runner = CliRunner()
    assert runner.invoke(app, ["tools", "build", str(trace), "--out", str(summary)]).exit_code == 0
    from_trace = runner.invoke(app, ["tools", "show", str(trace), "--draws", "1000"])
    from_summary = runner.invoke(app, ["tools", "show", str(summary), "--draws", "1000"])
    assert from_trace.exit_code == from_summary.exit_code == 0, from_trace.output
    rows = [out.output.splitlines()[1:] for out in (from_trace, from_summary)]
    assert rows[0] == rows[1] and len(rows[0]) > 2


# --- citations inside the repository ----------------------------------------------------

SRC = REPO / "src" / "rearrival"
DESIGN = REPO / "docs" / "DESIGN.md"


def _source_texts() -> list[tuple[Path, str]]:
    return [
        (path, path.read_text())
        for path in sorted(SRC.rglob("*"))
        if path.suffix in (".py", ".yaml", ".json", ".j2")
    ]


def _tracked_texts() -> list[tuple[Path, str]]:
    """Every text file git tracks in the repository (binary files left out)."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True
    ).stdout.decode()
    texts = []
    for name in filter(None, listed.split("\0")):
        path = REPO / name
        try:
            texts.append((path, path.read_text()))
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
    return texts


# Citations of documents users never see: the specification's section numbers and the
# style guide (spelled in two pieces so this file does not match itself).
OUTSIDE = re.compile(r"\bSP" r"EC\b|\bSTY" r"LE:")


def test_no_tracked_file_cites_a_document_outside_the_repository() -> None:
    cited = [
        f"{path.relative_to(REPO)}:{text[: m.start()].count(chr(10)) + 1}"
        for path, text in _tracked_texts()
        for m in OUTSIDE.finditer(text)
    ]
    assert cited == []


def test_every_design_citation_names_a_section_that_exists() -> None:
    """A section number or a quoted section title after docs/DESIGN.md, in any tracked
    file, must land on a heading."""
    headings = re.findall(r"^## (\d+)\. (.+)$", DESIGN.read_text(), flags=re.MULTILINE)
    numbers = {int(n) for n, _ in headings}
    titles = {title for _, title in headings}
    for path, text in _tracked_texts():
        for first, last in re.findall(r"DESIGN\.md §(\d+)(?:-(\d+))?", text):
            assert {int(first), int(last or first)} <= numbers, f"{path}: §{first}"
        for title in re.findall(r'DESIGN\.md "([^"]+)"', text):
            assert title in titles, f"{path}: {title}"
