"""Measurement: the backends (emulated twin, its HTTP server, vllm-rbln on RBLN devices),
the replay client, the observation patch and step log, run records, and the calibration
driver (paper Sections II-B, III-C; docs/DESIGN.md §5-6)."""
