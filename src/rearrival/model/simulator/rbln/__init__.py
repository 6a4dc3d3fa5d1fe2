"""The predictor's RBLN rule sets (the paper's stack, paper Section IV; docs/DESIGN.md §4),
laid out as ``rearrival.model.simulator.vllm`` is: ``sim.simulate`` is the entry and picks
the core; ``config`` (SimConfig), ``result`` (SimResult and its records), ``inputs`` (the
per-plan and per-configuration tables the cores read, cached), ``slots`` (KV slots with
FIFO eviction), ``reference`` (step by step, tests only), ``event`` (the Python event
core), ``core`` (the compiled core) and ``engine`` (the driven engine a fleet runs,
docs/DESIGN.md §16).

Import from the modules; this package re-exports nothing (the stable public path is
``rearrival.sim``)."""
