"""Fleets of replicas behind a router (docs/DESIGN.md §16; docs/DESIGN.md §16).

``engine`` states what a fleet needs of an engine of either rule set; ``loop`` is the one
event loop of docs/DESIGN.md §16's order; ``routers`` one small policy per module behind a registry;
``records`` the one predicted-request record both substrates share; ``latency`` the
per-request latencies, their percentiles and SLO attainment, computed once from those
records; ``simulate`` the entry point, ``simulate_fleet``.

Import from the modules."""
