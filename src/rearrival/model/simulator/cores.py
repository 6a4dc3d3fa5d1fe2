"""Which core runs a simulation, one rule for both rule sets (docs/DESIGN.md §4, §15).

Each rule set has a Python core and a compiled (numba) core that give the same bits
(``tests/test_sim_equivalence.py``, ``tests/test_vllm_cores.py``); only the speed differs.
"python" and "compiled" ask for one. "auto" runs the Python core for a process's first
calls, because loading numba and the cached machine code costs more than a one-off
``rearrival simulate`` spends simulating (about 1.2 s measured for RBLN), then the compiled
one; once the compiled core is loaded, "auto" always takes it. Each rule set keeps its own
count of first calls (``rbln.sim.PYTHON_FIRST_CALLS``, ``vllm.sim.PYTHON_FIRST_CALLS``).
When numba cannot be imported the compiled core is None, with one warning, and the
callers run the Python core.
"""

from __future__ import annotations

import importlib
import warnings
from types import ModuleType

CORES = ("auto", "compiled", "python")


class CoreChoice:
    """The core choice of one rule set: its compiled module (imported on first use) and
    how many calls run the Python core under "auto" before it."""

    __slots__ = ("calls", "first_calls", "loaded", "module", "name")

    def __init__(self, name: str, first_calls: int) -> None:
        self.name = name  # the compiled core's module
        self.first_calls = first_calls
        self.calls = 0  # calls the Python core ran so far
        self.loaded = False  # the compiled module's import was tried
        self.module: ModuleType | None = None

    def runs_python(self, core: str) -> bool:
        """Whether this call runs the Python core: ``core`` is "python", or "auto" while
        the compiled core is not loaded and fewer than ``first_calls`` calls ran."""
        if core == "python" or (
            core == "auto" and not self.loaded and self.calls < self.first_calls
        ):
            self.calls += 1
            return True
        return False

    def compiled(self) -> ModuleType | None:
        """The compiled core's module, or None (with one warning) when numba cannot be
        imported."""
        if not self.loaded:
            self.loaded = True
            try:
                self.module = importlib.import_module(self.name)
            except ImportError as exc:  # e.g. a numpy that numba does not support yet
                warnings.warn(
                    f"compiled simulator core {self.name} unavailable ({exc}); running the "
                    "Python core (same results, about 20x slower)",
                    RuntimeWarning,
                    stacklevel=3,
                )
        return self.module
