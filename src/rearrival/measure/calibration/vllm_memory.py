"""The ``memory`` block of a vLLM profile written by a calibration on a device that has
memory of its own (docs/DESIGN.md §15 "vLLM profile", issue 38).

Why: ``search`` and ``advise --substrate vllm`` derive pool sizes from the profile's
memory and filter pools that do not fit; a profile without the block searches only the
pools it is given. What the calibration knows: the weights' size from the server's own
log (vLLM's GPU model runner logs "Model loading took X GiB memory"), the device's total
memory from torch in the vLLM environment, and the GPUs per server. vLLM may use
``gpu_memory_utilization`` of a device (its default 0.9, vllm/config/cache.py) when no
``--kv-cache-memory-bytes`` is given, which is how a server sized from the profile
starts. The activation peak and CUDA graphs (``overhead_gib``) are not in the log of a
server started with ``--kv-cache-memory-bytes`` (it skips vLLM's memory profiling), so
the block leaves it out and says so. vLLM's CPU build has no device memory: no block.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

GIB = 2**30
# vLLM's default share of a device's memory it may use (CacheConfig.gpu_memory_utilization)
GPU_MEMORY_UTILIZATION = 0.9
_WEIGHTS = re.compile(r"Model loading took (?P<gib>[\d.]+) GiB memory")
_TOTAL = (
    "import torch\n"
    "print(torch.cuda.get_device_properties(0).total_memory if torch.cuda.is_available() "
    "else 0)"
)


def weights_gib(log_text: str) -> float | None:
    """The weights' GiB from the server's log (None: not logged, e.g. the CPU build)."""
    found = _WEIGHTS.search(log_text)
    return float(found.group("gib")) if found else None


def device_total_bytes(python: Path, timeout_s: float = 120) -> int:
    """The first CUDA device's memory as torch in the vLLM environment sees it (0: none,
    or torch cannot tell)."""
    try:
        done = subprocess.run(
            [str(python), "-c", _TOTAL], capture_output=True, text=True, timeout=timeout_s
        )
    except (OSError, subprocess.TimeoutExpired):
        return 0
    text = done.stdout.strip()
    return int(text) if done.returncode == 0 and text.isdigit() else 0


def memory_block(log_text: str, total_bytes: int, num_devices: int) -> dict[str, Any] | None:
    """The profile's ``memory`` block, or None when the device has no memory of its own
    or the log does not give the weights."""
    weights = weights_gib(log_text)
    if total_bytes <= 0 or weights is None:
        return None
    total = total_bytes / GIB
    return {
        "device_gib": {
            "value": round(total * GPU_MEMORY_UTILIZATION, 3),
            "provenance": f"{total:.2f} GiB (torch.cuda, device 0) x vLLM's default "
            f"gpu_memory_utilization {GPU_MEMORY_UTILIZATION}",
        },
        "weights_gib": {
            "value": weights * num_devices,
            "provenance": f"the calibration server's log: 'Model loading took {weights} GiB' "
            f"per device, x {num_devices} device(s)",
        },
        "num_devices": {"value": num_devices, "provenance": "tensor_parallel_size"},
    }
