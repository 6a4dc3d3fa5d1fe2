"""Every third-party module the library imports is declared in pyproject.toml (issue 33): a
fresh venv built from the pins must hold what the code needs, never what happened to come
along as another package's dependency."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# import name -> distribution name, where they differ
DISTRIBUTIONS = {
    "git": "gitpython",
    "yaml": "pyyaml",
    "prometheus_client": "prometheus-client",
    "optimum": "optimum-rbln",
}
# Imported only by a script that the vLLM environment's interpreter runs
# (src/rearrival/model/simulator/vllm/oracle_driver.py), never by the project's venv.
OTHER_INTERPRETER = {"vllm"}


def imported_modules() -> set[str]:
    found = set()
    for path in (ROOT / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m != "rearrival"}


def declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        specs += extra
    return {re.split(r"[=<>!~\[; ]", spec, maxsplit=1)[0].lower() for spec in specs}


def test_every_third_party_import_is_declared():
    names = declared()
    missing = sorted(
        module
        for module in imported_modules() - OTHER_INTERPRETER
        if DISTRIBUTIONS.get(module, module).replace("_", "-").lower() not in names
    )
    assert missing == []


def test_every_declared_dependency_is_pinned():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        specs += extra
    assert [spec for spec in specs if "==" not in spec] == []
