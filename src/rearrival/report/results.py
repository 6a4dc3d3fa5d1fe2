"""Read-only access to a results tree for the report (docs/DESIGN.md §13).

The report reads only files the pipeline wrote (channel tables, decision CSVs,
predictions and their request records, fixed-arrival predictions, run records, prereg
records, the search outputs, the injection gaps, the calibration stage's profile and
samples, and the same tables of the exploratory second evaluation under
``exploratory/<profile>/``); it never reruns anything. In the workflow it reads only the
files its rule declared (``declared``): any other is "not produced", so the rule and
what the report reads cannot drift apart. ``rearrival tables`` re-renders from a whole
tree. A results file that does not exist yet is noted as "not produced" rather than
raised: the report is useful while a long pipeline is still running. The helpers here
are the reads that tables and figures share: a study's decision rows, a run directory, a
configuration as its runs recorded it, and the one backend a table's runs came from.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from rearrival.config.study import SELECTED, Study, StudyConfig
from rearrival.errors import RearrivalError
from rearrival.model.configuration import (
    Configuration,
    configuration_from_mapping,
    configuration_in_record,
)
from rearrival.model.cost.profile import Profile
from rearrival.report.profiles import ProfileChoice, configured_choice, other_choice
from rearrival.vocabulary import INJECTION_BACKEND


class ReportError(RearrivalError):
    """Results the report cannot be built from; the message names the file and the fix."""


READERS = {
    ".parquet": pd.read_parquet,
    ".json": lambda path: json.loads(path.read_text()),
    # empty CSV cells are missing values; "NA" and the like stay text
    ".csv": lambda path: pd.read_csv(path, keep_default_na=False, na_values=[""]),
    ".yaml": lambda path: yaml.safe_load(path.read_text()),
}
# Where the exploratory second evaluation's predictions, channels, decisions and
# fixed-arrival predictions are, under the results tree (rules/common.smk writes them).
EXPLORATORY = "exploratory"


def _normal(path: Path | str) -> Path:
    return Path(os.path.normpath(path))


def declared_root(files: Iterable[Path]) -> Path:
    """The results tree a list of declared files lies in (their common directory)."""
    paths = [_normal(f) for f in files]
    if not paths:
        raise ReportError("the report was given no results files; the report rule lists them")
    return Path(os.path.commonpath(paths))


class Results:
    """Read-only access to a results tree, caching each file and noting absent ones.

    ``declared`` (None: the whole tree) are the files and directories the report may read;
    ``evaluation`` is the profile the predictions, channels, decisions and fixed-arrival
    predictions it shows rest on: the study's, or with :meth:`exploratory` the other one.
    ``missing`` collects one line per absent input so the report can list what was not
    produced; accessors return ``None`` for absent files instead of raising.
    """

    def __init__(
        self,
        cfg: StudyConfig,
        root: Path,
        declared: Iterable[Path] | None = None,
        profile: ProfileChoice | None = None,
    ) -> None:
        self.cfg = cfg
        self.root = Path(root)
        self.declared = None if declared is None else frozenset(map(_normal, declared))
        # the constants the numbers rest on: the config's profile: unless this view is
        # the exploratory evaluation's (:meth:`exploratory`)
        self.profile = profile or configured_choice(cfg, self.root)
        self._cache: dict[str, Any] = {}
        self.missing: list[str] = []

    # --- which files may be read ----------------------------------------------------

    def readable(self, path: Path) -> bool:
        """Whether ``path`` is a declared file or lies in a declared directory."""
        if self.declared is None:
            return True
        path = _normal(path)
        return path in self.declared or any(d in path.parents for d in self.declared)

    def file(self, relative: str, how: str | None = None) -> Path | None:
        """The path of a results file the report may read and that exists, else None
        (noted as not produced, with ``how`` to produce it)."""
        path = self.root / relative
        if self.readable(path) and path.exists():
            return path
        self._note_missing(path, how or f"snakemake results/{relative}")
        return None

    def _note_missing(self, path: Path, how: str) -> None:
        line = f"{path} not produced ({how})"
        if line not in self.missing:
            self.missing.append(line)

    def load(self, relative: str, how: str | None = None) -> Any:
        """The results file at ``relative`` (parsed by its suffix), or None if absent,
        noted with ``how`` to produce it (default: the snakemake target)."""
        if relative not in self._cache:
            path = self.file(relative, how)
            self._cache[relative] = None if path is None else READERS[path.suffix](path)
        return self._cache[relative]

    # --- the profile and the two evaluations ----------------------------------------

    @property
    def evaluation(self) -> str:
        """Where this view's priced tables are: '' for the study's profile, else
        ``exploratory/<profile>/``."""
        if self.profile.name == self.cfg.measurement.profile:
            return ""
        return f"{EXPLORATORY}/{self.profile.name}/"

    def exploratory(self) -> Results | None:
        """The same tree under the exploratory evaluation's profile (None while that
        profile's file does not exist, e.g. the calibrated one before calibration)."""
        other = other_choice(self.cfg, self.root)
        return None if other is None else Results(self.cfg, self.root, self.declared, other)

    def prediction_profile(self) -> Profile:
        """The profile this view's predictions and channel A used."""
        if "profile:" not in self._cache:
            self._cache["profile:"] = self.profile.load(self.cfg)
        return self._cache["profile:"]

    # --- the stages' outputs --------------------------------------------------------

    def channels(self, study: str) -> pd.DataFrame | None:
        return self.load(f"{self.evaluation}channels/{study}.parquet")

    def predictions(self, study: str, profile: str | None = None) -> pd.DataFrame | None:
        """A study's predictions; ``profile`` names the profile (the study's or the
        exploratory one), default this view's."""
        return self.load(f"{self._evaluation_of(profile)}predictions/{study}.parquet")

    def predicted_requests(self, study: str) -> pd.DataFrame | None:
        """The registered simulator's per-request records (the study's profile)."""
        return self.load(f"predictions/{study}.requests.parquet")

    def predicted_evictions(self, study: str) -> pd.DataFrame | None:
        return self.load(f"predictions/{study}.evictions.parquet")

    def decisions(self, study: str) -> pd.DataFrame | None:
        return self.load(f"{self.evaluation}decisions/{study}.csv")

    def fixed_arrivals(self, study: str) -> pd.DataFrame | None:
        return self.load(f"{self.evaluation}fixed_arrivals/{study}.parquet")

    def _evaluation_of(self, profile: str | None) -> str:
        if profile is None:
            return self.evaluation
        return "" if profile == self.cfg.measurement.profile else f"{EXPLORATORY}/{profile}/"

    def prereg(self, study: str) -> dict[str, Any] | None:
        return self.load(f"prereg/{study}.json")

    def search_summary(self) -> dict[str, Any] | None:
        return self.load("search/summary.json")

    def search_scores(self) -> pd.DataFrame | None:
        return self.load("search/scores.parquet")

    def selected(self) -> dict[str, Any] | None:
        return self.load("search/selected.json")

    def gaps(self) -> pd.DataFrame | None:
        """The injection gaps; on a backend without the injection driver the note says so
        instead of suggesting a snakemake target that would fail."""
        if self.cfg.backend == INJECTION_BACKEND:
            return self.load("injection/gaps.parquet")
        return self.load(
            "injection/gaps.parquet",
            f"the prefill injection runs only on backend {INJECTION_BACKEND}; "
            f"backend {self.cfg.backend} leaves it out",
        )

    def compile_records(self) -> list[tuple[Path, Any]]:
        """Every results/compile/*.json the report may read (hardware only), parsed."""
        folder = self.root / "compile"
        found = sorted(p for p in folder.glob("*.json") if self.readable(p))
        return [(p, json.loads(p.read_text())) for p in found]

    def run_path(self, run_dir: str) -> Path:
        """A run directory named in a channel table, found relative to the results tree
        when the table was written from another working directory; a run the report was
        not given is refused (its rule must declare every run it reads)."""
        path = Path(run_dir)
        if not path.exists():
            parts = path.parts
            rebuilt = self.root.joinpath(*parts[parts.index("runs") :]) if "runs" in parts else None
            path = rebuilt if rebuilt is not None and rebuilt.exists() else self.root.parent / path
        if not self.readable(path):
            raise ReportError(
                f"{run_dir}: a run the report was not given; the report rule declares "
                "every run directory of every study (rules/common.smk: report_inputs)"
            )
        return path

    def studies(self, *kinds: str) -> list[Study]:
        """The paper's studies (two-round sessions) of the given kinds; studies of agent
        sessions have their own report section (``agent_studies``)."""
        return [
            s
            for s in self.cfg.studies.values()
            if not s.multi_round and (not kinds or s.kind in kinds)
        ]

    def agent_studies(self) -> list[Study]:
        """Studies of agent sessions with several tool calls (a ``workload`` block)."""
        return [s for s in self.cfg.studies.values() if s.multi_round]

    def all_channels(self, studies: Iterable[Study] | None = None) -> pd.DataFrame:
        """The channel rows that exist of ``studies`` (default: the paper's studies), one
        frame (empty when none)."""
        chosen = self.studies() if studies is None else studies
        frames = [f for s in chosen for f in [self.channels(s.name)] if f is not None]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def backends(self) -> list[str]:
        """Backends that produced the runs (from the manifests, via the channel tables)."""
        frame = self.all_channels(self.cfg.studies.values())
        return sorted(set(frame["backend"])) if "backend" in frame else []

    def study_selected(self, study: Study) -> dict[str, Any] | None:
        """The search pick a study compares as 'selected': its own search's, when it has
        one (results/study_search/<study>/), else the top-level search's."""
        if study.search is None:
            return self.selected()
        return self.load(f"study_search/{study.name}/selected.json")

    def configuration(self, name: str) -> Configuration | None:
        """A configuration by name; ``selected`` comes from the search output."""
        if name in self.cfg.configurations:
            return self.cfg.configurations[name]
        if name == SELECTED:
            raw = self.selected()
            return None if raw is None else configuration_in_record(raw, name=SELECTED)
        return None


def backend_phrase(backends: Sequence[str]) -> str:
    return ", ".join(backends) if backends else "no runs yet"


def study_note(res: Results, study: Study, what: str) -> list[str]:
    """A "not produced" note when a study's channel table is absent."""
    if res.channels(study.name) is None:
        return [
            f"{what} for study '{study.name}' not produced: results/channels/"
            f"{study.name}.parquet is absent (run snakemake results/decisions/"
            f"{study.name}.csv)."
        ]
    return []


def run_configuration(channels: pd.DataFrame | None, name: str) -> Configuration | None:
    """A configuration as the runs recorded it (manifests name and describe it)."""
    if channels is None or "run_dir" not in channels:
        return None
    chosen = channels[(channels["configuration"] == name) & (channels["status"] == "complete")]
    for run_dir in chosen["run_dir"]:
        manifest_path = Path(run_dir) / "manifest.json"
        if manifest_path.exists():
            raw = json.loads(manifest_path.read_text())["configuration"]
            return configuration_from_mapping(raw, name=name)
    return None


def study_backend(res: Results, studies: Iterable[Study]) -> str:
    """The one backend whose runs a table shows. Rows do not carry a backend, so a
    table mixing backends would put numbers of different substrates side by side
    unlabelled: refused, naming the studies and their backends."""
    found: dict[str, set[str]] = {}
    for study in studies:
        frame = res.channels(study.name)
        if frame is not None and "backend" in frame:
            for backend in set(frame["backend"]):
                found.setdefault(backend, set()).add(study.name)
    if len(found) > 1:
        mixed = "; ".join(
            f"{backend}: {', '.join(sorted(names))}" for backend, names in sorted(found.items())
        )
        raise ReportError(
            f"results/channels: one table would mix runs of several backends "
            f"({mixed}) in rows that do not say which; re-measure these studies "
            "on one backend (a backend change is a new study)"
        )
    return backend_phrase(sorted(found))


def _value(row: dict[str, Any], key: str) -> Any:
    value = row.get(key)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value


def decision_records(res: Results, study: Study, notes: list[str]) -> list[dict[str, Any]]:
    """A study's decision rows as dicts, missing cells as ``None``; an absent decision
    table adds a "not produced" note and gives no rows."""
    frame = res.decisions(study.name)
    if frame is None:
        notes.append(
            f"Study '{study.name}' not produced: results/decisions/{study.name}.csv "
            f"is absent (run snakemake results/decisions/{study.name}.csv)."
        )
        return []
    return [{k: _value(r, k) for k in r} for r in frame.to_dict("records")]
