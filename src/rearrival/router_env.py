"""Where vllm-router is: the one resolver the fleet backend uses (README "A study on a real
fleet", docs/DESIGN.md §15).

vllm-router (vLLM's Rust load balancer, a manylinux wheel on PyPI) gets a pinned venv of
its own, ``.venv-router`` (built by ``make router-env`` from ``envs/vllm-router.txt``): its
web stack resolves newer than the vLLM lock's and it needs orjson, which the vLLM lock does
not carry, so installing it into ``.venv-vllm`` would move vLLM's pins. The project only
runs its ``vllm-router`` executable in a subprocess. ``REARRIVAL_VLLM_ROUTER`` names another
executable; by default it is ``<repository>/.venv-router/bin/vllm-router``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from rearrival.errors import RearrivalError
from rearrival.vllm_env import repository_root

ENV_ROUTER = "REARRIVAL_VLLM_ROUTER"
VENV_DIR = ".venv-router"
LOCK_FILE = "envs/vllm-router.txt"
BUILD_HINT = (
    f"build it with `make router-env` (vllm-router pinned in {LOCK_FILE}, README 'A study on "
    f"a real fleet') or set {ENV_ROUTER} to a vllm-router executable"
)


class RouterEnvironmentError(RearrivalError):
    """No usable vllm-router; the message says where it looked and how to build one."""


def router_executable() -> Path:
    """The router: ``$REARRIVAL_VLLM_ROUTER``, else the repository's .venv-router."""
    named = os.environ.get(ENV_ROUTER)
    if named:
        return Path(named)
    return repository_root() / VENV_DIR / "bin" / "vllm-router"


def require_router() -> Path:
    """The router executable, or one line saying where it was looked for and the fix."""
    router = router_executable()
    if not (router.is_file() and os.access(router, os.X_OK)):
        source = f"${ENV_ROUTER}" if os.environ.get(ENV_ROUTER) else "the default"
        raise RouterEnvironmentError(f"no vllm-router at {router} ({source}); {BUILD_HINT}")
    return router


def router_version(router: Path) -> str:
    """The installed vllm-router release, from the package metadata of the router's own
    interpreter (the executable's venv), so the manifest names what actually routed."""
    python = router.with_name("python")
    code = "import importlib.metadata as m; print(m.version('vllm-router'))"
    try:
        done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RouterEnvironmentError(f"{python}: cannot run it ({exc}); {BUILD_HINT}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RouterEnvironmentError(f"{python}: {last}; {BUILD_HINT}")
    return done.stdout.strip()
