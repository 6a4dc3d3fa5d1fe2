"""The predictor simulator (paper Section IV; docs/DESIGN.md §4, §15): one subpackage per
rule set, laid out alike (``rbln``, the paper's stack; ``vllm``), and what both share:
``plan_arrays`` (a plan as per-request lists), ``heaps`` (the compiled cores' heaps) and
``cores`` (the choice between the Python and the compiled core).

Import from the modules; the stable public path is ``rearrival.sim``."""
