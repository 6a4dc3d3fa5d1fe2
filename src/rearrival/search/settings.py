"""The command-line overrides of a search's settings (``rearrival search --n`` and the
like, paper V-A); the settings themselves are ``rearrival.config.search.SearchSettings``."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rearrival.config.search import SearchSettings


def override_settings(settings: SearchSettings, **changes: Any) -> SearchSettings:
    """Settings with command-line values (``--n``, ``--batch-sizes``, ``--max-buckets``,
    ``--memory-filter``) in place of the config's; a new N set keeps only the restricted
    N sets that lie inside it."""
    if not changes:
        return settings
    if "n" in changes:
        keep = set(changes["n"])
        changes["restricted_n"] = tuple(s for s in settings.restricted_n if set(s) <= keep)
    return replace(settings, **changes)
