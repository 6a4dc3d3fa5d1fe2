"""Replicate sums of one condition, and the per-condition rows several tables share.

A condition is one (N, configuration, workload variant) of a study; its complete runs
are summed over the replicates (ratios use sums, never means, as the paper does) and
compared with the baseline configuration and the first variant on the same plans, only
when the replicate sets match. Tables III, VI, M, X, XIII, S1 and S9 and the figures
read their rows from here, so a ratio is computed in one place.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from rearrival.config.study import Study
from rearrival.judge.decisions import condition_runs
from rearrival.model.configuration import Configuration
from rearrival.report.results import Results, run_configuration, study_note


@dataclass(frozen=True)
class Sums:
    """Replicate sums of one condition's complete runs (ratios use sums, never means)."""

    replicates: int
    a_s: float
    a_decode_s: float
    a_prefill_s: float
    b_s: float
    r_s: float
    reuse_hits: int
    re_arrivals: int
    rearrival_tokens: int
    total_tokens: int
    decode_steps: int
    histogram: dict[tuple[int, int], int]
    run_ids: tuple[str, ...]
    missing: str | None = None
    per_replicate: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def padding_ratio(self) -> float | None:
        padded = sum(b * c for (_, b), c in self.histogram.items())
        used = sum(n * c for (n, _), c in self.histogram.items())
        return (padded - used) / padded if padded else None

    @property
    def reuse(self) -> str:
        return f"{self.reuse_hits}/{self.re_arrivals}"


def parse_histogram(text: Any) -> dict[tuple[int, int], int]:
    """``{"n->b": steps}`` JSON (channel tables and predictions) as {(n, b): steps}."""
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return {}
    raw = json.loads(text) if isinstance(text, str) else dict(text)
    out = {}
    for key, steps in raw.items():
        n, b = key.split("->")
        out[(int(n), int(b))] = int(steps)
    return out


def condition_sums(
    channels: pd.DataFrame | None,
    n: int,
    configuration: str,
    variant: str,
    replicates: int,
    condition: str | None = None,
) -> Sums | None:
    """Sums over the complete runs of one condition at N; ``None`` when it has none."""
    if channels is None or channels.empty:
        return None
    side = condition_runs(channels, n, configuration, variant, replicates, condition)
    runs = side.runs
    if runs.empty:
        return None
    histogram: dict[tuple[int, int], int] = {}
    for text in runs["histogram"]:
        for key, steps in parse_histogram(text).items():
            histogram[key] = histogram.get(key, 0) + steps
    per_replicate = {int(r["replicate"]): r for r in runs.to_dict("records")}
    return Sums(
        replicates=len(runs),
        a_s=math.fsum(runs["a_s"]),
        a_decode_s=math.fsum(runs["a_decode_s"]),
        a_prefill_s=math.fsum(runs["a_prefill_s"]),
        b_s=math.fsum(runs["b_s"]),
        r_s=math.fsum(runs["r_s"]),
        reuse_hits=int(runs["reuse_hits"].sum()),
        re_arrivals=int(runs["re_arrivals"].sum()),
        rearrival_tokens=int(runs["computed_prefill_tokens"].sum()),
        total_tokens=int(runs["total_computed_tokens"].sum()),
        decode_steps=int(runs["decode_steps"].sum()),
        histogram=dict(sorted(histogram.items())),
        run_ids=tuple(runs["run_id"]),
        missing=side.missing,
        per_replicate=per_replicate,
    )


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or not denominator > 0:
        return None
    return numerator / denominator


def paired(reference: Sums | None, changed: Sums | None) -> bool:
    """Ratios only between conditions whose replicate sets match exactly."""
    return (
        reference is not None
        and changed is not None
        and set(reference.per_replicate) == set(changed.per_replicate)
    )


def ids(*groups: Iterable[str]) -> str:
    return " ".join(run_id for group in groups for run_id in group)


def missing_notes(label: str, sums: Sums | None) -> list[str]:
    if sums is not None and sums.missing:
        return [
            f"{label}: incomplete ({sums.missing}); sums cover "
            f"{sums.replicates} complete run(s) only."
        ]
    return []


def configuration_cell(conf: Configuration | None) -> str:
    return conf.label() if conf is not None else ""


def condition_label(study: Study, configuration: str, variant: str) -> str | None:
    """Repeats studies label their runs ``<condition>-<k>``; tables use the first."""
    return f"{configuration}-{variant}-0" if study.repeats > 1 else None


def condition_rows(res: Results, study: Study, notes: list[str]) -> list[dict[str, Any]]:
    """One row per (N, configuration, variant) with replicate sums and ratios to the
    baseline configuration (same variant) and to the first variant (same configuration)."""
    channels = res.channels(study.name)
    if channels is None:
        notes += study_note(res, study, "Rows")
        return []
    replicates = res.cfg.replicates
    rows = []
    for n in study.n:
        sums = {}
        for conf in study.configurations:
            for variant in study.variants:
                label = condition_label(study, conf, variant)
                sums[(conf, variant)] = condition_sums(
                    channels, n, conf, variant, replicates, label
                )
        for (conf, variant), s in sums.items():
            if s is None:
                notes.append(f"{study.name} N={n} {conf}-{variant}: no complete run.")
                continue
            notes += missing_notes(f"{study.name} N={n} {conf}-{variant}", s)
            base = sums.get((study.baseline, variant))
            first = sums.get((conf, study.variants[0]))
            configuration = res.configuration(conf) or run_configuration(channels, conf)
            row = {
                "study": study.name,
                "n": n,
                "configuration": conf,
                "label": configuration_cell(configuration),
                "variant": variant,
                "replicates": s.replicates,
                "reuse": s.reuse,
                "reuse_hits": s.reuse_hits,
                "re_arrivals": s.re_arrivals,
                "rearrival_tokens": s.rearrival_tokens,
                "total_tokens": s.total_tokens,
                "decode_steps": s.decode_steps,
                "padding_ratio": s.padding_ratio,
                "a_s": s.a_s,
                "a_prefill_s": s.a_prefill_s,
                "a_decode_s": s.a_decode_s,
                "b_s": s.b_s,
                "run_ids": ids(s.run_ids),
            }
            if paired(base, s) and conf != study.baseline:
                row.update(
                    {
                        "delta_rearrival_tokens": s.rearrival_tokens - base.rearrival_tokens,
                        "delta_total_tokens": s.total_tokens - base.total_tokens,
                        "prefill_ratio": ratio(s.a_prefill_s, base.a_prefill_s),
                        "decode_ratio": ratio(s.a_decode_s, base.a_decode_s),
                        "a_ratio": ratio(s.a_s, base.a_s),
                        "b_ratio": ratio(s.b_s, base.b_s),
                    }
                )
            if paired(first, s) and variant != study.variants[0]:
                row["a_ratio_vs_first_variant"] = ratio(s.a_s, first.a_s)
            rows.append(row)
    return rows


def _slots_of(res: Results, name: str) -> int | None:
    conf = res.configuration(name)
    return conf.slots if conf is not None else None


def slot_studies(res: Results) -> list[Study]:
    """Studies comparing configurations with different KV slot counts (Table III)."""
    out = []
    for study in res.studies("comparison", "validation"):
        base = _slots_of(res, study.baseline)
        others = [_slots_of(res, c) for c in study.configurations[1:]]
        if any(s is not None and s != base for s in others):
            out.append(study)
    return out


def grid_studies(res: Results) -> list[Study]:
    """Comparison studies changing only the bucket set, same batch size and slots (VI)."""
    out = []
    for study in res.studies("comparison"):
        confs = [res.configuration(c) for c in study.configurations]
        if len(confs) > 1 and all(c is not None for c in confs):
            base = confs[0]
            if all(
                c.batch_size == base.batch_size
                and c.slots == base.slots
                and c.buckets != base.buckets
                for c in confs[1:]
            ):
                out.append(study)
    return out
