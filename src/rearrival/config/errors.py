"""The error every study-definition check raises (docs/DESIGN.md §10)."""

from __future__ import annotations

from rearrival.errors import RearrivalError


class StudyConfigError(RearrivalError):
    """The study definition is inconsistent; the message names the key and the fix."""
