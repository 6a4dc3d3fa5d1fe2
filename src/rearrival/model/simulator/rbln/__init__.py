"""The RBLN rule sets (the paper's stack, docs/DESIGN.md §4) as a driven engine for fleets
(``engine``); the single-engine cores are ``rearrival.model.simulator.sim`` and its
modules."""
