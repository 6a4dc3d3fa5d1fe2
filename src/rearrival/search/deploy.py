"""What to run to deploy a configuration, in each engine's own knob names (issue 36: the
advice named ids such as ``vllm:16:5454x16:8192`` and left users to decode them).

One function per substrate gives the command line, one the knobs by the engine's own
names (``--json`` prints those); the advice prints both, and anything else that deploys
a configuration (a capacity plan, say) should call these rather than spell flags again.

- vLLM 0.32.0 (``vllm/engine/arg_utils.py``): ``--max-num-seqs`` (``batch_size``),
  ``--num-gpu-blocks-override`` (``num_blocks``, the null block included),
  ``--block-size``, ``--max-num-batched-tokens``, ``--enable-prefix-caching``, and the
  CUDA-graph capture sizes as ``--cudagraph-capture-sizes`` (none: ``--enforce-eager``),
  the flags the project's vLLM backend starts its servers with
  (``rearrival.measure.vllm.server``).
- RBLN: the artifact is compiled by ``rearrival rbln compile`` with optimum-rbln's
  ``from_pretrained`` arguments ``rbln_batch_size``, ``rbln_max_seq_len``,
  ``rbln_num_devices`` and ``rbln_decoder_batch_sizes`` (the buckets;
  ``rearrival.measure.rbln.CompileConfig``), then served by vllm-rbln with one
  ``max_seq_len`` block per sequence (``rearrival.measure.rbln.vllm_serve_argv``). The eager
  path allocates ``batch_size`` KV slots, so a configuration whose slots differ cannot be
  deployed as such, and its note says so.
- A fleet (``rearrival capacity``): one server per replica, each on its own port from
  ``FIRST_PORT``, behind vllm-router 0.1.17 (``vllm_router/router_args.py`` of its wheel:
  ``--worker-urls`` and ``--policy``) on ``ROUTER_PORT``, for either substrate.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from rearrival.model.configuration import RblnConfiguration, VllmConfiguration

MODEL_PLACEHOLDER = "MODEL"  # where the advice does not know the served model's path
FIRST_PORT = 8000  # replica i of a fleet listens on FIRST_PORT + i
ROUTER_PORT = 30000


def vllm_knobs(configuration: VllmConfiguration) -> dict[str, Any]:
    """The configuration as vLLM's own engine arguments (``EngineArgs`` field names)."""
    sizes = list(configuration.buckets)
    return {
        "max_num_seqs": configuration.batch_size,
        "num_gpu_blocks_override": configuration.num_blocks,
        "block_size": configuration.block_size,
        "max_num_batched_tokens": configuration.max_num_batched_tokens,
        "enable_prefix_caching": True,
        "cudagraph_capture_sizes": sizes or None,
        "enforce_eager": not sizes,
    }


def vllm_serve_args(
    configuration: VllmConfiguration,
    *,
    model: str = MODEL_PLACEHOLDER,
    max_model_len: int | None = None,
) -> list[str]:
    """``vllm serve MODEL ...`` with the configuration's fixed-at-start knobs."""
    knobs = vllm_knobs(configuration)
    argv = [
        "vllm",
        "serve",
        model,
        "--max-num-seqs",
        str(knobs["max_num_seqs"]),
        "--num-gpu-blocks-override",
        str(knobs["num_gpu_blocks_override"]),
        "--block-size",
        str(knobs["block_size"]),
        "--max-num-batched-tokens",
        str(knobs["max_num_batched_tokens"]),
        "--enable-prefix-caching",
    ]
    if max_model_len is not None:
        argv += ["--max-model-len", str(max_model_len)]
    if knobs["cudagraph_capture_sizes"]:
        argv += ["--cudagraph-capture-sizes", *map(str, knobs["cudagraph_capture_sizes"])]
    else:
        argv.append("--enforce-eager")
    return argv


def rbln_knobs(
    configuration: RblnConfiguration, *, max_seq_len: int, num_devices: int
) -> dict[str, Any]:
    """optimum-rbln's ``from_pretrained`` arguments of the artifact to compile."""
    return {
        "rbln_batch_size": configuration.batch_size,
        "rbln_max_seq_len": max_seq_len,
        "rbln_num_devices": num_devices,
        "rbln_decoder_batch_sizes": list(configuration.buckets),
    }


def rbln_compile_args(
    configuration: RblnConfiguration,
    *,
    model: str,
    max_seq_len: int,
    num_devices: int,
    artifacts: str = "artifacts",
) -> list[str]:
    """``rearrival rbln compile ...``: the artifact of one configuration."""
    return [
        "rearrival",
        "rbln",
        "compile",
        "--model",
        model,
        "--batch-size",
        str(configuration.batch_size),
        "--buckets",
        ",".join(map(str, configuration.buckets)),
        "--artifacts",
        artifacts,
        "--max-seq-len",
        str(max_seq_len),
        "--num-devices",
        str(num_devices),
    ]


def rbln_serve_args(configuration: RblnConfiguration, *, max_seq_len: int) -> list[str]:
    """``vllm serve ARTIFACT ...`` with vllm-rbln: one ``max_seq_len`` block a sequence."""
    return [
        "vllm",
        "serve",
        "ARTIFACT",
        "--max-num-seqs",
        str(configuration.batch_size),
        "--block-size",
        str(max_seq_len),
        "--max-model-len",
        str(max_seq_len),
        "--enable-prefix-caching",
    ]


def replica_serve_lines(serve: Sequence[str], replicas: int) -> list[str]:
    """One ``vllm serve X ...`` line per replica of a fleet, replica i on port
    ``FIRST_PORT + i`` (the port right after the served path, the other flags as given)."""
    head, flags = list(serve[:3]), list(serve[3:])
    return [shell_line([*head, "--port", str(FIRST_PORT + i), *flags]) for i in range(replicas)]


def replica_urls(replicas: int, host: str = "127.0.0.1") -> list[str]:
    """The worker URLs of ``replica_serve_lines``' servers, in replica order."""
    return [f"http://{host}:{FIRST_PORT + i}" for i in range(replicas)]


def vllm_router_args(worker_urls: Sequence[str], policy: str) -> list[str]:
    """``vllm-router`` over the fleet's servers with one of its policies."""
    return [
        "vllm-router",
        "--worker-urls",
        *worker_urls,
        "--policy",
        policy,
        "--host",
        "0.0.0.0",
        "--port",
        str(ROUTER_PORT),
    ]


def shell_line(argv: Sequence[str]) -> str:
    """A command line to paste into a POSIX shell."""
    return shlex.join(argv)


def vllm_deployment(
    configuration: VllmConfiguration, *, model: str, max_model_len: int | None = None
) -> dict[str, Any]:
    """What the vLLM advice prints and ``--json`` carries for one configuration."""
    return {
        "knobs": vllm_knobs(configuration),
        "commands": [
            shell_line(vllm_serve_args(configuration, model=model, max_model_len=max_model_len))
        ],
        "note": None,
    }


def rbln_deployment(
    configuration: RblnConfiguration, *, model: str, max_seq_len: int, num_devices: int
) -> dict[str, Any]:
    """What the RBLN advice prints and ``--json`` carries for one configuration."""
    note = None
    if configuration.slots != configuration.batch_size:
        note = (
            f"{configuration.slots} KV slots with batch size {configuration.batch_size}: "
            "vllm-rbln's eager path allocates one slot per sequence, so only "
            f"{configuration.batch_size} slots can be deployed"
        )
    return {
        "knobs": rbln_knobs(configuration, max_seq_len=max_seq_len, num_devices=num_devices),
        "commands": [
            shell_line(
                rbln_compile_args(
                    configuration, model=model, max_seq_len=max_seq_len, num_devices=num_devices
                )
            ),
            shell_line(rbln_serve_args(configuration, max_seq_len=max_seq_len)),
        ],
        "note": note,
    }
