"""The study definition as typed, validated settings (docs/DESIGN.md §10): studies, configurations,
criteria, backends, and the calibration and model sections."""
