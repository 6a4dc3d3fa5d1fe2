"""CLI verbs grouped by area; each module owns its verbs and registers them on the app.

core: plan, simulate, tools build · measure: run, channels, decide, emulate-server ·
pipeline: audit, prereg · search: search, advise · report: tables · rbln: rbln patch
"""

from rearrival.commands import core, measure, pipeline, rbln, report, search

ALL_AREAS = (core.register, measure.register, pipeline.register, search.register,
             report.register, rbln.register)
