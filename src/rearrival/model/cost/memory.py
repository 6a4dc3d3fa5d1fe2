"""Device memory of a configuration (paper Section V-D, Table XV): does it fit?

A candidate's KV slots plus the model's weights must fit the instance's devices. The KV
side comes from the profile (bytes per slot from the model's architecture, devices); the
memory per device and the weights come from the profile data file's ``memory`` block.
``device_memory`` builds the budget from any profile and data tree, so a calibrated
profile can feed it the same way as the shipped one.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from rearrival.model.cost.profile import (
    DEFAULT_PROFILE,
    GIB,
    Profile,
    ProfileError,
    measured_profile,
)
from rearrival.provenance import field_value, shipped_mapping


@dataclass(frozen=True)
class DeviceMemory:
    """Memory budget of one instance: weights and KV slots spread over its devices."""

    per_device_gib: float
    weights_gib: float
    num_devices: int
    slot_gib: float  # KV of one slot over the whole instance

    def gib_per_device(self, slots: int) -> float:
        """Weights and the KV of ``slots`` slots on each device (even split)."""
        return (self.weights_gib + slots * self.slot_gib) / self.num_devices

    def fits(self, slots: int) -> bool:
        return self.gib_per_device(slots) <= self.per_device_gib

    def max_slots(self, slot_gib: float | None = None) -> int:
        """Most slots that fit (0 when even the weights do not); ``slot_gib`` prices a
        slot of another maximum sequence length (default: the profile's)."""
        room = self.per_device_gib * self.num_devices - self.weights_gib
        return max(0, int(room // (self.slot_gib if slot_gib is None else slot_gib)))

    def headroom_gib_per_device(self, slots: int) -> float:
        """Memory left on each device after the weights and ``slots`` slots (< 0: no fit)."""
        return self.per_device_gib - self.gib_per_device(slots)


@dataclass(frozen=True)
class ContextCost:
    """What compiling for a longer maximum sequence length costs in KV memory.

    On the eager path one slot reserves a whole ``max_seq_len`` sequence (Table XV), so
    the slot grows linearly with it and fewer slots fit the same devices. The profile's
    step and prefill costs were measured at ``measured_seq_len`` only: a configuration
    at another length needs a profile measured there (``rearrival calibrate``).
    """

    max_seq_len: int
    measured_seq_len: int
    slot_gib: float  # one slot over the whole instance
    slot_gib_per_device: float
    max_slots: int

    def sentence(self) -> str:
        """One line a user can act on: KV per slot and how many slots would fit."""
        text = (
            f"a maximum sequence length of {self.max_seq_len:,} tokens needs "
            f"{self.slot_gib:.3f} GiB of KV per slot ({self.slot_gib_per_device:.4f} GiB per "
            f"device), so at most {self.max_slots} slots fit"
        )
        if self.max_seq_len == self.measured_seq_len:
            return text
        return (
            f"{text}; the profile was measured at {self.measured_seq_len:,}, so its costs "
            "do not apply there (calibrate at that length first)"
        )


def context_cost(profile: Profile, memory: DeviceMemory, max_seq_len: int) -> ContextCost:
    """KV per slot and slots that fit when compiled for ``max_seq_len`` tokens."""
    slot_gib = profile.kv_bytes_per_token * max_seq_len / GIB
    return ContextCost(
        max_seq_len,
        profile.slot_tokens,
        slot_gib,
        slot_gib / profile.num_devices,
        memory.max_slots(slot_gib),
    )


@cache
def _shipped_tree() -> dict[str, Any]:
    """The shipped profile file, parsed once per process (only read here): a search asks
    for the device budget at every step that filters or reports by memory."""
    return shipped_mapping(DEFAULT_PROFILE)


def device_memory(
    profile: Profile | None = None,
    tree: dict[str, Any] | None = None,
    source: str = DEFAULT_PROFILE,
) -> DeviceMemory:
    """The budget of ``profile`` (default: measured) with the ``memory`` block of ``tree``
    (default: the shipped profile data file)."""
    profile = profile or measured_profile()
    tree = _shipped_tree() if tree is None else tree

    def value(dotted: str) -> float:
        raw = field_value(tree, dotted, source, error=ProfileError, reference=DEFAULT_PROFILE)
        try:
            number = float(raw)
        except (TypeError, ValueError) as exc:
            raise ProfileError(f"{source}: field '{dotted}' must be a number of GiB") from exc
        if number < 0:
            raise ProfileError(f"{source}: field '{dotted}' must be >= 0 GiB")
        return number

    return DeviceMemory(
        value("memory.per_device_gib"),
        value("memory.weights_gib"),
        profile.num_devices,
        profile.slot_bytes / GIB,
    )
