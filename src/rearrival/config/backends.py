"""The ``emulated_http`` and ``rbln`` sections: settings of the two backends that run
outside this process (docs/DESIGN.md §5). Their defaults are the one source
(config/schema.yaml states none; tests/test_config_schema.py checks that every field is
a documented key). What hardware compiles and serves, the model's id, maximum sequence
length and devices, is the ``model`` section's (rearrival.config.calibration.ModelSpec),
never repeated here."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EmulatedHttpSettings:
    """The ``emulated_http`` section: wall seconds per emulated second."""

    time_scale: float = 0.25


@dataclass(frozen=True)
class RblnSettings:
    """The ``rbln`` section: where compiled artifacts go and which vllm_rbln serves."""

    artifacts: str = "artifacts"
    site_packages: str | None = None
