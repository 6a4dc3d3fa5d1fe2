"""CLI verbs grouped by area; each module owns its verbs and registers them on the app.

plans: plan, tools build · simulate: simulate · measure: run, channels, emulate-server ·
decide: decide · pipeline: audit, prereg · search: search, advise · report: tables ·
rbln: rbln patch/compile · calibrate: calibrate,
calibrate-compile · study: the pipeline stages the Snakefile calls
"""

from rearrival.commands import (
    calibrate,
    decide,
    measure,
    pipeline,
    plans,
    rbln,
    report,
    search,
    simulate,
    study,
)

ALL_AREAS = (
    plans.register,
    simulate.register,
    measure.register,
    decide.register,
    pipeline.register,
    search.register,
    report.register,
    rbln.register,
    study.register,
    calibrate.register,
)
