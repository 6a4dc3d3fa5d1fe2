"""The RBLN predictor's configuration and rule variant (``sim``, docs/DESIGN.md §4):
``SimConfig`` validates one configuration (bucket set, batch_size, KV slots) and simulator
variant with the checks of ``rearrival.model.buckets``."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rearrival.errors import RearrivalError
from rearrival.model.buckets import bucket_set_problem, default_slots, int_sizes, slots_problem
from rearrival.vocabulary import DUMMY_BLOCKS, RELEASES


class SimConfigError(RearrivalError, ValueError):
    """A simulator configuration that cannot run; the message names the field and the fix.

    ``fields`` names the SimConfig fields at fault, so a caller that set them from its own
    options (the CLI) can name those options."""

    def __init__(self, message: str, fields: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.fields = fields


def _fixed_times(value: Mapping[int, float] | Sequence[float]) -> tuple[float, ...]:
    if isinstance(value, Mapping):
        keys = sorted(value)
        if keys != list(range(len(keys))):
            raise SimConfigError(
                "SimConfig field 'fixed_arrivals': mapping keys must be the re-arrival "
                "indices 0..R-1 in (session, round) order (session indices for a "
                "two-round plan)"
            )
        value = [value[k] for k in keys]
    try:
        times = tuple(float(v) for v in value)
    except (TypeError, ValueError) as exc:
        raise SimConfigError(
            f"SimConfig field 'fixed_arrivals': give one time in seconds per re-arrival ({exc})"
        ) from exc
    if not all(math.isfinite(v) and v >= 0 for v in times):
        raise SimConfigError(
            "SimConfig field 'fixed_arrivals': every time must be a finite number of seconds >= 0"
        )
    return times


_VALID_GRIDS: set[tuple[tuple[int, ...], int]] = set()  # (buckets, batch_size) checked


@dataclass(frozen=True)
class SimConfig:
    """One configuration (bucket set, batch_size, KV slots) plus the simulator variant.

    Stages build it from the one compiled-configuration type
    (``RblnConfiguration.sim_config(rules)``, rearrival.model.configuration); built
    directly (the public API, ``rearrival simulate``) it checks its knobs with the same
    functions (rearrival.model.buckets). ``slots`` defaults to batch_size (eager attention
    allocates one slot per sequence of the batch); after construction it is always an
    int. ``fixed_arrivals`` (variant (a)) is a sequence of one time in seconds per
    re-arrival in (session, round) order, or a mapping from the re-arrival index 0..R-1
    (the session index for a two-round plan); it is stored as a tuple.
    """

    buckets: tuple[int, ...] = (1, 2, 4, 8)
    batch_size: int = 8
    slots: int | None = None
    release: str = "deferred"
    dummy_block: str = "off"
    fixed_arrivals: Mapping[int, float] | Sequence[float] | None = None

    def __post_init__(self) -> None:
        buckets = int_sizes(self.buckets)
        if buckets is None:
            raise SimConfigError(
                "SimConfig field 'buckets' must be a list of integers such as 1,2,4,8", ("buckets",)
            )
        key = (buckets, self.batch_size)
        if (
            key not in _VALID_GRIDS
            or type(self.batch_size) is not int
            or not all(type(b) is int for b in buckets)
        ):  # bool equals int in the key
            problem = bucket_set_problem(buckets, self.batch_size)
            if problem is not None:
                raise SimConfigError(
                    f"SimConfig fields 'buckets'/'batch_size': {problem}", ("buckets", "batch_size")
                )
            if len(_VALID_GRIDS) < 100_000:
                _VALID_GRIDS.add(key)
        slots = default_slots(self.slots, self.batch_size)
        problem = slots_problem(slots)
        if problem is not None:
            raise SimConfigError(f"SimConfig field {problem}", ("slots",))
        if self.release not in RELEASES:
            raise SimConfigError(
                f"SimConfig field 'release' {self.release!r}: use one of {', '.join(RELEASES)}",
                ("release",),
            )
        if self.dummy_block not in DUMMY_BLOCKS:
            raise SimConfigError(
                f"SimConfig field 'dummy_block' {self.dummy_block!r}: "
                f"use one of {', '.join(DUMMY_BLOCKS)}",
                ("dummy_block",),
            )
        fixed = None if self.fixed_arrivals is None else _fixed_times(self.fixed_arrivals)
        object.__setattr__(self, "buckets", buckets)
        object.__setattr__(self, "slots", slots)
        object.__setattr__(self, "fixed_arrivals", fixed)
