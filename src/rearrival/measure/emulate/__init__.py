"""The ``emulated`` measurement backend: a virtual-time twin of the measured RBLN stack.

docs/DESIGN.md §5, paper Sections II-III. The predictor (``rearrival.model.simulator.rbln.sim``) is
validated against runs of this backend when no hardware is attached, so the twin is deliberately
richer than the predictor: it follows the measured stack's scheduler rules (immediate
slot release and the dummy padding block, docs/DESIGN.md §4 variants) rather than the
predictor's base rules, uses a true f(b) that is not the predictor's linear
interpolation, adds log-normal step and prefill noise, client send jitter and
turnaround, and per-request HTTP/scheduler latency that only channel B can see. Every
value comes from ``data/emulator_truth.yaml`` with its reason.

One module per seam, so the HTTP server (``rearrival emulate-server``) can drive the same
engine from a real clock:

- :mod:`.truth`: the truth file and the true costs f(b) and T(q).
- :mod:`.engine`: the server — waiting queue, admission, KV slots with FIFO eviction,
  exclusive prefill/decode steps and their true durations, advanced one step at a time.
- :mod:`.driver`: the in-process client and clock (:func:`~.driver.run_emulated`).
- :mod:`.frames`: what the client recorded as the run records of docs/DESIGN.md §6.
- :mod:`.injection`: the prefill-injection study (:func:`~.injection.run_injection`).
- :mod:`.server`: the same engine behind a loopback OpenAI-compatible HTTP server
  (``rearrival emulate-server``, the ``emulated-http`` backend), with :mod:`.tokens`
  (the emulated model's vocabulary and the tokenisation of chat text) and
  :mod:`.request_fields` (which request fields it uses, accepts or refuses).

Import from the modules; this package re-exports nothing.
"""
