"""The JSON schema of the study definition, drawn from the section models, and the check
of a file against it (docs/DESIGN.md §10, "One source").

The models' keys (rearrival.config.keys) give every section; :func:`document_schema`
places the top-level keys in the order the document lists them and says which are
required; :func:`schema_yaml` is the text config/schema.yaml holds (``rearrival study
schema`` prints it; never edited by hand); :func:`check_schema` refuses a file in one line
naming the first bad key.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from rearrival.config.errors import StudyConfigError
from rearrival.config.keys import (
    SCHEMA,
    is_required,
    keys_of,
    object_of,
    object_schema,
    properties_of,
    property_schema,
)
from rearrival.model.configuration import RblnConfiguration, VllmConfiguration

REGENERATE = "rearrival study schema > config/schema.yaml"

# What the schema says of a configuration's knobs (the configuration types' fields, one
# entry for both substrates: backend vllm's configurations take the vLLM ones).
RBLN_KNOBS = {
    "buckets": {
        "description": "Compiled decode buckets; must include batch_size as the largest (vLLM: "
        "CUDA-graph capture sizes, [] where none are captured).",
        "uniqueItems": True,
        "items": {"minimum": 1},
    },
    "batch_size": {
        "description": "Maximum batch (max-num-seqs); also the KV slot count unless slots is set.",
        "minimum": 1,
    },
    "slots": {
        "description": "KV slots, when they differ from batch_size (RBLN only).",
        "minimum": 1,
    },
}
VLLM_KNOBS = {
    "num_blocks": {
        "description": "vLLM only: the KV pool in blocks, vLLM's null block included "
        "(--num-gpu-blocks-override).",
        "minimum": 2,
    },
    "block_size": {
        "description": "vLLM only: tokens per KV block (--block-size; the CPU build needs a "
        "multiple of 32).",
        "minimum": 1,
    },
    "max_num_batched_tokens": {
        "description": "vLLM only: the per-step token budget (--max-num-batched-tokens), at "
        "least batch_size.",
        "minimum": 1,
    },
}


def configuration_schema() -> dict[str, Any]:
    """The schema of one entry under ``configurations``: the knobs of either substrate's
    configuration type, buckets and batch_size required."""
    properties = properties_of(RblnConfiguration, RBLN_KNOBS) | properties_of(
        VllmConfiguration, VLLM_KNOBS
    )
    return object_of(properties, required=["buckets", "batch_size"])


SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_DESCRIPTION = (
    "Types, ranges and key names of the study definition, checked by rearrival.config.study "
    "when the workflow or a verb loads it (docs/DESIGN.md §10). Defaults are not stated here: "
    "a key left out takes the default of its section's model under rearrival.config (the one "
    "source; `rearrival study config` prints every value in effect). Cross-field rules the "
    "schema cannot express (a bucket set must contain its batch_size, studies must name "
    "defined configurations) are checked there too, with the same key names."
)


def document_schema(
    placements: Iterable[tuple[str, type, str]], models: Iterable[type]
) -> dict[str, Any]:
    """The schema of the whole document: each top-level key (``placements``: the key, the
    model whose field it is, the field) in that order, every key field of ``models`` placed
    (a new field that is not is refused here, not left out of the schema). A section whose
    model is a frozen dataclass of keys is that model's object schema under its field's
    description."""
    placements = tuple(placements)
    placed = {(model, name) for _, model, name in placements}
    for model in models:
        missing = [f.name for f in keys_of(model) if (model, f.name) not in placed]
        if missing:
            raise KeyError(f"{model.__name__}.{missing[0]} is a key no placement names")
    properties = {}
    required = []
    for key_name, model, name in placements:
        f = next(f for f in keys_of(model) if f.name == name)
        properties[key_name] = document_key(model, f)
        if is_required(f):
            required.append(key_name)
    return {
        "$schema": SCHEMA_DIALECT,
        "title": "rearrival study definition",
        "description": SCHEMA_DESCRIPTION,
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
        "required": required,
    }


def document_key(model: type, f: Any) -> dict[str, Any]:
    """One top-level key: a section's object schema, else the field's own."""
    hint = typing.get_type_hints(model)[f.name]
    args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    section = args[0] if len(args) == 1 else None
    stated = dict(f.metadata[SCHEMA])
    if dataclasses.is_dataclass(section) and keys_of(section) and "type" not in stated:
        return object_schema(section, stated.pop("description"))
    return property_schema(hint, stated)


def schema_yaml(schema: dict[str, Any]) -> str:
    """The schema as config/schema.yaml holds it: YAML (lists of scalars on one line)
    under a line saying where it comes from and how to regenerate it."""
    body = yaml.dump(schema, Dumper=_SchemaDumper, sort_keys=False, allow_unicode=True, width=96)
    return (
        "# Generated from the section models under rearrival.config (docs/DESIGN.md §10); "
        f"do not edit:\n# change the models and run `{REGENERATE}`.\n{body}"
    )


class _SchemaDumper(yaml.SafeDumper):
    """YAML with short lists (enums, required keys) in flow style, the rest in blocks."""

    def represent_list(self, data: list[Any]) -> yaml.Node:
        flat = all(not isinstance(item, dict | list) for item in data)
        return self.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flat)


_SchemaDumper.add_representer(list, _SchemaDumper.represent_list)


def config_schema_path() -> Path:
    """The generated schema shipped beside the study definition (config/schema.yaml, the
    output of ``rearrival study schema``), which a refusal points the reader to."""
    return Path(__file__).resolve().parents[3] / "config" / "schema.yaml"


def schema_validator(schema: dict[str, Any]) -> Any:
    """A jsonschema validator of ``schema``'s dialect."""
    return jsonschema.validators.validator_for(schema)(schema)


def check_schema(validator: Any, raw: Any, source: str, see: Path) -> None:
    """Refuse ``raw`` in one line naming the first bad key (jsonschema's best match; an
    unknown key is named with the nearest valid one) and the schema file to read."""
    error = jsonschema.exceptions.best_match(validator.iter_errors(raw))
    if error is not None:
        raise StudyConfigError(f"{source}: {schema_problem(error)} (see {see})")


def key_path(parts: Iterable[str | int]) -> str:
    """``studies.grid.n[0]`` for the parts of a key path (empty at the top level)."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def schema_problem(error: jsonschema.exceptions.ValidationError) -> str:
    """One schema error as the key it is about and what is wrong with it."""
    where = key_path(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(known))[0]
        name = f"{where}.{unknown}" if where else unknown
        close = difflib.get_close_matches(unknown, known, n=1)
        fix = f"did you mean {close[0]}?" if close else f"use {' or '.join(known)}"
        if not close and len(known) > 2:
            fix = f"use one of {', '.join(known)}"
        return f"{name} is not a key of {where or 'the study definition'}; {fix}"
    if error.validator == "required" and not where:
        return f"{error.message} of the study definition"
    return f"{where or 'the study definition'}: {error.message}"
