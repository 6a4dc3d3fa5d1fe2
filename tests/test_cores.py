"""The core choice both rule sets share (rearrival.model.simulator.cores; docs/DESIGN.md §4,
§15): "auto" runs the Python core for the first calls of a process, then the compiled one,
and takes the compiled one at once when it is loaded; a compiled core that cannot be
imported is None, with one warning."""

from __future__ import annotations

import warnings

import pytest

from rearrival.model.simulator.cores import CoreChoice


def test_auto_runs_python_for_the_first_calls_then_the_compiled_core() -> None:
    choice = CoreChoice("rearrival.model.simulator.heaps", 3)
    assert [choice.runs_python("auto") for _ in range(5)] == [True, True, True, False, False]
    assert choice.runs_python("python") and not choice.runs_python("compiled")


def test_auto_takes_the_compiled_core_once_it_is_loaded() -> None:
    choice = CoreChoice("rearrival.model.simulator.heaps", 3)
    assert choice.compiled() is not None and choice.compiled().__name__ == choice.name
    assert not choice.runs_python("auto")


def test_an_unimportable_compiled_core_is_none_with_one_warning() -> None:
    choice = CoreChoice("rearrival.model.simulator.no_such_core", 3)
    with pytest.warns(RuntimeWarning, match="no_such_core unavailable"):
        assert choice.compiled() is None
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        assert choice.compiled() is None
    assert again == []  # the import is tried once
