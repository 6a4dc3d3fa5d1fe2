"""Run records (docs/DESIGN.md §6): the one file contract between measurement and decisions.

Every backend (emulated, emulated-http, rbln) writes a run directory through
``write_run`` and every later stage reads it through ``read_run``, so decisions never
know which backend produced a run (docs/DESIGN.md §5). A directory appears under its final
name only when complete: everything is written into a temporary sibling directory,
``manifest.json`` last, and the directory is renamed in one step. A killed writer
therefore leaves a hidden temp directory, never a half run that a decision could use.

Failed or cut-short runs are written too (status ``failed``/``partial`` with a reason),
because the paper keeps its withheld and failed evidence (Section II-D); ``read_run``
refuses them unless the caller asks for incomplete runs explicitly.

The package splits this contract by concern: ``contract`` (files, columns, keys, the
record type), ``manifest`` (filling manifests), ``validate`` (checking tables and JSON),
``write`` and ``read``. Importers use the names re-exported here.
"""

from __future__ import annotations

from rearrival.measure.records.contract import (
    MANIFEST_FILE,
    MANIFEST_KEYS,
    REQUEST_COLUMNS,
    REQUESTS_FILE,
    SERVER_LOG_FILE,
    STEP_COLUMNS,
    STEPS_FILE,
    RunRecord,
    RunRecordError,
)
from rearrival.measure.records.manifest import (
    finish_manifest,
    manifest_template,
    new_run_id,
    software_versions,
    utc_now_iso,
)
from rearrival.measure.records.read import read_run
from rearrival.measure.records.write import write_run

__all__ = [
    "MANIFEST_FILE",
    "MANIFEST_KEYS",
    "REQUESTS_FILE",
    "REQUEST_COLUMNS",
    "SERVER_LOG_FILE",
    "STEPS_FILE",
    "STEP_COLUMNS",
    "RunRecord",
    "RunRecordError",
    "finish_manifest",
    "manifest_template",
    "new_run_id",
    "read_run",
    "software_versions",
    "utc_now_iso",
    "write_run",
]
