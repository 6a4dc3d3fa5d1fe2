"""The predictor simulator (paper Section IV; docs/DESIGN.md §4, §15): one subpackage per
rule set, laid out the same way (``rbln``, the paper's stack; ``vllm``).

Import from the modules; the stable public path is ``rearrival.sim``."""
