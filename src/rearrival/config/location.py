"""Where a verb reads the study definition when it is given no ``--config``: the one
default, relative to the directory the verb runs in (the repository root, as for the
workflow), named by every verb that reads a config."""

from __future__ import annotations

from pathlib import Path

DEFAULT_CONFIG = Path("config/config.yaml")
