"""The one error type of the search area: settings, plans or shard files that cannot be
used (docs/DESIGN.md §12)."""

from __future__ import annotations

from rearrival.errors import RearrivalError


class SearchError(RearrivalError, ValueError):
    """Search settings, plans or shard files that cannot be used; names the file and fix."""
