"""The RBLN predictor's configuration (``sim``, docs/DESIGN.md §4): ``SimConfig`` is the
compiled configuration (``rearrival.model.configuration.RblnConfiguration``: bucket set,
batch_size, KV slots, checked there once) plus the predictor's rule set (the KV ``release``
and the ``dummy_block`` rule) and, for variant (a), the fixed re-arrival times."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rearrival.model.configuration import ConfigurationError, RblnConfiguration
from rearrival.vocabulary import DUMMY_BLOCKS, RELEASES, RULE_SETS


class SimConfigError(ConfigurationError):
    """A simulator configuration that cannot run; the message names the field and the fix.

    ``fields`` names the SimConfig fields at fault, so a caller that set them from its own
    options (the CLI) can name those options."""


def _lead(fields: tuple[str, ...]) -> str:
    names = "/".join(f"'{name}'" for name in fields)
    return f"SimConfig field{'s' if len(fields) > 1 else ''} {names}"


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


@dataclass(frozen=True)
class SimConfig(RblnConfiguration):
    """One configuration (bucket set, batch_size, KV slots) under one predictor rule set.

    Stages build it from a configuration under one of the predictor's rule sets
    (``SimConfig.of(configuration, rules)``); built directly (the public API,
    ``rearrival simulate``) its knobs get the configuration's own checks, and any rule
    combination may be given. ``slots`` defaults to batch_size (eager attention allocates
    one slot per sequence of the batch); after construction it is always an int.
    ``fixed_arrivals`` (variant (a)) is a sequence of one time in seconds per re-arrival
    in (session, round) order, or a mapping from the re-arrival index 0..R-1 (the session
    index for a two-round plan); it is stored as a tuple.
    """

    buckets: tuple[int, ...] = (1, 2, 4, 8)
    batch_size: int = 8
    release: str = "deferred"
    dummy_block: str = "off"
    fixed_arrivals: Mapping[int, float] | Sequence[float] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
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
        object.__setattr__(self, "fixed_arrivals", fixed)

    @classmethod
    def of(
        cls,
        configuration: RblnConfiguration,
        rules: str = "base",
        fixed_arrivals: Sequence[float] | None = None,
    ) -> SimConfig:
        """``configuration`` under one of the predictor's rule sets (``RULE_SETS``: "base"
        the paper's predictor, "dummy" the S9 rule, "stack" the measured stack)."""
        if rules not in RULE_SETS:
            raise ConfigurationError(
                f"rule set {rules!r}: use one of {', '.join(RULE_SETS)}", ("rules",)
            )
        release, dummy_block = RULE_SETS[rules]
        return cls(
            configuration.buckets,
            configuration.batch_size,
            configuration.slots,
            release,
            dummy_block,
            fixed_arrivals,
        )

    @classmethod
    def refused(cls, error: ConfigurationError) -> ConfigurationError:
        return SimConfigError(f"{_lead(error.fields)}: {error}", error.fields)
