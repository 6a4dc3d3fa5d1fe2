"""The study definition as typed, validated settings (docs/DESIGN.md §10): one frozen model
per section, each field a key holding its default, type, range and description (``keys``),
from which config/schema.yaml is generated (``schema``; ``study``: configurations,
studies, the one reader and the whole definition; ``search``; ``decision``;
``injection``; ``backends``: emulated_http, rbln and vllm; ``capacity``; ``workload``;
``calibration``: profile, model, emulator truth and calibration)."""
