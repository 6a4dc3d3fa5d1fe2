"""A section model's fields as keys of the study definition, and the JSON schema of a model
drawn from them (docs/DESIGN.md §10, "One source").

A field declared with :func:`key` carries its default and what the schema says of it (its
description and bounds); :func:`object_schema` turns a frozen dataclass into the schema of
its section: each field's type gives the JSON type (``int`` integer, ``tuple[int, ...]``
an array of integers, ``tuple[float, float]`` an array of two numbers, ``X | None`` an
optional X), the field's key adds the rest, and a field without a default is required.
So the models are the one source of the keys, their types, ranges and defaults, and
config/schema.yaml is generated from them (``rearrival study schema``), never edited.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any

# The metadata entry of a field that is a key: its schema less the type-derived part.
SCHEMA = "rearrival.schema"
# The metadata entry saying whether a key is required (None: when it has no default).
REQUIRED = "rearrival.required"

_JSON_TYPES: dict[Any, str] = {bool: "boolean", int: "integer", float: "number", str: "string"}


def key(
    default: Any = dataclasses.MISSING,
    *,
    description: str,
    mandatory: bool | None = None,
    **schema: Any,
) -> Any:
    """A dataclass field that is a key of the study definition: ``default`` (MISSING: none),
    its ``description`` and further JSON-schema words (``minimum=1``, ``enum=[...]``,
    ``items={"minimum": 1}`` added to the item type, ``type=...`` in place of the
    type-derived one). ``mandatory`` overrides "required when there is no default" (the
    schema word ``required`` is the required keys of an object-valued key)."""
    metadata = {SCHEMA: {"description": description, **schema}, REQUIRED: mandatory}
    return dataclasses.field(default=default, metadata=metadata)


def type_schema(hint: Any) -> dict[str, Any]:
    """The JSON schema of a field's type: scalars, tuples of them, an optional one."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        present = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(present) != 1:
            raise TypeError(f"{hint}: a key's type is one type or that type | None")
        return type_schema(present[0])
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": type_schema(args[0])}
        if len(set(args)) != 1:
            raise TypeError(f"{hint}: a fixed-length key holds one type")
        n = len(args)
        return {"type": "array", "minItems": n, "maxItems": n, "items": type_schema(args[0])}
    if hint in _JSON_TYPES:
        return {"type": _JSON_TYPES[hint]}
    return {}  # a nested model: its key states the schema (``type=``, ``properties=``)


def property_schema(hint: Any, stated: Mapping[str, Any]) -> dict[str, Any]:
    """One key: its description, the type-derived schema, the stated words (in that order,
    ``items`` last, a stated ``items`` added to the derived one)."""
    derived = type_schema(hint)
    stated = dict(stated)
    out: dict[str, Any] = {"description": stated.pop("description")}
    if "type" in stated or "type" in derived:
        out["type"] = stated.pop("type", derived.get("type"))
    out |= {k: v for k, v in derived.items() if k not in ("type", "items")}
    items = stated.pop("items", None)
    out |= stated
    if "items" in derived or items is not None:
        base = {} if items is not None and "type" in items else derived.get("items", {})
        out["items"] = base | (items or {})
    return out


def properties_of(model: type, stated: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Keys of a model outside the config layer (a generator spec, a trace source) whose
    words the config layer states: each key's type is the model's field's."""
    hints = typing.get_type_hints(model)
    unknown = sorted(set(stated) - set(hints))
    if unknown:
        raise KeyError(f"{model.__name__} has no field {unknown[0]}")
    return {name: property_schema(hints[name], words) for name, words in stated.items()}


def keys_of(model: type) -> list[dataclasses.Field[Any]]:
    """The fields of ``model`` that are keys (declared with :func:`key`)."""
    return [f for f in dataclasses.fields(model) if SCHEMA in f.metadata]


def is_required(f: dataclasses.Field[Any]) -> bool:
    stated = f.metadata.get(REQUIRED)
    if stated is not None:
        return bool(stated)
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def object_schema(
    model: type,
    description: str | None = None,
    leave_out: tuple[str, ...] = (),
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    required: list[str] | None = None,
) -> dict[str, Any]:
    """The schema of a section: an object whose keys are ``model``'s keys (less
    ``leave_out``), unknown keys refused. ``overrides`` restates words of single keys
    (a study's own search block describes some keys its own way); ``required`` replaces
    the required keys derived from the defaults."""
    hints = typing.get_type_hints(model)
    properties = {}
    for f in keys_of(model):
        if f.name in leave_out:
            continue
        stated = dict(f.metadata[SCHEMA]) | dict((overrides or {}).get(f.name, {}))
        properties[f.name] = property_schema(hints[f.name], stated)
    if required is None:
        required = [f.name for f in keys_of(model) if f.name in properties and is_required(f)]
    return object_of(properties, description, required)


def object_of(
    properties: dict[str, Any], description: str | None = None, required: list[str] | None = None
) -> dict[str, Any]:
    """An object schema with exactly ``properties`` (unknown keys refused)."""
    out: dict[str, Any] = {} if description is None else {"description": description}
    out |= {"type": "object", "additionalProperties": False}
    if required:
        out["required"] = list(required)
    out["properties"] = properties
    return out


def described(model: type, name: str) -> dict[str, Any]:
    """What ``model``'s key ``name`` states (its description and words)."""
    for f in keys_of(model):
        if f.name == name:
            return dict(f.metadata[SCHEMA])
    raise KeyError(f"{model.__name__}.{name} is not a key")
