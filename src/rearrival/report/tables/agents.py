"""Tables of the agent-session studies (docs/DESIGN.md "Agent sessions"): studies whose
``workload`` makes sessions of several tool calls, beyond the paper's one re-arrival.

Table A1 gives each condition's replicate sums (reuse, computed prefill, padding, channel
A) beside the registered prediction, Table A2 reuse by round index (does a session keep
its KV across many tool calls, or lose it at the long waits), Table A3 the preregistered
verdicts. Every row carries the run ids it sums; the paper's tables never show these
studies (``Results.studies`` leaves them out), so the paper's report is unchanged.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from rearrival.config.study import SELECTED, Study
from rearrival.judge.predictions import predicted_ratios
from rearrival.measure.records import read_run
from rearrival.measure.records.contract import ROUND_COLUMN
from rearrival.model.configuration import Configuration, configuration_in_record
from rearrival.report.conditions import condition_sums, ids, missing_notes, paired, ratio
from rearrival.report.results import (
    Results,
    decision_records,
    run_configuration,
    study_backend,
    study_note,
)
from rearrival.report.table_model import Column, Part, Table
from rearrival.vocabulary import PREDICTION


def study_configuration(res: Results, study: Study, name: str) -> Configuration | None:
    """A configuration of an agent study; 'selected' is its own search's pick."""
    if name == SELECTED:
        raw = res.study_selected(study)
        if raw is not None:
            return configuration_in_record(raw, name=SELECTED)
        return run_configuration(res.channels(study.name), name)
    return res.cfg.configurations.get(name)


def _predicted(res: Results, study: Study) -> dict[tuple[int, str, str], Any]:
    """Registered-simulator sums per (N, configuration, variant), with ratio_pred."""
    frame = res.predictions(study.name)
    if frame is None or frame.empty:
        return {}
    sums = predicted_ratios(frame, study.baseline, PREDICTION)
    return {(int(r.n), r.configuration, r.variant): r for r in sums.itertuples()}


def condition_table(res: Results) -> Table:
    """Table A1: replicate sums per condition and the channel-A ratio to the baseline."""
    notes: list[str] = []
    studies = res.agent_studies()
    parts = []
    for study in studies:
        channels = res.channels(study.name)
        if channels is None:
            notes += study_note(res, study, "Rows")
            parts.append(Part(f"{study.name}: {study.description}", A1_COLUMNS, ()))
            continue
        predicted = _predicted(res, study)
        rows = []
        for n in study.n:
            for variant in study.variants:
                base = condition_sums(channels, n, study.baseline, variant, res.cfg.replicates)
                for name in study.configurations:
                    s = condition_sums(channels, n, name, variant, res.cfg.replicates)
                    if s is None:
                        notes.append(f"{study.name} N={n} {name}-{variant}: no complete run.")
                        continue
                    notes += missing_notes(f"{study.name} N={n} {name}-{variant}", s)
                    conf = study_configuration(res, study, name)
                    pred = predicted.get((n, name, variant))
                    row = {
                        "study": study.name,
                        "n": n,
                        "variant": variant,
                        "configuration": name,
                        "label": conf.label() if conf is not None else "",
                        "reuse": s.reuse,
                        "reuse_share": ratio(s.reuse_hits, s.re_arrivals),
                        "rearrival_tokens": s.rearrival_tokens,
                        "padding_ratio": s.padding_ratio,
                        "decode_steps": s.decode_steps,
                        "a_s": s.a_s,
                        "ratio_pred": float(pred.ratio_pred) if pred is not None else None,
                        "predicted_reuse": (
                            f"{int(pred.reuse_hits)}/{int(pred.re_arrivals)}"
                            if pred is not None
                            else ""
                        ),
                        "run_ids": ids(s.run_ids),
                    }
                    if paired(base, s):
                        row["a_ratio"] = ratio(s.a_s, base.a_s)
                        row["b_ratio"] = ratio(s.b_s, base.b_s)
                    rows.append(row)
        parts.append(Part(f"{study.name}: {study.description}", A1_COLUMNS, tuple(rows)))
    return Table(
        "A1",
        "Agent sessions: reuse, padding and cost per configuration",
        "Studies of agent sessions with several tool calls each (beyond the paper's one "
        "re-arrival): replicate sums per configuration of re-arrival reuse (every round "
        "after a session's first is a re-arrival), computed re-arrival prefill tokens, "
        "the decode padding ratio sum(b-n)/sum(b), channel A and its ratio to the "
        "baseline on the same plans, beside the registered prediction (base simulator).",
        tuple(parts),
        tuple(notes),
        study_backend(res, studies),
    )


A1_COLUMNS = (
    Column("n", "N", "int"),
    Column("variant", "variant"),
    Column("configuration", "configuration"),
    Column("label", "buckets/batch/slots"),
    Column("reuse", "reuse hits / re-arrivals"),
    Column("predicted_reuse", "predicted reuse"),
    Column("rearrival_tokens", "re-arrival computed tokens", "int"),
    Column("padding_ratio", "padding ratio", "f3"),
    Column("decode_steps", "decode steps", "int"),
    Column("a_s", "A (s)", "f3"),
    Column("ratio_pred", "predicted A / baseline", "f4"),
    Column("a_ratio", "A / baseline", "f4"),
    Column("b_ratio", "B / baseline", "f4"),
    Column("run_ids", "runs", "ids"),
)


def round_records(res: Results, study: Study) -> pd.DataFrame:
    """Every complete run's requests of a study, with its N, configuration and variant
    (the run records say each request's round index in column ``turn``)."""
    channels = res.channels(study.name)
    if channels is None or channels.empty:
        return pd.DataFrame()
    frames = []
    complete = channels[channels["status"] == "complete"].sort_values("run_id")
    for run in complete.to_dict("records"):
        requests = read_run(res.run_path(run["run_dir"])).requests
        frames.append(
            requests.assign(
                n=int(run["n"]),
                configuration=run["configuration"],
                variant=run["variant"],
                run_id=run["run_id"],
            )
        )
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def reuse_by_round(requests: pd.DataFrame) -> list[dict[str, Any]]:
    """Per (N, configuration, variant, round k >= 1): re-arrivals, reuse hits (cached
    tokens > 0) and computed prefill tokens, pooled over the replicates."""
    later = requests[requests[ROUND_COLUMN] >= 1]
    rows = []
    keys = ["n", "variant", "configuration", ROUND_COLUMN]
    for (n, variant, configuration, round_index), group in later.groupby(keys, sort=True):
        hits = int((group["cached_tokens"].fillna(0) > 0).sum())
        rows.append(
            {
                "n": int(n),
                "variant": variant,
                "configuration": configuration,
                "round": int(round_index),
                "re_arrivals": len(group),
                "reuse_hits": hits,
                "reuse_share": hits / len(group),
                "computed_tokens": int(group["computed_tokens"].fillna(0).sum()),
                "prompt_tokens": int(group["prompt_tokens"].sum()),
                "run_ids": " ".join(sorted(set(group["run_id"]))),
            }
        )
    return rows


def round_table(res: Results) -> Table:
    """Table A2: reuse by round index, from the run records."""
    notes: list[str] = []
    studies = res.agent_studies()
    parts = []
    for study in studies:
        if res.channels(study.name) is None:
            notes += study_note(res, study, "Reuse by round")
            rows: list[dict[str, Any]] = []
        else:
            records = round_records(res, study)
            rows = reuse_by_round(records) if not records.empty else []
        order = {name: i for i, name in enumerate(study.configurations)}
        rows.sort(
            key=lambda r: (r["n"], r["variant"], order.get(r["configuration"], 99), r["round"])
        )
        parts.append(
            Part(
                f"{study.name}: {study.description}",
                (
                    Column("n", "N", "int"),
                    Column("variant", "variant"),
                    Column("configuration", "configuration"),
                    Column("round", "round", "int"),
                    Column("re_arrivals", "re-arrivals", "int"),
                    Column("reuse_hits", "reuse hits", "int"),
                    Column("reuse_share", "reuse share", "pct2"),
                    Column("prompt_tokens", "prompt tokens", "int"),
                    Column("computed_tokens", "computed prefill tokens", "int"),
                    Column("run_ids", "runs", "ids"),
                ),
                tuple(rows),
            )
        )
    return Table(
        "A2",
        "Agent sessions: reuse by round index",
        "Every request after a session's first round, grouped by its round index and "
        "pooled over the replicates: how many found their KV (cached tokens > 0) and how "
        "many prefill tokens the server computed. Later rounds carry longer transcripts, "
        "so a miss there costs more.",
        tuple(parts),
        tuple(notes),
        study_backend(res, studies),
    )


def decision_table(res: Results) -> Table:
    """Table A3: the preregistered verdicts of each agent study's decision table."""
    notes: list[str] = []
    studies = res.agent_studies()
    parts = []
    for study in studies:
        rows = decision_records(res, study, notes)
        parts.append(
            Part(
                f"{study.name}: {study.description}",
                (
                    Column("comparison", "comparison"),
                    Column("n", "N", "int"),
                    Column("ratio_pred", "R_pred", "f4"),
                    Column("ratio_obs_a", "R_obs (A)", "f4"),
                    Column("ratio_obs_b", "R_obs (B)", "f4"),
                    Column("tau", "tau", "f4"),
                    Column("channel_diff", "|A - B|", "f4"),
                    Column("error", "error", "f4"),
                    Column("verdict", "verdict"),
                    Column("note", "note"),
                    Column("run_ids", "runs", "ids"),
                ),
                tuple(rows),
            )
        )
    return Table(
        "A3",
        "Agent sessions: preregistered decisions",
        "Each configuration against the baseline on agent sessions, judged by the "
        "registered criteria (channel agreement within tau, then |R_obs - R_pred| and "
        "direction for confirmatory N; other N exploratory), read from the study's "
        "decision table.",
        tuple(parts),
        tuple(notes),
        study_backend(res, studies),
    )
