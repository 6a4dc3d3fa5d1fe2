"""The HTML report of studies on real serving engines (docs/DESIGN.md §13, §15): the
``reports/report.html`` that `make all-vllm` renders where the paper's RBLN report
(``rearrival.report.render``) is not run.

It composes section files only (``rearrival.report.sections``: each written by its own
stage, e.g. the vLLM study's ``reports/vllm/section.json``), in the order given, under a
header naming the study definition and the backend of every section; it reads nothing
else and computes nothing. A further section (another engine's study) is one more file in
the list its rule passes (rules/common.smk ``engine_section_files``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jinja2

from rearrival.atomic import atomic_write_text
from rearrival.config.study import StudyConfig, tool_table_for
from rearrival.report.sections import section_sequence

TEMPLATE = "engine.html.j2"


def template_environment() -> jinja2.Environment:
    """The report templates, HTML-escaped, failing on any name a template lacks."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader("rearrival.report", "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )


def engine_html(cfg: StudyConfig, sections: Sequence[dict[str, Any]]) -> str:
    """The page: header (study definition, every section's backend), then each section."""
    return (
        template_environment()
        .get_template(TEMPLATE)
        .render(
            config=cfg.source,
            configured_backend=cfg.backend,
            study_seed=cfg.study_seed,
            replicates=cfg.replicates,
            tool_table=tool_table_for(cfg).source,
            backends=list(dict.fromkeys(s["backend"] for s in sections)),
            sections=list(sections),
        )
    )


def write_engine_report(cfg: StudyConfig, section_files: Sequence[Path], html: Path) -> None:
    """``rearrival study engine-report``: the sections' files into one HTML file."""
    atomic_write_text(html, engine_html(cfg, section_sequence(section_files)))
