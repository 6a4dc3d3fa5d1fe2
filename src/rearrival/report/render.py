"""The report stage (docs/DESIGN.md §13): every table and figure from this run's results.

``build_report`` reads the results tree only (never reruns anything), writes each table
as CSV, Markdown and LaTeX under ``<out>/tables/``, each figure as SVG under
``<out>/figures/``, one self-contained ``<out>/report.html`` (figures inline) and
``<out>/tables/index.json`` listing what was written. Every write is atomic, and the same
results give the same bytes.

The report states at the top which backend produced the runs and which profile every
prediction and channel A used, with its sha256 checked against each study's
registration, then opens with the scorecard of the paper's findings
(``rearrival.report.scorecard``), judged with that profile and, as an exploratory second
evaluation, with the other one (the exploratory stages' tables under
``results/exploratory/<profile>/``), also written as ``<out>/tables/scorecard.csv`` and
``.md``. Numbers from the emulated
substrate are described as such and never as hardware measurements (docs/DESIGN.md §5: every
report labels its backend). The "Reading the results" section is generated from this
run's numbers in the paper's manner; withheld and failed verdicts are stated plainly.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rearrival.atomic import atomic_write_json, atomic_write_text
from rearrival.config.study import StudyConfig, tool_table_for
from rearrival.prereg.registration import PROFILE_FILE
from rearrival.report.agents import build_agent_figures, reading_agents
from rearrival.report.capacity_section import CapacitySection, capacity_section
from rearrival.report.engine import template_environment
from rearrival.report.figure_model import Figure
from rearrival.report.figures import build_figures
from rearrival.report.profiles import ProfileChoice, name_of_sha, other_choice
from rearrival.report.results import Results
from rearrival.report.scorecard import (
    Scorecard,
    backend_expectation,
    evidence,
    score,
    scorecard_csv,
    scorecard_markdown,
    with_other_profile,
    without_other_profile,
)
from rearrival.report.table_model import (
    Table,
    display,
    table_context,
    table_csv,
    table_latex,
    table_markdown,
)
from rearrival.report.tables import build_tables
from rearrival.vocabulary import RBLN

TEMPLATE = "report.html.j2"


@dataclass(frozen=True)
class Provenance:
    """What the header states: backend, tool table, software, prereg commits."""

    backends: tuple[str, ...]
    configured_backend: str
    tool_table: str
    software: dict[str, str]
    software_from: str | None
    prereg: tuple[dict[str, Any], ...]
    profile: ProfileChoice
    other_profile: ProfileChoice | None = None

    @property
    def profile_mismatches(self) -> list[str]:
        """Registered studies whose committed profile is not the one the config names."""
        return [
            p["study"]
            for p in self.prereg
            if p["commit"] and p["profile_sha256"] not in (None, self.profile.sha256)
        ]

    @property
    def emulated(self) -> bool:
        return any(b != RBLN for b in self.backends) or (
            not self.backends and self.configured_backend != RBLN
        )

    @property
    def hardware(self) -> bool:
        return RBLN in self.backends


def provenance(res: Results) -> Provenance:
    software, software_from = {}, None
    frame = res.all_channels()
    if not frame.empty:
        complete = frame[frame["status"] == "complete"].sort_values("run_id")
        for run_dir, run_id in zip(complete["run_dir"], complete["run_id"], strict=True):
            manifest = res.run_path(run_dir) / "manifest.json"
            if manifest.exists():
                software = dict(sorted(json.loads(manifest.read_text())["software"].items()))
                software_from = run_id
                break
    other = other_choice(res.cfg, res.root)
    known = [c for c in (res.profile, other) if c is not None]
    prereg = []
    for name in res.cfg.studies:
        record = res.prereg(name) or {}
        # the sha256 of the profile file committed beside the study's predictions
        sha = record.get("files", {}).get(f"preregistration/{name}/{PROFILE_FILE}")
        prereg.append(
            {
                "study": name,
                "commit": record.get("commit"),
                "committed_at": record.get("committed_at"),
                "registrations": len(record.get("history", [])),
                "profile": name_of_sha(sha, known),
                "profile_sha256": sha,
            }
        )
    return Provenance(
        tuple(res.backends()),
        res.cfg.backend,
        tool_table_for(res.cfg).source,
        software,
        software_from,
        tuple(prereg),
        res.profile,
        other,
    )


# --- reading the results ----------------------------------------------------------------


def _rows(table: Table, part: int = 0) -> list[dict[str, Any]]:
    return list(table.parts[part].rows) if len(table.parts) > part else []


def _f(value: Any, digits: int = 4) -> str:
    return display(value, f"f{digits}") or "n/a"


def _pct(value: Any) -> str:
    return display(value, "pct2") or "n/a"


def reading_backend(prov: Provenance) -> str:
    if prov.hardware and not prov.emulated:
        return (
            "Every run in this report was measured on real hardware (backend rbln); "
            "channel A prices the logged steps with the measured profile."
        )
    names = ", ".join(prov.backends) or f"{prov.configured_backend} (configured; no runs yet)"
    return (
        f"Every run in this report comes from the emulated substrate (backend {names}), "
        "a virtual-time digital twin of the measured stack. These numbers are not "
        "hardware measurements; they show what the pipeline computes and decides, and "
        "how the emulated mechanisms behave."
    )


def reading_slots(table: Table) -> list[str]:
    out = []
    for part in table.parts:
        by_key: dict[tuple[int, str], list[dict[str, Any]]] = {}
        for row in part.rows:
            by_key.setdefault((row["n"], row["variant"]), []).append(row)
        for (n, variant), rows in by_key.items():
            base, others = rows[0], rows[1:]
            text = (
                f"Study {base['study']}, N={n} ({variant}): the baseline "
                f"{base['label']} reused {base['reuse_hits']} of {base['re_arrivals']} "
                "re-arrivals"
            )
            for row in others:
                delta = row.get("delta_rearrival_tokens")
                text += (
                    f"; {row['configuration']} {row['label']} reused {row['reuse_hits']} "
                    f"of {row['re_arrivals']}"
                )
                if delta is not None:
                    text += (
                        f", re-arrival prefill computation changed by {delta:+,} tokens, "
                        f"the prefill component of channel A was "
                        f"{_pct(row.get('prefill_ratio'))} of the baseline's and the "
                        f"decode component {_pct(row.get('decode_ratio'))} (channel A "
                        f"ratio {_f(row.get('a_ratio'))})"
                    )
            out.append(text + ".")
    return out


def reading_grid(table: Table) -> list[str]:
    out = []
    for part in table.parts:
        pieces = [
            f"{r['label']} {r['variant']}: padding {_f(r['padding_ratio'], 3)}, "
            f"{r['decode_steps']:,} decode steps, reuse {r['reuse']}"
            for r in part.rows
        ]
        if pieces:
            out.append(
                f"Study {part.rows[0]['study']} (N={part.rows[0]['n']}): " + "; ".join(pieces) + "."
            )
    return out


def reading_mechanisms(table: Table) -> list[str]:
    out = []
    for part in table.parts:
        by_n: dict[int, list[dict[str, Any]]] = {}
        for row in part.rows:
            by_n.setdefault(row["n"], []).append(row)
        pieces = [
            ", ".join(f"{r['variant']} {r['reuse']}" for r in rows) + f" at N={n}"
            for n, rows in by_n.items()
        ]
        if pieces:
            out.append(
                f"Study {part.rows[0]['study']}, re-arrival reuse: " + "; ".join(pieces) + "."
            )
    return out


def reading_validation(ix: Table, xii: Table) -> list[str]:
    out = []
    savings = {(r["study"], r["n"], r["comparison"]): r for r in _rows(xii)}
    for row in _rows(ix):
        saving = savings.get((row["study"], row["n"], row["comparison"]), {})
        text = (
            f"{row['stage'].capitalize()} ({row['study']}), N={row['n']}, "
            f"{row['comparison']}: predicted ratio {_f(row.get('ratio_pred'))}, observed "
            f"{_f(row.get('ratio_obs_a'))} on channel A (saving "
            f"{_pct(saving.get('saving_a'))}), error {_f(row.get('error'))}, channel "
            f"difference {_f(row.get('channel_diff'))} against tau "
            f"{_f(row.get('tau'))}: verdict {str(row.get('verdict')).upper()}"
        )
        if row.get("verdict_fixed"):
            text += f" (under the initial fixed tolerance: {row['verdict_fixed']})"
        if row.get("note"):
            text += f"; {row['note']}"
        out.append(text + ".")
    withheld = [r for r in _rows(ix) if r.get("verdict") == "withheld"]
    failed = [r for r in _rows(ix) if r.get("verdict") == "fail"]
    if withheld:
        out.append(
            f"{len(withheld)} preregistered comparison(s) were WITHHELD because the "
            "two channels disagreed beyond tau (or runs were missing); they are kept "
            "and not counted as passes."
        )
    if failed:
        out.append(f"{len(failed)} preregistered comparison(s) FAILED the confirmatory criteria.")
    if _rows(ix) and not withheld and not failed:
        out.append("No preregistered comparison was withheld or failed.")
    return out


def reading_saturation(table: Table) -> list[str]:
    return [
        f"Saturation, {r['comparison']}: median ratio {_f(r.get('median'))}, 95% CI "
        f"[{_f(r.get('ci_low'))}, {_f(r.get('ci_high'))}] over {r.get('comparisons')} "
        f"comparisons: {r.get('verdict')}."
        for r in _rows(table, 1)
    ]


def reading_search(res: Results) -> list[str]:
    summary = res.search_summary()
    if summary is None:
        return ["The configuration search has not produced results/search/summary.json yet."]
    selected = summary.get("selected", {})
    text = (
        f"The search over {summary.get('candidates', {}).get('searched', 'n/a')} candidates "
        f"selected batch_size {selected.get('batch_size')} with buckets "
        f"{{{','.join(map(str, selected.get('buckets', [])))}}}: predicted score "
        f"{_f(selected.get('search_score'))} on the search inputs and "
        f"{_f(summary.get('evaluation_score'))} on the seed-separated evaluation inputs "
        "(simulator predictions, not measurements)."
    )
    if summary.get("mean_ratio_changes_selection"):
        text += " The mean-of-ratios score would have selected a different configuration."
    else:
        text += " The mean-of-ratios score selects the same configuration."
    return [text]


def reading_repeats(table: Table, tau: float) -> list[str]:
    rows = _rows(table)
    if not rows:
        return []
    worst = max(r["channel_diff"] for r in rows)
    spread = max(r["a_deviation"] for r in rows)
    return [
        f"No-treatment repeats: the largest channel difference between a run and its "
        f"repeat was {_f(worst)} (registered tau {tau:g}), and channel A of a repeat "
        f"differed from the first run by at most {_pct(spread)}."
    ]


def reading(res: Results, prov: Provenance, tables: dict[str, Table]) -> list[str]:
    tau = res.cfg.decision.tau_fixed
    paragraphs = [reading_backend(prov)]
    paragraphs += reading_slots(tables["III"])
    paragraphs += reading_grid(tables["VI"])
    paragraphs += reading_mechanisms(tables["M"])
    paragraphs += reading_validation(tables["IX"], tables["XII"])
    paragraphs += [n for n in tables["XI"].notes if n.startswith("Over ")]
    paragraphs += [n for n in tables["S9"].notes if n.startswith(("Dummy-block rule", "The dummy"))]
    paragraphs += reading_saturation(tables["XIII"])
    paragraphs += reading_search(res)
    paragraphs += reading_repeats(tables["S1"], tau)
    return paragraphs


# --- rendering --------------------------------------------------------------------------


def render_html(
    cfg: StudyConfig,
    prov: Provenance,
    tables: list[Table],
    figures: list[Figure],
    paragraphs: list[str],
    missing: list[str],
    card: Scorecard | None = None,
    agent_paragraphs: list[str] | None = None,
    capacity: CapacitySection | None = None,
) -> str:
    return (
        template_environment()
        .get_template(TEMPLATE)
        .render(
            config=cfg.source,
            prov=prov,
            tables=[table_context(t) for t in tables],
            figures=figures,
            paragraphs=paragraphs,
            missing=missing,
            replicates=cfg.replicates,
            study_seed=cfg.study_seed,
            scorecard=[r.as_dict() for r in card.rows] if card else [],
            scorecard_counts=card.counts() if card else {},
            other_counts=card.counts("other_verdict") if card else {},
            differing=card.differing() if card else [],
            expectation=backend_expectation(card) if card else "",
            profile_text=describe(prov.profile),
            profile_check=profile_statement(prov),
            other_text=describe(prov.other_profile) if prov.other_profile else "",
            other_name=prov.other_profile.name if prov.other_profile else "",
            agent_paragraphs=agent_paragraphs or [],
            capacity=capacity,
        )
    )


def describe(choice: ProfileChoice) -> str:
    return f"{choice.describe()}, sha256 {choice.sha256 or 'unknown: file not produced yet'}"


def profile_statement(prov: Provenance) -> str:
    """Whether every registration committed the profile the header names."""
    registered = [p for p in prov.prereg if p["commit"]]
    if not registered:
        return "No study is registered yet."
    mismatched = prov.profile_mismatches
    if mismatched:
        return (
            f"Registered with another profile: {', '.join(mismatched)} (their predictions "
            "and decisions rest on the profile named in the Preregistration table)."
        )
    hashed = [p for p in registered if p["profile_sha256"]]
    text = f"{len(hashed)} of {len(registered)} registrations committed this sha256"
    if len(hashed) < len(registered):
        text += "; the others record no profile hash"
    return text + "."


def scorecard(res: Results, tables: list[Table], prov: Provenance) -> Scorecard:
    """The findings judged with the study's profile and, from the exploratory stages'
    tables made on the same plans and run records, with the other profile (exploratory,
    never registered)."""
    rows = score(evidence(res, tables))
    other = prov.other_profile
    alternative = res.exploratory()
    if other is None or alternative is None:
        rows = without_other_profile(
            rows,
            "the study used the published constants and this results tree has no "
            "calibrated profile yet",
        )
        return Scorecard(tuple(rows), prov.backends, describe(res.profile))
    other_rows = score(evidence(alternative, build_tables(alternative)))
    rows = with_other_profile(rows, other_rows, (res.profile.name, other.name))
    return Scorecard(tuple(rows), prov.backends, describe(res.profile), describe(other))


@dataclass(frozen=True)
class ReportFiles:
    """Where the report writes: the HTML file, the tables directory (CSV, Markdown, LaTeX,
    the scorecard, index.json) and the figures directory."""

    html: Path
    tables: Path
    figures: Path

    @classmethod
    def under(cls, out: Path) -> ReportFiles:
        """The default layout: OUT/report.html, OUT/tables/, OUT/figures/."""
        return cls(out / "report.html", out / "tables", out / "figures")

    def relative(self, path: Path) -> str:
        """``path`` as the index names it: relative to the HTML file's directory."""
        return Path(os.path.relpath(path, self.html.parent)).as_posix()


def build_report(cfg: StudyConfig, res: Results, out: ReportFiles) -> dict[str, Any]:
    """Render every table, figure and the HTML report from existing results.

    Returns the index written to ``tables/index.json`` (paths relative to the HTML
    file's directory).
    """
    tables = build_tables(res)
    figures = build_figures(res) + build_agent_figures(res)
    prov = provenance(res)
    by_id = {t.id: t for t in tables}
    paragraphs = reading(res, prov, by_id)
    agent_paragraphs = reading_agents(res, by_id) if res.agent_studies() else []
    card = scorecard(res, tables, prov)
    capacity = capacity_section(res)  # before the files not produced are listed
    index: dict[str, Any] = {"tables": {}, "figures": {}, "report": out.relative(out.html)}
    for table in tables:
        written = []
        for suffix, render in (("csv", table_csv), ("md", table_markdown), ("tex", table_latex)):
            path = out.tables / f"table_{table.id}.{suffix}"
            atomic_write_text(path, render(table))
            written.append(out.relative(path))
        index["tables"][table.id] = written
    for figure in figures:
        if figure.svg is not None:
            path = out.figures / f"{figure.id}.svg"
            atomic_write_text(path, figure.svg + "\n")
            index["figures"][figure.id] = out.relative(path)
    scorecard_files = [out.tables / "scorecard.csv", out.tables / "scorecard.md"]
    for path, render in zip(scorecard_files, (scorecard_csv, scorecard_markdown), strict=True):
        atomic_write_text(path, render(card))
    index["scorecard"] = {
        "files": [out.relative(path) for path in scorecard_files],
        "counts": card.counts(),
    }
    index["not_produced"] = sorted(res.missing)
    index["backends"] = list(prov.backends)
    index["profile"] = {"name": prov.profile.name, "sha256": prov.profile.sha256}
    index["scorecard"]["other_profile"] = (
        None
        if prov.other_profile is None
        else {"name": prov.other_profile.name, "sha256": prov.other_profile.sha256}
    )
    index["scorecard"]["differing"] = card.differing()
    html = render_html(
        cfg,
        prov,
        tables,
        figures,
        paragraphs,
        sorted(res.missing),
        card,
        agent_paragraphs,
        capacity,
    )
    atomic_write_text(out.html, html)
    atomic_write_json(out.tables / "index.json", index)
    return index


def render_tree(cfg: StudyConfig, results: Path | str, out: Path | str) -> dict[str, Any]:
    """``rearrival tables``: the report of a whole results tree into OUT/report.html,
    OUT/tables/ and OUT/figures/."""
    return build_report(cfg, Results(cfg, Path(results)), ReportFiles.under(Path(out)))
