"""The ``emulated_http``, ``rbln`` and ``vllm`` sections: settings of the backends that run
outside this process (docs/DESIGN.md §5, §15). Their defaults are the one source
(config/schema.yaml states none; tests/test_config_schema.py checks that every field is
a documented key). What hardware compiles and serves, the model's id, maximum sequence
length and devices, is the ``model`` section's (rearrival.config.calibration.ModelSpec),
never repeated here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class EmulatedHttpSettings:
    """The ``emulated_http`` section: wall seconds per emulated second."""

    time_scale: float = 0.25


@dataclass(frozen=True)
class RblnSettings:
    """The ``rbln`` section: where compiled artifacts go and which vllm_rbln serves."""

    artifacts: str = "artifacts"
    site_packages: str | None = None


# Server flags every run sets from its configuration and this section: extra_args may
# not set them again (the manifest's knobs would then not be the server's).
OWNED_FLAGS = (
    "--model",
    "--max-num-seqs",
    "--num-gpu-blocks-override",
    "--block-size",
    "--max-num-batched-tokens",
    "--max-model-len",
    "--kv-cache-memory-bytes",
    "--tensor-parallel-size",
    "--seed",
    "--port",
    "--host",
)


@dataclass(frozen=True)
class VllmStudySettings:
    """The ``vllm`` section (backend vllm, docs/DESIGN.md §15): what every run's server
    serves besides its configuration's knobs, and the knobs the study's own search tries
    beside its ``batch_sizes`` (max_num_seqs).

    ``model`` None serves the shipped tiny-qwen3 config with random weights;
    ``max_model_len`` None is the model's ``max_position_embeddings``; ``device`` None is
    what the vLLM environment is built for (the CPU package: cpu). ``search_num_blocks``
    and ``search_max_num_batched_tokens`` empty: the vLLM search's own axes (pools from
    the profile's memory, its token budgets). ``extra_args`` are further server arguments
    (never one of ``OWNED_FLAGS``); ``async_scheduling`` False turns vLLM's asynchronous
    scheduling off where it has the flag; ``tensor_parallel_size`` the GPUs per server."""

    model: str | None = None
    max_model_len: int | None = None
    device: str | None = None
    ready_timeout_s: float = 600.0
    extra_args: tuple[str, ...] = ()
    async_scheduling: bool = False
    tensor_parallel_size: int = 1
    search_num_blocks: tuple[int, ...] = ()
    search_max_num_batched_tokens: tuple[int, ...] = ()

    def problem(self) -> str | None:
        """What a schema cannot say is wrong with the section (one line), else None."""
        if self.model is not None and not (Path(self.model) / "config.json").is_file():
            return (
                f"vllm.model: {self.model} holds no config.json (looked for "
                f"{(Path(self.model) / 'config.json').absolute()}); give a Hugging Face model "
                "directory or leave vllm.model out to serve the shipped tiny-qwen3"
            )
        if self.device not in (None, "cpu", "gpu"):
            return f"vllm.device: {self.device!r}: use cpu or gpu (or leave it out)"
        if self.tensor_parallel_size < 1:
            return f"vllm.tensor_parallel_size: {self.tensor_parallel_size}: give GPUs >= 1"
        if not self.ready_timeout_s > 0:
            return f"vllm.ready_timeout_s: {self.ready_timeout_s}: give seconds > 0"
        if self.max_model_len is not None and self.max_model_len < 1:
            return f"vllm.max_model_len: {self.max_model_len}: give tokens >= 1"
        owned = sorted({arg.split("=", 1)[0] for arg in self.extra_args} & set(OWNED_FLAGS))
        if owned:
            return (
                f"vllm.extra_args: {', '.join(owned)} is set by the project (from the "
                "configuration or the vllm section); change it there, not in extra_args"
            )
        for name in ("search_num_blocks", "search_max_num_batched_tokens"):
            low = 2 if name == "search_num_blocks" else 1
            if any(not isinstance(v, int) or v < low for v in getattr(self, name)):
                return f"vllm.{name}: {list(getattr(self, name))}: give integers >= {low}"
        return None


# Serving settings added after studies were run (issue 38), at their defaults: left out
# of the digests, so a finished study's jobs keep their digests and do not rerun.
SERVING_DEFAULTS = {"extra_args": (), "async_scheduling": False, "tensor_parallel_size": 1}


def without_serving_defaults(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (a vllm section or VllmSettings as a dict) less the serving settings
    that are at their defaults."""
    return {
        k: v
        for k, v in values.items()
        if k not in SERVING_DEFAULTS
        or (tuple(v) if isinstance(v, list) else v) != SERVING_DEFAULTS[k]
    }
