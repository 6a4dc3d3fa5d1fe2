"""The ``decision`` section: the criteria a study registers before measuring (paper
Sections II-D, IV, V-C; docs/DESIGN.md §9). One type for the config section and the
registered ``criteria.json``, with the schema's key names; its fields are the one source
of their defaults and of what config/schema.yaml says of them (rearrival.config.keys)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from rearrival.config.keys import key
from rearrival.errors import RearrivalError

# criteria.json has named the band ``band`` since the first registration; the registered
# form keeps that key so every registration (and its commit) reads back byte-identical.
REGISTERED_NAMES = {"equivalence_band": "band"}
# The order and keys of criteria.json (field names as registered, then the constants).
REGISTERED_KEYS = (
    "tau_fixed",
    "error_tolerance",
    "band",
    "confirmatory_n",
    "exploratory_n",
    "saturation_width",
    "saturation_confidence",
    "bootstrap_resamples",
    "rule_version",
)


class DecisionError(RearrivalError, ValueError):
    """Criteria or inputs a decision cannot be made from; names the file/row/column and
    the fix."""


@dataclass(frozen=True)
class DecisionCriteria:
    """The preregistered thresholds; committed before measurement."""

    confirmatory_n: tuple[int, ...] = key(
        (6, 8), description="N values judged pass/fail.", items={"minimum": 1}
    )
    exploratory_n: tuple[int, ...] = key(
        (10,), description="N values with errors reported but no verdict.", items={"minimum": 1}
    )
    tau_fixed: float = key(
        0.02, description="Channel-agreement tolerance of the initial rule.", exclusiveMinimum=0
    )
    error_tolerance: float = key(
        0.03, description="Largest |R_obs - R_pred| that passes.", exclusiveMinimum=0
    )
    equivalence_band: tuple[float, float] = key(
        (0.98, 1.02),
        description="Ratios inside this band count as 'no change' for the direction rule.",
    )
    saturation_width: float = key(
        0.04, description="Largest bootstrap CI width for 'saturated'.", exclusiveMinimum=0
    )
    bootstrap_resamples: int = key(
        10000,
        description="Bootstrap resamples for the saturation CI (registered with the criteria).",
        minimum=100,
    )
    # fixed by the paper, not settings: registered beside the criteria so a decision
    # can tell which rules judged it
    saturation_confidence: ClassVar[float] = 0.95
    rule_version: ClassVar[str] = "paper-IID-IV-VC/1"

    def __post_init__(self) -> None:
        band = tuple(float(x) for x in self.equivalence_band)
        object.__setattr__(self, "equivalence_band", band)
        object.__setattr__(self, "confirmatory_n", tuple(int(x) for x in self.confirmatory_n))
        object.__setattr__(self, "exploratory_n", tuple(int(x) for x in self.exploratory_n))
        for name in ("tau_fixed", "error_tolerance", "saturation_width"):
            if not getattr(self, name) > 0:
                raise DecisionError(f"decision.{name} must be > 0")
        if len(band) != 2 or not band[0] < 1.0 < band[1]:
            raise DecisionError("decision.equivalence_band must be [low, high] with low < 1 < high")
        if set(self.confirmatory_n) & set(self.exploratory_n):
            raise DecisionError(
                "decision: an N cannot be both confirmatory and exploratory "
                "(confirmatory_n, exploratory_n)"
            )

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> DecisionCriteria:
        """The config section (schema-valid); keys left out take the defaults."""
        values = dict(raw or {})
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})

    def to_dict(self) -> dict[str, Any]:
        """The registered form written to preregistration/<study>/criteria.json (lists
        for tuples, the registered key names, the paper's fixed constants)."""
        values = {REGISTERED_NAMES.get(f.name, f.name): getattr(self, f.name) for f in fields(self)}
        values |= {
            "saturation_confidence": self.saturation_confidence,
            "rule_version": self.rule_version,
        }
        return {
            key: list(values[key]) if isinstance(values[key], tuple) else values[key]
            for key in REGISTERED_KEYS
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<criteria>") -> DecisionCriteria:
        """Criteria read back from their registered form; refused when a key is missing
        or unknown, or when they were registered under other fixed rules."""
        unknown = [key for key in data if key not in REGISTERED_KEYS]
        missing = [key for key in REGISTERED_KEYS if key not in data]
        if unknown or missing:
            what = f"unknown key '{unknown[0]}'" if unknown else f"missing key '{missing[0]}'"
            raise DecisionError(
                f"{source}: {what}; decision criteria have exactly {', '.join(REGISTERED_KEYS)}"
            )
        for constant in ("saturation_confidence", "rule_version"):
            if data[constant] != getattr(cls, constant):
                raise DecisionError(
                    f"{source}: {constant} {data[constant]!r} is not this version's "
                    f"{getattr(cls, constant)!r}; judge it with the rearrival that registered it"
                )
        names = {registered: name for name, registered in REGISTERED_NAMES.items()}
        values = {
            names.get(key, key): tuple(v) if isinstance(v, list) else v
            for key, v in data.items()
            if key not in ("saturation_confidence", "rule_version")
        }
        try:
            return cls(**values)
        except (TypeError, ValueError) as exc:
            raise DecisionError(f"{source}: {exc}") from None
