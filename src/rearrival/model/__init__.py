"""The predictor and its inputs: input plans and their generator, the tool-latency mixture,
the measured profile and its calibration fits, KV slots, device memory, and the simulator
with its compiled core and plain reference (paper Sections II-C, III-B, IV; docs/DESIGN.md §2-4)."""
