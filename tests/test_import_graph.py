"""What a verb imports at start (issue 36 item 8: `search --out` and `advise` under 2 s from
process start). The CLI and `--help` load no verb's stack; an RBLN advice loads no pandas,
pyarrow, matplotlib, vLLM search, HTTP client or tqdm (it ranks from the core's arrays and
writes no table). Asserted on ``sys.modules`` in a fresh interpreter, never on time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Prefixes of modules the start-up path must not import: the table and picture stacks,
# the vLLM search, the plan generator, the HTTP stack and the progress bar's library.
HEAVY = (
    "pandas",
    "pyarrow",
    "matplotlib",
    "rearrival.search.vllm",
    "rearrival.model.simulator.vllm",
    "rearrival.model.plans.plangen",
    "rearrival.measure.client",
    "httpx",
    "aiohttp",
    "requests",
    "tqdm",
)
PROBE = """
import json, sys
from rearrival.cli import main
sys.argv = ["rearrival", *json.loads(sys.argv[1])]
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.__stderr__)
"""


def loaded(*args: str, cwd: Path = REPO) -> set[str]:
    """Every module in ``sys.modules`` after ``rearrival ARGS`` ran in a fresh process."""
    env = os.environ | {"PYTHONPATH": str(REPO / "src")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(list(args))],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def heavy(modules: set[str], prefixes: tuple[str, ...] = HEAVY) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in prefixes))


def test_help_loads_no_verbs_stack() -> None:
    modules = loaded("--help")
    assert heavy(modules) == []
    assert not {"numpy", "numba", "jsonschema"} & modules


def test_an_rbln_advice_loads_no_table_picture_vllm_or_http_stack() -> None:
    """The advice draws its inputs with the plan generator; nothing else listed."""
    modules = loaded("advise", "--config", str(REPO / "config" / "config.yaml"))
    assert "rearrival.search.advise" in modules  # the verb ran
    drawn = tuple(h for h in HEAVY if h != "rearrival.model.plans.plangen")
    assert heavy(modules, drawn) == []
