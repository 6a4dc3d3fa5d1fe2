"""The compiled configuration a verb's options name (``rearrival run``, ``emulate-server``,
``rbln compile``): one parser, so a bad knob is one line naming the option at fault and
the fix whichever verb was given it."""

from __future__ import annotations

from typing import TypeVar

from rearrival.model.configuration import (
    Configuration,
    ConfigurationError,
    RblnConfiguration,
    VllmConfiguration,
)

C = TypeVar("C", bound=Configuration)

# The configuration types' field names -> the options that set them.
OPTIONS = {
    "buckets": "--buckets",
    "batch_size": "--batch-size",
    "slots": "--slots",
    "num_blocks": "--num-blocks",
    "block_size": "--block-size",
    "max_num_batched_tokens": "--max-num-batched-tokens",
}


def parse_sizes(text: str) -> tuple[int, ...]:
    """``--buckets 1,2,4,8`` as a tuple (the configuration checks the sizes)."""
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ConfigurationError(
            f"--buckets '{text}': use comma-separated integers in ascending order, e.g. 1,2,4,8",
            ("buckets",),
        ) from None


def _built(kind: type[C], *args: object, **knobs: object) -> C:
    """The configuration, its refusal naming the options of the fields at fault."""
    try:
        return kind(*args, **knobs)
    except ConfigurationError as exc:
        flags = "/".join(OPTIONS.get(field, field) for field in exc.fields)
        raise ConfigurationError(f"{flags}: {exc}" if flags else str(exc), exc.fields) from None


def configuration_option(
    buckets: str | None, batch_size: int, slots: int | None = None, name: str = "adhoc"
) -> RblnConfiguration:
    """``--buckets 1,2,4,8 --batch-size 8 [--slots S]`` as a configuration (buckets
    default to 1,2,4,8, slots to batch_size, docs/DESIGN.md §1)."""
    sizes = parse_sizes(buckets or "1,2,4,8")
    return _built(RblnConfiguration, sizes, batch_size, slots, name=name)


def vllm_configuration_option(
    buckets: str | None,
    batch_size: int,
    *,
    num_blocks: int,
    block_size: int,
    max_num_batched_tokens: int,
    name: str = "adhoc",
) -> VllmConfiguration:
    """``run --backend vllm``'s knobs (docs/DESIGN.md §15): ``--buckets`` the CUDA-graph
    capture sizes (none by default: eager), ``--batch-size`` max_num_seqs."""
    sizes = parse_sizes(buckets) if buckets else ()
    return _built(
        VllmConfiguration,
        sizes,
        batch_size,
        num_blocks=num_blocks,
        block_size=block_size,
        max_num_batched_tokens=max_num_batched_tokens,
        name=name,
    )
