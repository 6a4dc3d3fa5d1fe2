"""The study definition as typed, validated settings (SPEC 11): studies, configurations,
criteria, backends, and the calibration and model sections."""
