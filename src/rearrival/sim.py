"""Stable import path for the predictor (SPEC 5); the code lives in rearrival.model.sim."""

from rearrival.model.sim import SimConfig, SimConfigError, SimResult, simulate

__all__ = ["SimConfig", "SimConfigError", "SimResult", "simulate"]
