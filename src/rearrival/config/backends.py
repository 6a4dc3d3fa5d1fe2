"""The ``emulated_http`` and ``rbln`` sections: settings of the two backends that run
outside this process (docs/DESIGN.md §5). Their defaults are the one source
(config/schema.yaml documents the same values, tests/test_config_schema.py checks that
they agree)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EmulatedHttpSettings:
    """The ``emulated_http`` section: wall seconds per emulated second."""

    time_scale: float = 0.25


@dataclass(frozen=True)
class RblnSettings:
    """The ``rbln`` section: what real hardware compiles and where artifacts go."""

    model: str = "Qwen/Qwen3-4B"
    max_seq_len: int = 8192
    num_devices: int = 4
    artifacts: str = "artifacts"
    site_packages: str | None = None
