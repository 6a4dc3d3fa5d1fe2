"""What a step, a prefill and a KV slot cost (docs/DESIGN.md §3; paper Sections II-A, IV,
V-D, Tables VII, XIV, XV): the measured profile (``profile``), the calibration fits that
produce one (``fits``) and the device-memory budget (``memory``).

Import from the modules; this package re-exports nothing."""
