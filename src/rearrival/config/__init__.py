"""The study definition as typed, validated settings (docs/DESIGN.md §10): one frozen model
per section of config/schema.yaml, each holding its section's defaults (``study``:
configurations, studies and the whole definition; ``search``; ``decision``; ``injection``;
``backends``: emulated_http and rbln; ``workload``; ``calibration``: profile, model,
emulator truth and calibration)."""
