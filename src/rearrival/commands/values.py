"""The ``--values`` option every study-stage verb takes (docs/DESIGN.md §10): the digest of
the config values its rule planned the job with, checked against the study definition the
verb loads (``rearrival.workflow.params``). Left out, as outside the workflow, nothing is
checked."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from rearrival.config.study import StudyConfig

Values = Annotated[
    str | None,
    typer.Option(
        "--values",
        help="sha256 of the config values the workflow planned this job with (its rule "
        "passes it); refused when the study definition now gives other values.",
        hidden=True,  # the workflow's, never a user's (issue 36)
    ),
]


def checked_config(path: Path, stage: str, study: str | None, values: str | None) -> StudyConfig:
    """The study definition at ``path``, refused when its values for ``stage`` (and
    ``study``) are not the ``values`` digest the job was planned with."""
    from rearrival.config.study import load_study_config

    cfg = load_study_config(path)
    if values is not None:  # a workflow job: by hand there is nothing to check, and the
        # digest's imports (the registration and predictions modules) cost a verb run by
        # hand about 0.3 s of its start (issue 36)
        from rearrival.workflow.params import check_values

        check_values(cfg, stage, study, values)
    return cfg
