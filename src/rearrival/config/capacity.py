"""The ``capacity:`` section of a study definition (docs/DESIGN.md §17 "Capacity"): the
options of ``rearrival capacity`` as a study states them, so the Snakemake stage
(rules/capacity.smk) runs exactly the command a user would. Each key is the option of
the same name (``horizon`` is ``--horizon``, ``max_num_seqs`` is ``--max-num-seqs``), with
its value as the command line takes it (``replicas: "1,2"``); left-out keys take the
command's defaults, stated here. Exploratory unless a registered study names its
prediction: the stage is run only when the section is present."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from rearrival.config.errors import StudyConfigError

LIST_KEYS = (
    "replicas",
    "routers",
    "block_size",
    "num_blocks",
    "max_num_seqs",
    "max_num_batched_tokens",
    "capture_sizes",
    "step_cost",
    "buckets",
    "batch_sizes",
    "slots",
)


@dataclass(frozen=True)
class CapacitySettings:
    pool: str
    slo: str
    horizon: float
    substrate: str = "vllm"
    attainment: float = 0.9
    warmup: float = 0.0
    seed: int = 0
    replicas: str = "1"
    routers: str = "round_robin"
    tolerance: float = 0.02
    grid: int = 6
    rate: float | None = None
    resamples: int = 20
    token_scale: float = 1.0
    block_size: str | None = None
    num_blocks: str | None = None
    max_num_seqs: str | None = None
    max_num_batched_tokens: str | None = None
    capture_sizes: str | None = None
    step_cost: str | None = None
    profile: str | None = None
    model: str | None = None
    buckets: str | None = None
    batch_sizes: str | None = None
    slots: str | None = None
    max_buckets: int | None = None
    rules: str = "base"

    @classmethod
    def from_mapping(cls, raw: dict[str, Any] | None, source: str) -> CapacitySettings | None:
        """The section, lists and numbers of list keys as the command's text."""
        if raw is None:
            return None
        values = dict(raw)
        for key in LIST_KEYS:
            value = values.get(key)
            if isinstance(value, list):
                values[key] = ",".join(map(str, value))
            elif isinstance(value, int | float) and not isinstance(value, bool):
                values[key] = str(value)
        try:
            return cls(**values)
        except TypeError as exc:
            raise StudyConfigError(f"{source}: capacity: {exc}") from None

    def command_options(self) -> dict[str, Any]:
        """The keyword arguments of ``rearrival capacity`` (``commands.capacity``)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}
