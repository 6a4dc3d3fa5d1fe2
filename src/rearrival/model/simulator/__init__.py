"""The predictor simulator (paper Section IV; docs/DESIGN.md §4): the entry point and core
choice (``sim``), its config and result types (``sim_types``), the per-plan tables the
cores read (``sim_inputs``), KV slots with FIFO eviction (``kvslots``), the Python event
loop (``sim_event``), the compiled core (``simcore``) and the step-by-step reference
(``sim_reference``).

Import from the modules; the stable public path is ``rearrival.sim``."""
