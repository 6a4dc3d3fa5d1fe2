"""The predictor and its inputs, one subpackage each: ``plans`` (input plans, their generator,
the tool-latency mixture, trace importers), ``cost`` (the measured profile, its calibration
fits, device memory) and ``simulator`` (KV slots, the simulator, its compiled core and plain
reference); paper Sections II-C, III-B, IV; docs/DESIGN.md §2-4."""
