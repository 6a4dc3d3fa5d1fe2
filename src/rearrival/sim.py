"""Stable import path for the predictor (docs/DESIGN.md §4); the code is
rearrival.model.simulator.rbln (``sim``, ``config``, ``result``)."""

from rearrival.model.simulator.rbln.sim import SimConfig, SimConfigError, SimResult, simulate

__all__ = ["SimConfig", "SimConfigError", "SimResult", "simulate"]
