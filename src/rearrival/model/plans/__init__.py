"""Input plans (paper Section II-C; docs/DESIGN.md §2): the plan types and files (``plan``),
the seeded generator (``plangen``), the tool-latency mixture (``tools``) and the importers
of real agent traces (``trace_plans`` shared by ``tracelab_import`` and ``otel_import``).

Import from the modules; the stable public path is ``rearrival.plans``."""
