"""rearrival: tool waiting and re-arrival in compile-time-static LLM serving.

A preregistered experiment pipeline: seeded input plans, a predictor simulator, an
emulated (or real RBLN) measurement substrate, two cost channels, the paper's decision
rules, configuration search and reports.
"""

__version__ = "0.1.0"
