"""What vLLM 0.32.0 chooses when its operator gives no value (docs/DESIGN.md §15 "Search
and advice"): the search's default axes and the baseline configuration, "vLLM as it
starts by default", that every score divides by.

Each value was read in vLLM 0.32.0's own code (the CPU package's sources):

- block size: 16 on GPUs (``vllm/config/cache.py``, ``CacheConfig.DEFAULT_BLOCK_SIZE``),
  128 on the CPU build (``vllm/platforms/cpu.py``, when the user gives none; it also
  wants multiples of 32 there);
- ``max_num_seqs`` and ``max_num_batched_tokens`` of the OpenAI API server
  (``vllm/engine/arg_utils.py``, ``EngineArgs.get_batch_defaults``): 128 and 2,048 on the
  CPU build (one device); on GPUs 256 and 2,048 below 70 GiB and on A100s, 1,024 and
  8,192 on other GPUs of 70 GiB or more (H100, H200), 1,024 and 16,384 from 160 GiB. The
  profile does not say which GPU it was calibrated on, so a GPU baseline takes the first
  pair and says so: a user whose server runs other knobs passes them as ``--baseline``;
- the KV pool: all the memory left after weights and activations
  (``gpu_memory_utilization``), i.e. the most blocks the profile's memory holds;
- CUDA-graph capture sizes (``vllm/config/vllm.py``, ``VllmConfig._set_cudagraph_sizes``,
  without speculative decoding): the largest size m = min(2 x max_num_seqs, 512,
  max_num_batched_tokens); sizes 1, 2, 4 up to m, multiples of 8 below 256 up to m,
  multiples of 16 from 256 up to m, max_num_batched_tokens when it is at most m, and
  max_num_seqs itself when it is at most the budget. None on the CPU build (eager).
"""

from __future__ import annotations

from rearrival.limits import MAX_KV_BLOCKS
from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.vllm_profile import VllmProfile

BLOCK_SIZE = {"gpu": 16, "cpu": 128}
# (max_num_seqs, max_num_batched_tokens) of the API server, by device (module docstring)
BATCH_DEFAULTS = {"gpu": (256, 2048), "cpu": (128, 2048)}
GPU_BATCH_NOTE = (
    "vLLM's API-server defaults on GPUs below 70 GiB and on A100s (256 sequences, 2,048 "
    "tokens); on H100/H200 it starts with 1,024 and 8,192, from 160 GiB with 1,024 and "
    "16,384: pass --baseline with your server's knobs"
)
# The search's axes when none are given: the default of each knob and the values an
# operator sizing for agents would try around it (docs/DESIGN.md §15).
MAX_NUM_SEQS = (8, 16, 32, 64, 128, 256)
TOKEN_BUDGETS = (512, 2048, 8192)
CAPTURE_DEFAULT = "default"  # vLLM's own rule for the knobs of each candidate
CAPTURE_NONE = "none"  # eager: no CUDA graphs (the CPU build)
GRAPH_CEILING = 512  # vLLM's default largest capture size (1,024 on data-centre Blackwell)


def default_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int) -> tuple[int, ...]:
    """vLLM's default capture sizes for these knobs (module docstring). All of them: a
    step's decode tokens can exceed ``max_num_seqs`` (a request resumed after preemption
    recomputes as generation tokens), so the larger sizes can pad too."""
    ceiling = min(2 * max_num_seqs, GRAPH_CEILING, max_num_batched_tokens)
    sizes = {s for s in (1, 2, 4) if s <= ceiling}
    sizes |= set(range(8, min(ceiling + 1, 256), 8))
    sizes |= set(range(256, ceiling + 1, 16))
    if max_num_batched_tokens <= ceiling:
        sizes.add(max_num_batched_tokens)
    if max_num_seqs <= min(GRAPH_CEILING, max_num_batched_tokens):
        sizes.add(max_num_seqs)
    return tuple(sorted(sizes))


def baseline_configuration(profile: VllmProfile, num_blocks: int) -> VllmConfiguration:
    """vLLM as it starts by default on the profile's device, with a pool of
    ``num_blocks`` (the most the memory holds, or the largest pool searched)."""
    seqs, budget = BATCH_DEFAULTS[profile.device]
    sizes = default_capture_sizes(seqs, budget) if profile.device == "gpu" else ()
    return VllmConfiguration(
        sizes,
        seqs,
        num_blocks=min(num_blocks, MAX_KV_BLOCKS),
        block_size=BLOCK_SIZE[profile.device],
        max_num_batched_tokens=budget,
        name="baseline",
    )


def short_id(cand: VllmConfiguration) -> str:
    """The id as result lines and tables print it: vLLM's default capture sizes, which
    run to dozens of numbers, as ``:default`` (``VllmConfiguration.id`` keeps them all)."""
    sizes = cand.buckets
    if sizes and sizes == default_capture_sizes(cand.batch_size, cand.max_num_batched_tokens):
        plain = VllmConfiguration(
            (),
            cand.batch_size,
            num_blocks=cand.num_blocks,
            block_size=cand.block_size,
            max_num_batched_tokens=cand.max_num_batched_tokens,
        )
        return f"{plain.id}:{CAPTURE_DEFAULT}"
    return cand.id
