"""The fleet study's report section (docs/DESIGN.md §18; README "A study on a real fleet"),
rendered from the decision stage's tables, the per-run comparisons (``rearrival compare``),
the run manifests and the registration record only.

Per condition: where the requests went, cached tokens and lost prefixes predicted (as
registered, by the policy's nearest router model on the planned arrivals; and re-run on the
observed placement and arrivals) against observed, time to first token predicted against
observed (exploratory), then every registered decision. :func:`fleet_section` builds one
``rearrival.report.sections.Section``, which the stage writes twice: as
``reports/fleet.md`` and as the section file ``reports/report.html`` composes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rearrival.judge.fleet_agreement import REQUESTS_FILE
from rearrival.judge.fleet_study import CONDITIONS_FILE, DECISIONS_FILE
from rearrival.report.fleet_figures import cached_tokens_figure, ttft_figure
from rearrival.report.sections import Heading, Prose, Section
from rearrival.report.table_model import Column, Part, Table

SECTION_ID = "fleet"


@dataclass(frozen=True)
class FleetReportInputs:
    """Every file the section reads: ``comparisons`` and ``runs`` keyed ``r<rep>/<label>``."""

    description: str
    decisions_dir: Path
    prereg_record: Path
    comparisons: Mapping[str, Path]
    runs: Mapping[str, Path]


def _table(columns: tuple[Column, ...], rows: list[dict[str, Any]], backend: str) -> Table:
    """An unnumbered, uncaptioned table of the section (its heading says what it is)."""
    return Table("", "", "", (Part("rows", columns, tuple(rows)),), backend=backend)


def _three(c: Mapping[str, Any], key: str, fmt: str = "{}") -> str:
    """A count on its three sides: registered / re-run / vLLM."""
    sides = ("registered", "rerun", "observed")
    return " / ".join(fmt.format(c[f"{key}_{side}"]) for side in sides)


def _placement(c: Mapping[str, Any]) -> str:
    def text(raw: str) -> str:
        return ", ".join(f"{k}: {v}" for k, v in json.loads(raw).items())

    registered, observed = (c[f"requests_per_replica_{s}"] for s in ("registered", "observed"))
    return f"{text(registered)} / {text(observed)}"


SERVED_COLUMNS = (
    Column("run", "run"),
    Column("router", "router"),
    Column("policy", "policy"),
    Column("servers", "servers", "int"),
    Column("num_blocks", "KV blocks", "int"),
    Column("engine", "engine"),
    Column("started", "started"),
)


def _served(runs: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """What served each run: the router, its version and policy, the servers."""
    rows = []
    for key, manifest in runs.items():
        router = manifest["fleet"]["router"]
        rows.append(
            {
                "run": key,
                "router": f"{router['name']} {router['version']}",
                "policy": router["policy"],
                "servers": len(manifest["fleet"]["servers"]),
                "num_blocks": manifest["configuration"].get("num_blocks"),
                "engine": _engine(manifest),
                "started": manifest.get("started_at", "?"),
            }
        )
    return rows


def _engine(manifest: Mapping[str, Any]) -> str:
    device = manifest.get("engine", {}).get("device", "?")
    return f"vLLM {manifest['software'].get('vllm')} ({device})"


COUNT_COLUMNS = (
    Column("run", "run"),
    Column("model", "registered model"),
    Column("placement", "requests per replica (registered / observed)"),
    Column("cached", "cached tokens per request (registered / re-run / vLLM)"),
    Column("lost", "lost re-arrivals (registered / re-run / vLLM)"),
    Column("prefill", "prefill tokens (registered / re-run / vLLM)"),
    Column("agree", "cached tokens agree"),
)


def _counts(c: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "run": f"r{c['replicate']}/{c['condition']}",
        "model": c["router_model"],
        "placement": _placement(c),
        "cached": _three(c, "cached_tokens_per_request", "{:.1f}"),
        "lost": f"{_three(c, 're_arrivals_lost')} of {c['re_arrivals_observed']}",
        "prefill": _three(c, "prefill_tokens"),
        "agree": f"{c['agreeing']}/{c['requests_observed']} ({c['timing_dependent']} "
        f"timing-dep., {c['predictor_errors']} errors)",
    }


TTFT_COLUMNS = (
    Column("run", "run"),
    Column("mean", "mean TTFT ms (registered / re-run / vLLM)"),
    Column("p90", "p90 TTFT ms (same)"),
)


def _ttft(c: Mapping[str, Any]) -> dict[str, Any]:
    in_ms = {k: v * 1e3 for k, v in c.items() if str(k).startswith("ttft_s_")}
    return {
        "run": f"r{c['replicate']}/{c['condition']}",
        "mean": _three(in_ms, "ttft_s_mean", "{:.1f}"),
        "p90": _three(in_ms, "ttft_s_p90", "{:.1f}"),
    }


DECISION_COLUMNS = (
    Column("replicate", "replicate"),
    Column("statement", "decision"),
    Column("predicted", "predicted"),
    Column("verdict", "observed"),
    Column("prediction", "prediction"),
    Column("evidence", "counts"),
)


def _decision(d: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "replicate": f"r{d['replicate']}",
        "statement": d["statement"],
        "predicted": "holds" if d["predicted"] else "fails",
        "verdict": d["verdict"],
        "prediction": "right" if d["prediction_right"] else "wrong",
        "evidence": d["evidence"],
    }


def _backend(manifests: Mapping[str, Mapping[str, Any]]) -> str:
    """The engines and router every number of the section comes from."""
    found = {
        f"{_engine(m)} behind {m['fleet']['router']['name']} {m['fleet']['router']['version']}"
        for m in manifests.values()
    }
    return "; ".join(sorted(found)) or "vllm (no fleet run yet)"


# plain text: the same paragraphs are Markdown in reports/fleet.md and HTML in report.html
REGISTRATION = (
    "Registered in commit {commit} ({committed_at}), before the first server started. "
    "Each vllm-router policy is predicted by its nearest router model (consistent_hash "
    "by session_affinity: the same rule, never move a session, but the router's own "
    "hash picks the replica). Decisions are on counts (cached tokens, lost prefixes, "
    "prefill recomputed), judged on what vLLM reported; time to first token is "
    "registered-exploratory."
)
SIDES = (
    "Registered: the fleet rule set on the planned arrivals behind the registered model; "
    "re-run: the same rules on the run's observed arrivals and placement (rearrival "
    "compare); vLLM: what the servers reported. A request is timing-dependent only where "
    "its replica's predicted pool had evicted before admitting it, or where the run's "
    "records show requests on its replica admitted or finished on the other side of its "
    "admission or tool wait than in the prediction."
)


def fleet_section(inputs: FleetReportInputs) -> Section:
    """The section: what ran, the counts on three sides, TTFT, every decision."""
    conditions = pd.read_csv(inputs.decisions_dir / CONDITIONS_FILE).to_dict("records")
    decisions = pd.read_csv(inputs.decisions_dir / DECISIONS_FILE).to_dict("records")
    record = json.loads(inputs.prereg_record.read_text())
    manifests = {k: json.loads((r / "manifest.json").read_text()) for k, r in inputs.runs.items()}
    frames = {k: pd.read_parquet(d / REQUESTS_FILE) for k, d in inputs.comparisons.items()}
    backend = _backend(manifests)
    registration = REGISTRATION.format(
        commit=record["commit"][:12], committed_at=record["committed_at"]
    )
    blocks = (
        Heading("What ran"),
        _table(SERVED_COLUMNS, _served(manifests), backend),
        Heading("Placement, cached tokens and lost prefixes"),
        Prose(SIDES),
        _table(COUNT_COLUMNS, [_counts(c) for c in conditions], backend),
        cached_tokens_figure(frames, backend),
        Heading("Time to first token (exploratory)"),
        _table(TTFT_COLUMNS, [_ttft(c) for c in conditions], backend),
        ttft_figure(frames, backend),
        Heading("Decisions"),
        _table(DECISION_COLUMNS, [_decision(d) for d in decisions], backend),
    )
    title = f"A study on a real fleet: {record['study']}"
    return Section(SECTION_ID, title, backend, blocks, (inputs.description, registration))
