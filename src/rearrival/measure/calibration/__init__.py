"""The calibration stage: measure the cost model on the configured backend (docs/DESIGN.md §3,
"Calibration"; paper II-B, III-C, IV, Tables VII and XV).

The paper's constants came from controlled measurements; this module makes those
measurements a stage of the workflow on whatever backend the study runs on:

- decode step cost: steady decode with exactly n running requests (one plan per n: n
  identical sessions, short prompts, long generations, no tool wait) on calibration
  artifacts whose bucket sets cover every bucket a study or the search can select.
  Per-step durations are the gaps between consecutive ``[BUCKET]`` lines' monotonic
  timestamps inside the steady window (after every session is admitted, before the
  first completion), minus ``warmup_steps``;
- prefill: one "clock" session decodes alone for the whole run while probe sessions
  come back, one at a time (staggered tool waits), with a follow-up whose prompt shares
  no cached block, so its q tokens are all computed. Prefill and decode never share a
  step (II-B), so the gap between the two decode lines around a probe's prefill is T(q)
  plus one decode step: T(q) = gap - the median step gap. This reads server-side time from
  the step log alone, so it works over HTTP and on hardware, where requests carry no
  prefill time. Probe sizes are the studies' prompt lengths and re-arrival remainders;
- reuse: sessions prefill P tokens and come back at once with P + 1 + appended tokens
  (at most half the slots used, so every prefix survives); each follow-up must report
  floor(min(P, L-1)/128)*128 cached tokens.

Every plan runs through the backends dispatcher
(``rearrival.measure.backends.run_backend``), so ``emulated``, ``emulated-http`` and
``rbln`` measure the same plans and write the same run records. ``rearrival.model.cost.fits``
turns the records into numbers; the profile document writes them in the schema of
``data/profile_rbln_ca25.yaml`` with CIs, sample counts, backend, run ids and a
measured/interpolated mark on every bucket.

One module per concern:

- :mod:`.design`: the measurement plans (which buckets and counts, probe sizes, waits).
- :mod:`.parse`: step-log windows and run records back into sample tables.
- :mod:`.drive`: run every plan through the backends, fit, write the samples.
- :mod:`.document`: the calibrated profile document and its YAML file.
- :mod:`.rbln_compile`: compile the calibration artifacts on the RBLN stack.

Import from the modules; this package re-exports nothing.
"""
