"""What the ``search`` and ``advise`` verbs both do with their options before the library
runs: the profile they predict with, the integer lists and vLLM knobs they parse, and the
garbage-collector setting of a short-lived command. A module of its own so that each verb
module holds one verb area and neither imports the other's private helpers.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from rearrival.commands import search_vllm

if TYPE_CHECKING:
    from rearrival.commands.profile import ProfileChoice

# ctx.obj key set on the ``rearrival study search`` group: a workflow stage, whose profile
# is the one its rule passes (a missing calibration is an error, never the published one).
STAGE = "workflow_stage"


def no_collection_passes() -> None:
    """Turn off the cyclic garbage collector for this short-lived command: numpy, pandas
    and numba leave about a million objects that every full collection walks again
    (0.2-0.3 s of a 1.7 s paper-space search); the search frees its memory by reference
    counting and creates no large cyclic garbage."""
    import gc

    gc.disable()


def chosen_profile(cfg, path: Path | None, ctx: typer.Context | None = None) -> ProfileChoice:
    """The profile a search or advice predicts with, checked against the config's model:
    in a workflow stage --profile, else the config's choice (a missing file is an error);
    run by hand, the rule of ``rearrival.commands.profile``."""
    from dataclasses import replace

    from rearrival.commands.profile import ProfileChoice, choose_profile

    given = None if path is None else str(path)
    if ((ctx.obj if ctx is not None else None) or {}).get(STAGE):
        chosen = cfg.measurement if given is None else replace(cfg.measurement, profile=given)
        return ProfileChoice(chosen.prediction_profile(), "", stage=True)
    return choose_profile(cfg.measurement, given)


def int_list(option: str, text: str | None) -> tuple[int, ...] | None:
    """The sorted distinct integers of ``option``'s comma-separated ``text`` (None: not
    given); an unreadable or empty list is refused naming the option."""
    from rearrival.config.search import SearchError

    if text is None:
        return None
    try:
        values = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError as exc:
        raise SearchError(
            f"option {option} {text!r}: give comma-separated integers, e.g. 16,32,48"
        ) from exc
    if not values:
        raise SearchError(f"option {option} is empty: give comma-separated integers")
    return values


def vllm_knobs(substrate: str, rbln_axes: dict[str, object], **knobs: str | None) -> dict:
    """The vLLM knobs given (parsed by ``search_vllm.given_options``), after refusing
    the options of the other substrate: search and advise take the same ones alike."""
    given = search_vllm.given_options(int_list, **knobs)
    search_vllm.check_substrate(substrate, {**given, **rbln_axes})
    return given
