"""The package layout is the architecture (README "Library map"): data flows one way, so a
package imports only from its own layer or the layers below it, and no module imports
itself back through another."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "rearrival"
LAYERS = (
    "base",
    "model",
    "config",
    "measure",
    "judge",
    "prereg",
    "search",
    "report",
    "workflow",
    "commands",
)
SHIMS = {"rearrival.plans", "rearrival.sim"}  # stable re-exports of model modules


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts).removesuffix(".__init__")


def layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in LAYERS:
        return parts[1]
    if len(parts) > 1 and parts[1] in {"cli", "__main__"}:  # the entry points
        return "commands"
    return "base"


def imports(path: Path) -> set[str]:
    """Every rearrival module the file imports, wherever the import statement sits."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module in {"rearrival", "rearrival.commands"}:  # package imports
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            found.update(n for n in names if n.startswith("rearrival"))
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("rearrival"))
    return found


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports(p) for p in SRC.rglob("*.py")}


def test_the_layer_table_covers_every_package():
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").exists()}
    assert packages - {"data"} <= set(LAYERS)


def test_no_package_imports_a_higher_layer():
    upward = [
        f"{module} ({layer(module)}) imports {target} ({layer(target)})"
        for module, targets in graph().items()
        if module not in SHIMS
        for target in targets
        if LAYERS.index(layer(target)) > LAYERS.index(layer(module))
    ]
    assert upward == []


def test_no_import_cycles():
    edges = graph()
    modules = set(edges)

    def reaches(start: str) -> set[str]:
        seen: set[str] = set()
        stack = [start]
        while stack:
            for target in edges.get(stack.pop(), ()):
                if target in modules and target not in seen:
                    seen.add(target)
                    stack.append(target)
        return seen

    package_inits = {m for m in modules if (SRC.parent / m.replace(".", "/")).is_dir()}
    cyclic = sorted(m for m in modules - package_inits if m in reaches(m))
    assert cyclic == []
