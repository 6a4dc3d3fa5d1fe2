"""CLI verbs grouped by area; each module owns its verbs and registers them on the app.

plans: plan, tools build · simulate: simulate · measure: run, channels, emulate-server ·
rejudge: decide --table · compare: compare (a vLLM run against the predictor) ·
prereg: prereg, audit, publish · search: search, advise · capacity: capacity ·
report: tables · rbln: rbln patch/compile · calibrate: calibrate, calibrate-compile ·
study: ``rearrival study <stage>``, one verb per Snakemake rule, and ``study config`` ·
values: the ``--values`` option the stage verbs check
"""

from rearrival.commands import (
    calibrate,
    capacity,
    compare,
    measure,
    plans,
    prereg,
    rbln,
    rejudge,
    report,
    search,
    simulate,
    study,
)

ALL_AREAS = (
    plans.register,
    simulate.register,
    measure.register,
    compare.register,
    rejudge.register,
    prereg.register,
    search.register,
    capacity.register,
    report.register,
    rbln.register,
    study.register,
    calibrate.register,
)
