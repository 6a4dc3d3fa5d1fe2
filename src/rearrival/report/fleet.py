"""The fleet study's report section (docs/DESIGN.md §18; README "A study on a real fleet"):
``reports/fleet.md`` and its two figures (``rearrival.report.fleet_figures``), rendered from
the decision stage's tables, the per-run comparisons (``rearrival compare``), the run
manifests and the registration record only.

Per condition: where the requests went, cached tokens and lost prefixes predicted (as
registered, by the policy's nearest router model on the planned arrivals; and re-run on the
observed placement and arrivals) against observed, time to first token predicted against
observed (exploratory), then every registered decision. :func:`fleet_section` returns the
Markdown and the figures' paths, so an HTML report can embed the same pieces.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rearrival.atomic import atomic_write_text
from rearrival.judge.fleet_agreement import REQUESTS_FILE
from rearrival.judge.fleet_study import CONDITIONS_FILE, DECISIONS_FILE
from rearrival.report.fleet_figures import (
    CACHED_FIGURE,
    TTFT_FIGURE,
    cached_tokens_figure,
    ttft_figure,
)


@dataclass(frozen=True)
class FleetReportInputs:
    """Every file the section reads: ``comparisons`` and ``runs`` keyed ``r<rep>/<label>``."""

    description: str
    decisions_dir: Path
    prereg_record: Path
    comparisons: Mapping[str, Path]
    runs: Mapping[str, Path]


def _cell(value: Any, digits: int = 1) -> str:
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]


def _fleet_lines(runs: Mapping[str, Path]) -> list[str]:
    """What served each run: the router, its version and policy, the servers."""
    rows = []
    for key, run in runs.items():
        manifest = json.loads((run / "manifest.json").read_text())
        router = manifest["fleet"]["router"]
        engine = manifest.get("engine", {})
        rows.append(
            [
                key,
                f"{router['name']} {router['version']}",
                router["policy"],
                len(manifest["fleet"]["servers"]),
                manifest["configuration"].get("num_blocks"),
                f"vLLM {manifest['software'].get('vllm')} ({engine.get('device', '?')})",
                manifest.get("started_at", "?"),
            ]
        )
    return _table(["run", "router", "policy", "servers", "KV blocks", "engine", "started"], rows)


def _counts_lines(conditions: pd.DataFrame) -> list[str]:
    rows = []
    for c in conditions.to_dict("records"):
        rows.append(
            [
                f"r{c['replicate']}/{c['condition']}",
                c["router_model"],
                _placement(c),
                f"{c['cached_tokens_per_request_registered']:.1f} / "
                f"{c['cached_tokens_per_request_rerun']:.1f} / "
                f"{c['cached_tokens_per_request_observed']:.1f}",
                f"{c['re_arrivals_lost_registered']} / {c['re_arrivals_lost_rerun']} / "
                f"{c['re_arrivals_lost_observed']} of {c['re_arrivals_observed']}",
                f"{c['prefill_tokens_registered']} / {c['prefill_tokens_rerun']} / "
                f"{c['prefill_tokens_observed']}",
                f"{c['agreeing']}/{c['requests_observed']} ({c['timing_dependent']} timing-dep., "
                f"{c['predictor_errors']} errors)",
            ]
        )
    return _table(
        [
            "run",
            "registered model",
            "requests per replica (registered / observed)",
            "cached tokens per request (registered / re-run / vLLM)",
            "lost re-arrivals (registered / re-run / vLLM)",
            "prefill tokens (registered / re-run / vLLM)",
            "cached tokens agree",
        ],
        rows,
    )


def _placement(c: Mapping[str, Any]) -> str:
    def text(raw: str) -> str:
        return ", ".join(f"{k}: {v}" for k, v in json.loads(raw).items())

    return (
        f"{text(c['requests_per_replica_registered'])} / {text(c['requests_per_replica_observed'])}"
    )


def _ttft_lines(conditions: pd.DataFrame) -> list[str]:
    rows = [
        [
            f"r{c['replicate']}/{c['condition']}",
            f"{c['ttft_s_mean_registered'] * 1e3:.1f} / {c['ttft_s_mean_rerun'] * 1e3:.1f} / "
            f"{c['ttft_s_mean_observed'] * 1e3:.1f}",
            f"{c['ttft_s_p90_registered'] * 1e3:.1f} / {c['ttft_s_p90_rerun'] * 1e3:.1f} / "
            f"{c['ttft_s_p90_observed'] * 1e3:.1f}",
        ]
        for c in conditions.to_dict("records")
    ]
    return _table(["run", "mean TTFT ms (registered / re-run / vLLM)", "p90 TTFT ms (same)"], rows)


def _decision_lines(decisions: pd.DataFrame) -> list[str]:
    rows = [
        [
            f"r{d['replicate']}",
            d["statement"],
            "holds" if d["predicted"] else "fails",
            f"**{d['verdict']}**",
            "right" if d["prediction_right"] else "wrong",
            d["evidence"],
        ]
        for d in decisions.to_dict("records")
    ]
    return _table(["replicate", "decision", "predicted", "observed", "prediction", "counts"], rows)


def fleet_section(inputs: FleetReportInputs, figures_dir: Path) -> tuple[str, list[Path]]:
    """The section's Markdown and its figures (written under ``figures_dir``)."""
    conditions = pd.read_csv(inputs.decisions_dir / CONDITIONS_FILE)
    decisions = pd.read_csv(inputs.decisions_dir / DECISIONS_FILE)
    record = json.loads(inputs.prereg_record.read_text())
    frames = {k: pd.read_parquet(d / REQUESTS_FILE) for k, d in inputs.comparisons.items()}
    figures = [
        cached_tokens_figure(frames, figures_dir / CACHED_FIGURE),
        ttft_figure(frames, figures_dir / TTFT_FIGURE),
    ]
    lines = [
        f"## A study on a real fleet: {record['study']}",
        "",
        inputs.description,
        "",
        f"Registered in commit `{record['commit'][:12]}` ({record['committed_at']}), before "
        "the first server started. Each vllm-router policy is predicted by its nearest "
        "router model (`consistent_hash` by `session_affinity`: the same rule, never move a "
        "session, but the router's own hash picks the replica). Decisions are on counts "
        "(cached tokens, lost prefixes, prefill recomputed), judged on what vLLM reported; "
        "time to first token is registered-exploratory.",
        "",
        "### What ran",
        "",
        *_fleet_lines(inputs.runs),
        "",
        "### Placement, cached tokens and lost prefixes",
        "",
        "*registered*: the fleet rule set on the planned arrivals behind the registered "
        "model; *re-run*: the same rules on the run's observed arrivals and placement "
        "(`rearrival compare`); *vLLM*: what the servers reported. A request is "
        "timing-dependent only where its replica's predicted pool had evicted before "
        "admitting it.",
        "",
        *_counts_lines(conditions),
        "",
        f"![per-request cached tokens]({CACHED_FIGURE})",
        "",
        "### Time to first token (exploratory)",
        "",
        *_ttft_lines(conditions),
        "",
        f"![time to first token per replica]({TTFT_FIGURE})",
        "",
        "### Decisions",
        "",
        *_decision_lines(decisions),
        "",
    ]
    return "\n".join(lines), figures


def write_fleet_report(inputs: FleetReportInputs, out: Path) -> Path:
    """``out`` (reports/fleet.md) with its figures beside it."""
    text, _ = fleet_section(inputs, out.parent)
    atomic_write_text(out, "# The fleet study\n\n" + text)
    return out
