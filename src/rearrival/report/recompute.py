"""The report's second evaluation under the other profile (paper Sections II-B, IV).

Every number that rests on the cost constants is recomputed from the same declared
inputs the report stage already reads (the plans, the run records, the search's pick and
the study definition): the predictions of every simulator with the predict stage's code
(``rearrival.judge.predictions.prediction_frame``), channel A of every run with the
channels stage's code (``rearrival.judge.collect.collect_channels``), and the decision
tables with the decide stage's code and criteria. The tables and the scorecard are then
built from this view exactly as from the stored results, so the two evaluations differ
in the profile alone.

This is exploratory: nothing here is registered or written to the results tree, and it
judges nothing that the registered decisions judge. Two things are not recomputed: the
configuration search (its pick is what was measured, and its ranking stays the one the
search stage computed with the study's profile; the scorecard says so per finding), and
measured quantities that no profile prices (reuse, padding, decode steps, channel B).
"""

from __future__ import annotations

import io
from typing import Any

import pandas as pd
import pyarrow as pa

from rearrival.judge.collect import collect_channels
from rearrival.judge.decisions import decision_table
from rearrival.judge.predictions import prediction_frame
from rearrival.report.profiles import ProfileChoice
from rearrival.report.results import READERS, Results


def _as_stored(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame as a stage would have stored and the report read it (Parquet types)."""
    return pa.Table.from_pandas(frame, preserve_index=False).to_pandas()


class RecomputedResults(Results):
    """A results tree seen under another profile: predictions, channels and decisions are
    recomputed in memory; every other file is read from the tree as stored."""

    def __init__(self, stored: Results, profile: ProfileChoice) -> None:
        super().__init__(stored.cfg, stored.root, profile)
        self.stored = stored

    def _computed(self, key: str, compute: Any) -> Any:
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    def predictions(self, study: str) -> pd.DataFrame | None:
        return self._computed(f"recomputed:predictions/{study}", lambda: self._predict(study))

    def channels(self, study: str) -> pd.DataFrame | None:
        return self._computed(f"recomputed:channels/{study}", lambda: self._channels(study))

    def decisions(self, study: str) -> pd.DataFrame | None:
        return self._computed(f"recomputed:decisions/{study}", lambda: self._decide(study))

    def _predict(self, study_name: str) -> pd.DataFrame | None:
        """The study's predictions under this profile, for the configurations it compared
        (the search's pick as the search stage wrote it); None when a plan, a
        configuration or the stored predictions are absent."""
        study = self.cfg.study(study_name)
        configurations = {name: self.configuration(name) for name in study.configurations}
        plans = {
            (n, k): self.plan(study_name, n, k) for n in study.n for k in range(self.cfg.replicates)
        }
        if (
            self.stored.predictions(study_name) is None
            or None in configurations.values()
            or None in plans.values()
        ):
            return None
        frame = prediction_frame(
            self.cfg.replicates,
            study,
            lambda n, k: plans[(n, k)],
            configurations,
            self.prediction_profile(),
        )
        return _as_stored(frame)

    def _channels(self, study: str) -> pd.DataFrame | None:
        """Channel A of every run the stored channel table lists, priced again."""
        stored = self.stored.channels(study)
        if stored is None or stored.empty:
            return stored
        replicate_dirs = sorted({self.run_path(d).parent for d in stored["run_dir"]})
        return _as_stored(collect_channels(replicate_dirs, None, self.prediction_profile()))

    def _decide(self, study_name: str) -> pd.DataFrame | None:
        """The decision table under the study definition's criteria (the workflow refuses
        a config that contradicts the registered ones), read back as the CSV is read."""
        channels, predictions = self.channels(study_name), self.predictions(study_name)
        if self.stored.decisions(study_name) is None or channels is None or predictions is None:
            return None
        text, _ = decision_table(
            self.cfg.study(study_name),
            self.cfg.replicates,
            self.cfg.study_seed,
            channels,
            predictions,
            self.cfg.decision,
        )
        return READERS[".csv"](io.StringIO(text))
