"""Data files whose numbers carry provenance (the measured profile, the emulator truth).

Each number is a mapping ``{value: ..., kind/unit: ..., source/reason: ...}`` so a reader
can tell a measured constant from a fitted or assumed one; the code reads only ``value``.
Both loaders share these two helpers so that their errors name the file, the dotted
field and the reference file to copy from in the same way.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from rearrival import yamltext
from rearrival.errors import RearrivalError


def field_value(
    tree: dict[str, Any],
    dotted: str,
    source: str,
    *,
    error: type[RearrivalError],
    reference: str,
    require_value: bool = False,
) -> Any:
    """The ``value`` at a dotted path (or the node itself when it is not a value mapping
    and ``require_value`` is off, e.g. a table of per-bucket values)."""
    node: Any = tree
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            raise error(f"{source}: missing field '{dotted}'; see {reference} for the layout")
        node = node[key]
    if isinstance(node, dict) and "value" in node:
        return node["value"]
    if require_value:
        raise error(
            f"{source}: field '{dotted}' needs 'value' with its unit and provenance; "
            f"see {reference}"
        )
    return node


def read_mapping(path: Path, *, error: type[RearrivalError], reference: str) -> dict[str, Any]:
    """A user's YAML data file as a mapping, or one clear error naming the file."""
    try:
        tree = yamltext.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise error(f"{path}: cannot read it ({exc}); start from a copy of {reference}") from exc
    if not isinstance(tree, dict):
        raise error(f"{path}: must be a YAML mapping; see {reference}")
    return tree


def shipped_mapping(name: str) -> dict[str, Any]:
    """A data file shipped in rearrival/data, parsed."""
    return yamltext.safe_load(resources.files("rearrival.data").joinpath(name).read_text())
