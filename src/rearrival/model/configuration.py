"""The compiled configuration: what a serving stack fixes before it serves a request
(docs/DESIGN.md §1; paper Section II-B).

One frozen type carries a configuration from the config file to the simulator core, the
search, the emulator, the run manifest and the report; it is validated once, where it is
built, and trusted afterwards. Every substrate shares the decode sizes fixed at build time
(RBLN's compiled decoder buckets, CUDA-graph capture sizes on vLLM) and the most requests
that run at once (``batch_size``, vLLM's ``max_num_seqs``); each substrate adds its own KV
knobs by extension:

- ``RblnConfiguration`` (the paper's stack, and the emulated twin of it): KV *slots*, one
  ``max_seq_len`` block per sequence, S defaulting to batch_size (eager attention);
- ``VllmConfiguration`` (docs/DESIGN.md "The vLLM substrate"): a paged pool of
  ``num_blocks`` blocks of ``block_size`` tokens and a per-step token budget
  ``max_num_batched_tokens``; its ``buckets`` are the CUDA-graph capture sizes (empty on
  the CPU, where no graphs exist).

``SUBSTRATES`` maps a substrate's name to its type, so a reader (a manifest, a registered
design, a search result) rebuilds the right one from its mapping.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from typing import Any, ClassVar

from rearrival.errors import RearrivalError
from rearrival.limits import (
    BATCH_SIZE_WHY,
    KV_BLOCKS_WHY,
    MAX_BATCH_SIZE,
    MAX_KV_BLOCKS,
    bound_problem,
)
from rearrival.model.buckets import (
    bucket_set_problem,
    capture_padded,
    default_slots,
    int_sizes,
    is_integer,
    select_bucket,
    sizes_problem,
    slots_problem,
)


class ConfigurationError(RearrivalError, ValueError):
    """A configuration that no stack could be built with; the message names the field and
    the fix. ``fields`` names the fields at fault, so a caller that set them from its own
    options (a CLI verb, a config key) can name those instead."""

    def __init__(self, message: str, fields: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.fields = fields


def _as_int_tuple(value: Any, name: str) -> tuple[int, ...]:
    sizes = int_sizes(value)
    if sizes is None:
        raise ConfigurationError(
            f"{name} {value!r} must be a list of integers such as 1,2,4,8", (name,)
        )
    return sizes


@dataclass(frozen=True)
class Configuration:
    """What every substrate fixes at build time: the decode sizes and the batch limit.

    Not built directly: a configuration is one of the substrate types below. ``name`` is
    the study's name for it ("baseline", "selected"; empty for a search candidate) and
    takes no part in equality, so two names for the same knobs are the same configuration.
    """

    buckets: tuple[int, ...]
    batch_size: int
    name: str = field(default="", compare=False, kw_only=True)

    substrate: ClassVar[str] = ""

    @property
    def n_buckets(self) -> int:
        return len(self.buckets)

    def padded(self, n: int) -> int:
        """The decode batch ``n`` requests run as: the next compiled size holding them."""
        raise NotImplementedError

    @cached_property
    def bucket_map(self) -> tuple[int, ...]:
        """b(n) for n = 0..batch_size (0 at n = 0): the only way sizes reach a schedule."""
        return (0, *(self.padded(n) for n in range(1, self.batch_size + 1)))

    def as_dict(self) -> dict[str, Any]:
        """The knobs as written into manifests, registrations and search results."""
        raise NotImplementedError

    def named(self, name: str) -> Configuration:
        """The same knobs under a study's name for them."""
        return replace(self, name=name)


_RBLN_ID = re.compile(r"(\d+):([\d,]+)(?:/(\d+))?")

_VALID_GRIDS: set[tuple[tuple[int, ...], int]] = set()  # (buckets, batch_size) checked


def _check_grid(buckets: tuple[int, ...], batch_size: Any) -> None:
    """Refuse a bucket set that cannot serve ``batch_size``; a grid once checked is
    remembered (a search builds the same few grids for thousands of candidates)."""
    exact = type(batch_size) is int and all(type(b) is int for b in buckets)  # bool == int
    if exact and (buckets, batch_size) in _VALID_GRIDS:
        return
    problem = bucket_set_problem(buckets, batch_size)
    if problem is not None:
        raise ConfigurationError(problem, ("buckets", "batch_size"))
    if exact and len(_VALID_GRIDS) < 100_000:
        _VALID_GRIDS.add((buckets, batch_size))


@dataclass(frozen=True)
class RblnConfiguration(Configuration):
    """The paper's configuration (bucket set B, batch_size, KV slots S; Section II-B).

    ``slots`` defaults to batch_size (eager attention allocates one ``max_seq_len`` block
    per sequence of the batch); after construction it is always an int.
    """

    slots: int | None = None

    substrate: ClassVar[str] = "rbln"

    def __post_init__(self) -> None:
        try:
            buckets = _as_int_tuple(self.buckets, "buckets")
            _check_grid(buckets, self.batch_size)
            slots = default_slots(self.slots, self.batch_size)
            problem = slots_problem(slots)
            if problem is not None:
                raise ConfigurationError(problem, ("slots",))
        except ConfigurationError as exc:
            raise self.refused(exc) from None
        object.__setattr__(self, "buckets", buckets)
        object.__setattr__(self, "slots", slots)

    @classmethod
    def refused(cls, error: ConfigurationError) -> ConfigurationError:
        """The error a refused knob raises (a subtype may name itself in it)."""
        return error

    @classmethod
    def from_id(cls, text: str, name: str = "") -> RblnConfiguration:
        """The configuration an ``id`` names (its inverse: search results, advice)."""
        match = _RBLN_ID.fullmatch(text)
        if match is None:
            raise ConfigurationError(
                f"configuration id {text!r} is not of the form 16:1,4,6,8,10,16 "
                "(batch_size:buckets, then /slots when slots differ from batch_size)",
                ("id",),
            )
        slots = int(match[3]) if match[3] else None
        return cls(tuple(int(b) for b in match[2].split(",")), int(match[1]), slots, name=name)

    def padded(self, n: int) -> int:
        return select_bucket(n, self.buckets)

    @cached_property
    def id(self) -> str:
        """Stable name, e.g. ``16:1,4,6,8,10,16`` (``/S`` appended only if slots differ)."""
        text = f"{self.batch_size}:{','.join(map(str, self.buckets))}"
        return text if self.slots == self.batch_size else f"{text}/{self.slots}"

    def label(self) -> str:
        """The reports' spelling, ``{1,2,4,8}/8/8`` (buckets / batch_size / slots)."""
        return f"{{{','.join(map(str, self.buckets))}}}/{self.batch_size}/{self.slots}"

    def as_dict(self) -> dict[str, Any]:
        return {"buckets": list(self.buckets), "batch_size": self.batch_size, "slots": self.slots}

    def tiebreak(self) -> tuple[Any, ...]:
        """Among equal predicted cost prefer fewer buckets (compile time, artifact size),
        then fewer slots (KV memory), then the enumeration order."""
        return (self.n_buckets, self.slots, self.batch_size, self.buckets)


_VLLM_ID = re.compile(r"vllm:(\d+):(\d+)x(\d+):(\d+)(?::([\d,]+))?")


@dataclass(frozen=True)
class VllmConfiguration(Configuration):
    """A vLLM server's fixed-at-start knobs (docs/DESIGN.md "The vLLM substrate").

    ``batch_size`` is ``max_num_seqs``; ``buckets`` the CUDA-graph capture sizes, empty
    where no graphs exist (the CPU build; a decode batch above the largest size runs
    eager, unpadded); ``num_blocks`` the KV pool in blocks, the null block included
    (``--num-gpu-blocks-override``), so ``num_blocks - 1`` hold KV; ``block_size`` tokens
    per block; ``max_num_batched_tokens`` the per-step token budget.
    """

    num_blocks: int = field(kw_only=True)
    block_size: int = field(default=16, kw_only=True)
    max_num_batched_tokens: int = field(default=2048, kw_only=True)

    substrate: ClassVar[str] = "vllm"

    def __post_init__(self) -> None:
        buckets = _as_int_tuple(self.buckets, "buckets")
        problem = sizes_problem(buckets, "capture sizes", "1,2,4,8")
        if problem is not None:
            raise ConfigurationError(problem, ("buckets",))
        for name, low in (
            ("batch_size", 1),
            ("num_blocks", 2),
            ("block_size", 1),
            ("max_num_batched_tokens", 1),
        ):
            value = getattr(self, name)
            if not is_integer(value) or value < low:
                raise ConfigurationError(
                    f"{name} {value!r} must be an integer >= {low}"
                    + (" (block 0 is vLLM's null block)" if name == "num_blocks" else ""),
                    (name,),
                )
        for name, bound, why in (
            ("batch_size", MAX_BATCH_SIZE, BATCH_SIZE_WHY),
            ("num_blocks", MAX_KV_BLOCKS, KV_BLOCKS_WHY),
        ):
            problem = bound_problem(name, getattr(self, name), bound, why)
            if problem is not None:
                raise ConfigurationError(problem, (name,))
        if self.max_num_batched_tokens < self.batch_size:  # vLLM refuses to start so
            raise ConfigurationError(
                f"max_num_batched_tokens {self.max_num_batched_tokens} must be at least "
                f"batch_size (max_num_seqs) {self.batch_size}: every running sequence needs "
                "a token of the step's budget",
                ("max_num_batched_tokens", "batch_size"),
            )
        object.__setattr__(self, "buckets", buckets)

    @property
    def usable_blocks(self) -> int:
        """Blocks that can hold KV: block 0 is the null block."""
        return self.num_blocks - 1

    def padded(self, n: int) -> int:
        """The next capture size holding ``n``; above the largest (or with none) eager."""
        return capture_padded(n, self.buckets)

    @cached_property
    def id(self) -> str:
        """Stable name, e.g. ``vllm:16:512x16:2048`` (max_num_seqs, blocks x block size,
        token budget), ``:1,2,4,8`` appended when capture sizes are set."""
        text = (
            f"vllm:{self.batch_size}:{self.num_blocks}x{self.block_size}"
            f":{self.max_num_batched_tokens}"
        )
        return f"{text}:{','.join(map(str, self.buckets))}" if self.buckets else text

    @classmethod
    def from_id(cls, text: str, name: str = "") -> VllmConfiguration:
        """The configuration an ``id`` names (its inverse: search results, advice, a
        ``--baseline`` option)."""
        match = _VLLM_ID.fullmatch(text)
        if match is None:
            raise ConfigurationError(
                f"configuration id {text!r} is not of the form vllm:16:512x16:2048 "
                "(vllm:max_num_seqs:num_blocks x block_size:max_num_batched_tokens, then "
                ":capture sizes such as :1,2,4,8 when there are any)",
                ("id",),
            )
        sizes = tuple(int(b) for b in match[5].split(",")) if match[5] else ()
        return cls(
            sizes,
            int(match[1]),
            num_blocks=int(match[2]),
            block_size=int(match[3]),
            max_num_batched_tokens=int(match[4]),
            name=name,
        )

    def label(self) -> str:
        """The reports' spelling, e.g. ``16 seqs/512x16 blocks/2048 tok`` (+ capture sizes)."""
        text = (
            f"{self.batch_size} seqs/{self.num_blocks}x{self.block_size} blocks/"
            f"{self.max_num_batched_tokens} tok"
        )
        return f"{text}/{{{','.join(map(str, self.buckets))}}}" if self.buckets else text

    def as_dict(self) -> dict[str, Any]:
        return {
            "buckets": list(self.buckets),
            "batch_size": self.batch_size,
            "num_blocks": self.num_blocks,
            "block_size": self.block_size,
            "max_num_batched_tokens": self.max_num_batched_tokens,
        }

    def tiebreak(self) -> tuple[Any, ...]:
        """Among equal predicted cost prefer the smaller pool (memory), then fewer
        sequences, then the smaller budget, then fewer capture sizes."""
        return (
            self.num_blocks,
            self.batch_size,
            self.max_num_batched_tokens,
            self.n_buckets,
            self.buckets,
        )


SUBSTRATES: dict[str, type[Configuration]] = {
    RblnConfiguration.substrate: RblnConfiguration,
    VllmConfiguration.substrate: VllmConfiguration,
}


def substrate_type(substrate: str) -> type[Configuration]:
    """The configuration type of a substrate (``SUBSTRATES``), or a one-line refusal."""
    kind = SUBSTRATES.get(substrate)
    if kind is None:
        raise ConfigurationError(
            f"substrate {substrate!r}: use one of {', '.join(SUBSTRATES)}", ("substrate",)
        )
    return kind


def knob_names(substrate: str = "rbln") -> tuple[str, ...]:
    """The fields a substrate's configuration is built from, in ``as_dict`` order."""
    return tuple(f.name for f in fields(substrate_type(substrate)) if f.name != "name")


def configuration_from_mapping(
    raw: Mapping[str, Any], substrate: str = "rbln", name: str = ""
) -> Configuration:
    """Rebuild a configuration from its ``as_dict`` mapping (a manifest, a registration,
    a search result, a config file's entry). Keys the substrate does not know are refused;
    an ``id`` key, which search results carry beside the knobs, is ignored, a
    ``substrate`` key (a vLLM run manifest's) names the substrate, and a ``name`` key (a
    run manifest's) names it unless ``name`` is given."""
    substrate = str(raw.get("substrate", substrate))
    kind, known = substrate_type(substrate), knob_names(substrate)
    knobs = {key: value for key, value in raw.items() if key not in ("id", "name", "substrate")}
    unknown = tuple(key for key in knobs if key not in known)
    if unknown:
        raise ConfigurationError(
            f"configuration field '{unknown[0]}' is unknown: {substrate} configurations "
            f"have the fields {', '.join(known)}",
            unknown,
        )
    name = name or str(raw.get("name", ""))
    if "buckets" in knobs:
        knobs["buckets"] = tuple(sorted(_as_int_tuple(knobs["buckets"], "buckets")))
    try:
        return kind(**knobs, name=name)
    except TypeError as exc:  # a missing knob
        raise ConfigurationError(
            f"a {substrate} configuration has the fields {', '.join(known)} ({exc})"
        ) from None


def configuration_in_record(
    raw: Mapping[str, Any], substrate: str = "rbln", name: str = ""
) -> Configuration:
    """The configuration a larger record carries beside other fields (``selected.json``
    holds the pick's knobs with its scores and resource costs): its knobs only, checked
    as ``configuration_from_mapping`` checks them."""
    knobs = {key: raw[key] for key in knob_names(substrate) if key in raw}
    return configuration_from_mapping(knobs, substrate, name)
