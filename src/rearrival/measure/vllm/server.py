"""Launching vLLM's OpenAI-compatible server for one run (docs/DESIGN.md §15), and reading
its own reason out of its log when it fails.

The server is started as ``python -m vllm.entrypoints.openai.api_server`` from the vLLM
environment (``rearrival.vllm_env``; the CPU package's ``vllm`` console script looks up
package metadata named ``vllm`` and fails), on loopback, a free port, fresh for every run.
Its fixed-at-start knobs are the configuration's: ``--max-num-seqs`` (batch_size),
``--num-gpu-blocks-override`` (num_blocks, the null block included), ``--block-size``,
``--max-num-batched-tokens``, ``--max-model-len``, prefix caching on, and the CUDA-graph
capture sizes where graphs exist. On the CPU build there are none: the server runs
``--enforce-eager`` and the manifest records the capture sizes as "none". The KV pool's
memory (``--kv-cache-memory-bytes``, which the CPU worker requires) is sized for exactly
the configured blocks. ``--enable-prompt-tokens-details`` makes it report cached tokens
per request and ``--enable-logging-iteration-details`` writes the step log.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rearrival.config.served_model import ServedModel
from rearrival.model.configuration import VllmConfiguration
from rearrival.vllm_env import NO_ASYNC_FLAG

CPU, GPU = "cpu", "gpu"
DEVICES = (CPU, GPU)
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
NO_CAPTURE_SIZES = "none"
# vLLM refuses a --seed outside [0, 2**32) ("Seed must be between 0 and 2**32 - 1"); a
# study's run seeds are 64-bit (rearrival.model.plans.plangen.derive_seed), so the server
# gets the run seed modulo this (its argv, in the manifest, says which).
VLLM_SEEDS = 2**32

# vLLM prefixes each line with its process, level, time and source: "(EngineCore pid=7)
# ERROR 12-01 20:16:03 [core.py:1512] ".
_PREFIX = re.compile(
    r"^(?:\((?P<process>[\w:]+) pid=(?P<pid>\d+)\) )?"
    r"(?:(?P<level>[A-Z]+) [\d-]+ [\d:]+ \[[^\]]*\] )?"
)
_EXCEPTION = re.compile(
    r"^(?:[A-Za-z_][\w.]*\.)?(?P<name>[A-Za-z_]\w*(?:Error|Exception)): (?P<text>.+)$"
)
# Lines that say nothing about why a server stopped (interpreter teardown noise).
_NOISE = ("nanobind", "leaked", "See https://nanobind")


@dataclass(frozen=True)
class ServingOptions:
    """Server arguments beside the configuration's knobs, from the study's vllm section:
    GPUs per server, the synchronous scheduler the predictor models (``--no-async-
    scheduling``, given only where the installed vLLM has it), and further arguments."""

    tensor_parallel_size: int = 1
    no_async_scheduling: bool = False
    extra_args: tuple[str, ...] = ()


def capture_sizes_entry(configuration: VllmConfiguration) -> list[int] | str:
    """What the manifest records as the capture sizes: the list, or "none" (eager)."""
    return list(configuration.buckets) if configuration.buckets else NO_CAPTURE_SIZES


def kv_cache_memory_bytes(configuration: VllmConfiguration, model: ServedModel) -> int:
    """Bytes of exactly ``num_blocks`` blocks of ``block_size`` tokens of this model."""
    return configuration.num_blocks * configuration.block_size * model.kv_bytes_per_token


def server_argv(
    python: Path,
    configuration: VllmConfiguration,
    model: ServedModel,
    *,
    port: int,
    seed: int,
    max_model_len: int,
    device: str = CPU,
    host: str = "127.0.0.1",
    serving: ServingOptions | None = None,
) -> list[str]:
    """The server's whole command line for one run (recorded, argument by argument, in
    the manifest). Refuses capture sizes on the CPU, which has no CUDA graphs."""
    serving = serving or ServingOptions()
    if device not in DEVICES:
        raise ValueError(f"device {device!r}: use one of {', '.join(DEVICES)}")
    if device == CPU and configuration.buckets:
        raise ValueError(
            f"capture sizes {list(configuration.buckets)}: vLLM's CPU build has no CUDA "
            "graphs; give the configuration no capture sizes (buckets: [])"
        )
    argv = [
        str(python),
        "-m",
        SERVER_MODULE,
        "--model",
        str(model.directory),
        "--dtype",
        model.dtype,
        "--host",
        host,
        "--port",
        str(port),
        "--seed",
        str(seed % VLLM_SEEDS),
        "--max-num-seqs",
        str(configuration.batch_size),
        "--num-gpu-blocks-override",
        str(configuration.num_blocks),
        "--block-size",
        str(configuration.block_size),
        "--max-num-batched-tokens",
        str(configuration.max_num_batched_tokens),
        "--max-model-len",
        str(max_model_len),
        "--kv-cache-memory-bytes",
        str(kv_cache_memory_bytes(configuration, model)),
        "--enable-prefix-caching",
        "--enable-prompt-tokens-details",
        "--enable-logging-iteration-details",
    ]
    if not model.has_weights:
        argv += ["--load-format", "dummy", "--skip-tokenizer-init"]
    if configuration.buckets:
        argv += ["--cudagraph-capture-sizes", *map(str, configuration.buckets)]
    else:
        argv.append("--enforce-eager")
    if serving.tensor_parallel_size > 1:
        argv += ["--tensor-parallel-size", str(serving.tensor_parallel_size)]
    if serving.no_async_scheduling:
        argv.append(NO_ASYNC_FLAG)
    return argv + list(serving.extra_args)


def server_env() -> dict[str, str]:
    """Unbuffered output, so a killed server still leaves every line in the captured log."""
    return {**os.environ, "PYTHONUNBUFFERED": "1"}


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something already listens on ``host:port`` (then vLLM cannot bind it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def _messages(lines: Sequence[str]) -> list[tuple[str | None, str]]:
    """(level or None for a raw line such as a traceback on stderr, message) per line."""
    found = []
    for line in lines:
        match = _PREFIX.match(line)
        level = match.group("level") if match else None
        found.append((level, line[match.end() if match else 0 :].rstrip()))
    return found


# vLLM's own line when an engine core process dies (vllm/v1/engine/core_client.py,
# MPClient's liveness monitor); the EngineDeadError after it only says "See stack trace
# (above)", which a killed process never wrote.
ENGINE_EXITED = "engine core exited unexpectedly"
# Exceptions that are consequences, never the cause: reported only when nothing else is.
_CONSEQUENCES = ("EngineDeadError",)
# pydantic's header line ("1 validation error for ModelConfig"): the cause is below it.
_VALIDATION = re.compile(r"^\d+ validation errors? for \w+$")


def vllm_reason(log_text: str) -> str:
    """vLLM's own reason for a failure, from its log: the first exception it reported as
    an error or the line saying an engine core died, whichever came first (the root
    cause: later ones are its consequences, e.g. EngineDeadError after a worker's
    IndexError; exceptions inside warnings are not failures), else the last line that
    says anything. A pydantic ValidationError gets the cause pydantic prints below it."""
    messages = _messages(log_text.splitlines())
    consequence = None
    for k, (level, message) in enumerate(messages):
        if ENGINE_EXITED in message:
            return message.strip()[:400]
        found = _EXCEPTION.match(message.strip())
        if not found or level not in (None, "ERROR", "CRITICAL"):
            continue
        text = f"{found.group('name')}: {found.group('text').strip()}"
        if found.group("name") in _CONSEQUENCES:
            consequence = consequence or text
            continue
        if _VALIDATION.match(found.group("text").strip()):
            text += _validation_cause(messages[k + 1 : k + 4])
        return text[:400]
    if consequence is not None:
        return consequence[:400]
    for _, message in reversed(messages):
        text = message.strip()
        if text and not any(noise in text for noise in _NOISE) and not text.startswith("- "):
            return text[:400]
    return "the server log is empty"


def _validation_cause(following: Sequence[tuple[str | None, str]]) -> str:
    """': <cause>' from the lines pydantic prints under its header (the field, then
    "  Value error, ... [type=...]"), or '' when none is there."""
    for _, message in following:
        text = message.strip()
        if "error" in text.lower() and "errors.pydantic.dev" not in text:
            return ": " + re.sub(r"\s*\[type=.*$", "", text)
    return ""


def engine_core_pids(log_text: str) -> list[int]:
    """The engine core processes a server log names (``(EngineCore pid=N)``), in order."""
    found: list[int] = []
    for line in log_text.splitlines():
        match = _PREFIX.match(line)
        if match and match.group("process") == "EngineCore":
            pid = int(match.group("pid"))
            if pid not in found:
                found.append(pid)
    return found
