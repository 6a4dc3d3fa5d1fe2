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
from rearrival.config.keys import key

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
    pool: str = key(
        description="Sessions the open plans draw from: a plan file, a folder of them or a "
        "TraceLab round trace."
    )
    slo: str = key(description="Thresholds, e.g. ttft=0.3,tpot=0.03.")
    horizon: float = key(description="Seconds over which sessions start.", exclusiveMinimum=0)
    substrate: str = key("vllm", description="vllm or rbln.", enum=["vllm", "rbln"])
    attainment: float = key(
        0.9,
        description="Share of measured requests that must meet the SLO.",
        exclusiveMinimum=0,
        maximum=1,
    )
    warmup: float = key(
        0.0, description="Requests arriving before this are not measured (s).", minimum=0
    )
    seed: int = key(0, description="Seed of the open plans.", minimum=0)
    replicas: str = key(
        "1", description="Fleet sizes, e.g. 1,2.", type=["string", "integer", "array"]
    )
    routers: str = key(
        "round_robin",
        description="Routers, e.g. round_robin,session_affinity.",
        type=["string", "array"],
    )
    tolerance: float = key(
        0.02, description="Relative tolerance of the goodput.", exclusiveMinimum=0
    )
    grid: int = key(
        6, description="Rates from 1/4 to 2x the goodput run besides the bisection.", minimum=0
    )
    rate: float | None = key(
        None,
        description="Target sessions/s: pick the cheapest fleet meeting it.",
        exclusiveMinimum=0,
    )
    resamples: int = key(
        20, description="With rate: resampled pools for the pick's spread.", minimum=0
    )
    token_scale: float = key(
        1.0, description="Trace pool only: scale every token count.", exclusiveMinimum=0
    )
    block_size: str | None = key(
        None, description="vLLM block sizes.", type=["string", "integer", "array"]
    )
    num_blocks: str | None = key(
        None,
        description="vLLM KV pools in blocks, null block included.",
        type=["string", "integer", "array"],
    )
    max_num_seqs: str | None = key(
        None, description="vLLM max_num_seqs values.", type=["string", "integer", "array"]
    )
    max_num_batched_tokens: str | None = key(
        None, description="vLLM token budgets.", type=["string", "integer", "array"]
    )
    capture_sizes: str | None = key(None, description="vLLM capture-size sets separated by ';'.")
    step_cost: str | None = key(
        None, description="vLLM step cost BASE,DEC,PRE[,KV] seconds.", type=["string", "array"]
    )
    profile: str | None = key(None, description="A vLLM or RBLN profile file.")
    model: str | None = key(None, description="Model the deploy lines serve or compile.")
    buckets: str | None = key(None, description="RBLN bucket sets separated by ';'.")
    batch_sizes: str | None = key(
        None, description="RBLN batch sizes to enumerate.", type=["string", "integer", "array"]
    )
    slots: str | None = key(
        None, description="RBLN KV slots values.", type=["string", "integer", "array"]
    )
    max_buckets: int | None = key(None, description="RBLN: most buckets per set.", minimum=2)
    rules: str = key(
        "base", description="RBLN rule set: base, dummy or stack.", enum=["base", "dummy", "stack"]
    )

    @classmethod
    def from_mapping(cls, raw: dict[str, Any] | None, source: str) -> CapacitySettings | None:
        """The section, lists and numbers of list keys as the command's text."""
        if raw is None:
            return None
        values = dict(raw)
        for name in LIST_KEYS:
            value = values.get(name)
            if isinstance(value, list):
                values[name] = ",".join(map(str, value))
            elif isinstance(value, int | float) and not isinstance(value, bool):
                values[name] = str(value)
        try:
            return cls(**values)
        except TypeError as exc:
            raise StudyConfigError(f"{source}: capacity: {exc}") from None

    def command_options(self) -> dict[str, Any]:
        """The keyword arguments of ``rearrival capacity`` (``commands.capacity``)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}
