"""The memory block a vLLM calibration writes on a device that has memory of its own
(rearrival.measure.calibration.vllm_memory, issue 38): the weights from the server's
log, the device's memory from torch in the vLLM environment; none on the CPU build."""

from __future__ import annotations

from pathlib import Path

import yaml

from rearrival.measure.calibration.vllm_memory import (
    GIB,
    device_total_bytes,
    memory_block,
    weights_gib,
)
from rearrival.model.cost.vllm_profile import vllm_profile_from_mapping

REPO = Path(__file__).resolve().parents[1]
GPU_LOG = (
    "(EngineCore pid=7) INFO 12-01 20:16:03 [gpu_model_runner.py:5150] Model loading took "
    "15.26 GiB memory and 4.210000 seconds\n"
)


def test_the_weights_come_from_vllms_own_log_line() -> None:
    assert weights_gib(GPU_LOG) == 15.26
    assert weights_gib("INFO the CPU build logs no such line\n") is None


def test_a_gpu_calibration_writes_a_block_the_profile_loader_reads(tmp_path: Path) -> None:
    block = memory_block(GPU_LOG, 80 * GIB, num_devices=2)
    assert block is not None
    tree = yaml.safe_load(
        (REPO / "src/rearrival/data/profile_vllm_tiny_qwen3_cpu.yaml").read_text()
    )
    memory = vllm_profile_from_mapping(tree | {"memory": block}, "test").memory
    assert memory is not None
    assert (memory.device_gib, memory.weights_gib, memory.num_devices) == (72.0, 30.52, 2)


def test_no_block_without_device_memory_or_without_the_weights() -> None:
    assert memory_block(GPU_LOG, 0, 1) is None  # the CPU build: torch sees no CUDA device
    assert memory_block("no weights line\n", 80 * GIB, 1) is None


def test_the_device_memory_is_asked_of_the_vllm_environment(tmp_path: Path) -> None:
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\necho {80 * GIB}\n")
    python.chmod(0o755)
    assert device_total_bytes(python) == 80 * GIB
    python.write_text("#!/bin/sh\nexit 1\n")
    assert device_total_bytes(python) == 0
