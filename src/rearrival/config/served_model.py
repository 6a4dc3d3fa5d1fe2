"""The model a vLLM server serves (docs/DESIGN.md §15): a directory holding a Hugging Face
``config.json``, read once for what the run needs of it.

The repository ships ``tiny-qwen3`` (``rearrival/data/models/tiny-qwen3``), a
Qwen3-architecture config that vLLM serves with random weights (``--load-format dummy
--skip-tokenizer-init``), so a real engine runs on any machine; a real model directory
(config and weights) is served the same way, with its weights loaded. The client draws
prompt ids below the model's ``vocab_size`` (an id at or above it crashes the engine),
and the KV pool's bytes follow from the architecture.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from rearrival.config.calibration import CalibrationConfigError, ModelSpec, model_from_config_json
from rearrival.errors import RearrivalError

CONFIG_FILE = "config.json"
# Weight files whose presence means the directory is a real model, served with its weights.
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt")


class ServedModelError(RearrivalError):
    """A model directory vLLM could not serve; names the file, the field and the fix."""


def shipped_model() -> Path:
    """The tiny Qwen3-architecture config shipped with the package (random weights)."""
    return Path(str(resources.files("rearrival") / "data" / "models" / "tiny-qwen3"))


@dataclass(frozen=True)
class ServedModel:
    """What a run needs of its model: where it is, its config's sha256 (recorded in the
    manifest), its vocabulary, its longest sequence, its dtype and KV bytes per token."""

    directory: Path
    config_sha256: str
    vocab_size: int
    max_position_embeddings: int
    dtype: str
    kv_bytes_per_token: int
    has_weights: bool
    # the config's model_max_length, which lets vLLM serve past max_position_embeddings
    model_max_length: int | None = None

    def manifest_entry(self) -> dict[str, object]:
        return {
            "directory": str(self.directory),
            "config_sha256": self.config_sha256,
            "vocab_size": self.vocab_size,
            "max_position_embeddings": self.max_position_embeddings,
            "dtype": self.dtype,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "weights": "loaded" if self.has_weights else "dummy (random)",
        }


def _positive(raw: dict[str, object], name: str, path: Path) -> int:
    value = raw.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ServedModelError(
            f"{path}: field '{name}' is {value!r}; a served model's config.json needs a "
            "positive integer there"
        )
    return value


# Fields vLLM builds the model from (a Qwen3/Llama-style config.json), whose absence it
# reports only once the server starts: the attention geometry, the depth, the vocabulary
# and the longest sequence (vllm/config/model.py reads them through transformers).
REQUIRED_FIELDS = (
    "num_attention_heads",
    "num_hidden_layers",
    "vocab_size",
    "max_position_embeddings",
)


def _complete(raw: dict[str, object], path: Path) -> None:
    """Refuse a config.json missing a field vLLM needs, naming the field."""
    missing = [name for name in REQUIRED_FIELDS if name not in raw]
    if "head_dim" not in raw and "hidden_size" not in raw:
        missing.append("hidden_size (or head_dim)")
    if missing:
        raise ServedModelError(
            f"{path}: field(s) {', '.join(missing)} missing; vLLM builds the model from "
            "them and would refuse it at server start; add them to the config.json (the "
            "model's own Hugging Face config) or point vllm.model at a complete model"
        )


def load_served_model(directory: Path | None = None) -> ServedModel:
    """Read ``directory/config.json`` (default: the shipped tiny-qwen3)."""
    directory = Path(directory) if directory is not None else shipped_model()
    path = directory / CONFIG_FILE
    try:
        data = path.read_bytes()
        raw = json.loads(data)
    except OSError as exc:
        raise ServedModelError(
            f"{path}: cannot read it ({exc.strerror}); give a model directory holding a "
            "Hugging Face config.json"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ServedModelError(f"{path}: not valid JSON ({exc}); fix the file") from None
    if not isinstance(raw, dict):
        raise ServedModelError(f"{path}: must be a JSON object (a Hugging Face config.json)")
    _complete(raw, path)
    try:
        spec = model_from_config_json(path, ModelSpec())
    except CalibrationConfigError as exc:
        raise ServedModelError(str(exc)) from None
    per_token = 2 * spec.layers * spec.kv_heads * spec.head_dim * spec.dtype_bytes  # K and V
    return ServedModel(
        directory=directory.resolve(),
        config_sha256=hashlib.sha256(data).hexdigest(),
        vocab_size=_positive(raw, "vocab_size", path),
        max_position_embeddings=_positive(raw, "max_position_embeddings", path),
        dtype=spec.dtype,
        kv_bytes_per_token=per_token,
        has_weights=any(any(directory.glob(p)) for p in WEIGHT_PATTERNS),
        model_max_length=_positive(raw, "model_max_length", path)
        if "model_max_length" in raw
        else None,
    )
