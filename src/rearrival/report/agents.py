"""The report section on agent sessions (docs/DESIGN.md "Agent sessions"): a session
timeline with several tool waits per session, and the section's reading paragraphs,
for studies whose ``workload`` makes sessions of many tool calls.

Tables A1-A3 are built in ``rearrival.report.tables.agents``; this module draws the
figure and writes the text from those tables and the study's own search summary.
"""

from __future__ import annotations

from typing import Any

from rearrival.config.study import Study
from rearrival.measure.records import read_run
from rearrival.measure.records.contract import ROUND_COLUMN
from rearrival.report.figure_model import Figure, absent, pyplot, round_spans, to_svg
from rearrival.report.results import Results
from rearrival.report.table_model import Table, display

SPAN_COLOURS = {
    "queue": "#bdbdbd",
    "prefill": "#c44e52",
    "decode": "#4c72b0",
    "tool wait": "#f2c14e",
}


def session_spans(requests: Any) -> list[dict[str, Any]]:
    """Per session: queue, prefill and decode of every round, the tool wait between
    consecutive rounds, and a reuse mark (hit or miss) at every re-arrival's send."""
    rows = []
    for session, group in requests.groupby("session"):
        rounds = sorted(group.to_dict("records"), key=lambda r: int(r[ROUND_COLUMN]))
        spans, marks = [], []
        for k, r in enumerate(rounds):
            spans += round_spans(r)
            if k > 0:
                spans.append(("tool wait", rounds[k - 1]["complete_s"], r["send_s"]))
                cached = r["cached_tokens"]
                marks.append((r["send_s"], bool(cached == cached and cached and cached > 0)))
        rows.append({"session": int(session), "spans": spans, "marks": marks})
    return rows


def timeline_extent(rows: list[dict[str, Any]]) -> float:
    """The x-axis's end: the last span or mark plus 2 % (issue 36: the axis ran to 175 s
    while the bars ended near 90 s)."""
    ends = [end for r in rows for _, _, end in r["spans"]] + [
        t for r in rows for t, _ in r["marks"]
    ]
    finite = [float(t) for t in ends if t == t]
    return 1.02 * max(finite) if finite and max(finite) > 0 else 1.0


def _timeline_run(res: Results, study: Study) -> dict[str, Any] | None:
    """The baseline's first complete run at the study's largest N (replicate 0 first)."""
    channels = res.channels(study.name)
    if channels is None:
        return None
    chosen = channels[
        (channels["status"] == "complete")
        & (channels["configuration"] == study.baseline)
        & (channels["n"] == max(study.n))
    ].sort_values(["replicate", "condition"])
    return None if chosen.empty else chosen.iloc[0].to_dict()


def timeline_figure(res: Results, study: Study) -> Figure:
    """Session timeline of one agent-study run: several tool waits per session."""
    fid, title = f"timeline-{study.name}", f"Agent session timeline, study {study.name}"
    run = _timeline_run(res, study)
    if run is None:
        return absent(fid, title, f"study {study.name}: no complete baseline run to draw.")
    record = read_run(res.run_path(run["run_dir"]))
    rows = session_spans(record.requests)
    plt = pyplot()
    fig, ax = plt.subplots(1, 1, figsize=(10, 0.3 * len(rows) + 1.6))
    used: set[str] = set()
    for r in rows:
        y = r["session"]
        for kind, start, end in r["spans"]:
            if end > start:
                label = None if kind in used else kind
                ax.broken_barh(
                    [(start, end - start)], (y - 0.35, 0.7), color=SPAN_COLOURS[kind], label=label
                )
                used.add(kind)
        for t, hit in r["marks"]:
            name = "reuse hit" if hit else "reuse miss"
            ax.plot(
                t,
                y + 0.45,
                marker="v" if hit else "x",
                color="#2a9d4b" if hit else "#c0392b",
                markersize=5,
                label=None if name in used else name,
            )
            used.add(name)
    ax.set_xlim(0.0, timeline_extent(rows))
    ax.set_xlabel("seconds from the run's first send")
    ax.set_ylabel("session")
    ax.legend(fontsize=7, loc="upper right", ncol=3)
    backend = record.manifest["backend"]
    calls = sum(len(r["marks"]) for r in rows)
    return Figure(
        fid,
        title,
        f"Run {run['run_id']} (study {study.name}, N={run['n']}, {run['condition']}): per "
        f"session, queue, prefill and decode of every round and the tool wait before each "
        f"re-arrival ({calls} tool calls in {len(rows)} sessions); each re-arrival is "
        f"marked as reuse hit or miss. Backend: {backend}.",
        to_svg(fig, fid),
        backend,
    )


def build_agent_figures(res: Results) -> list[Figure]:
    return [timeline_figure(res, study) for study in res.agent_studies()]


def _cell(value: Any, fmt: str) -> str:
    return display(value, fmt) or "n/a"


def reading_agents(res: Results, tables: dict[str, Table]) -> list[str]:
    """The section's paragraphs: the study search's pick, reuse and cost per
    configuration, reuse by round, and the verdicts."""
    out = []
    for i, study in enumerate(res.agent_studies()):
        out += _search_paragraph(res, study)
        a1, a2, a3 = (tables[t].parts[i].rows for t in ("A1", "A2", "A3"))
        for row in a1:
            out.append(
                f"{study.name}, N={row['n']}, {row['configuration']} {row['label']}: "
                f"reuse {row['reuse']} (predicted {row['predicted_reuse'] or 'n/a'}), "
                f"padding {_cell(row['padding_ratio'], 'f3')}, channel-A ratio to the "
                f"baseline {_cell(row.get('a_ratio'), 'f4')} (predicted "
                f"{_cell(row.get('ratio_pred'), 'f4')})."
            )
        top = max(study.n)
        shares = [
            f"round {r['round']} {r['reuse_hits']}/{r['re_arrivals']}"
            for r in a2
            if r["configuration"] == study.baseline and r["n"] == top
        ]
        if shares:
            out.append(f"{study.name}, baseline at N={top}, reuse by round: {', '.join(shares)}.")
        verdicts = [f"{r['comparison']} N={r['n']}: {r['verdict']}" for r in a3 if r.get("verdict")]
        if verdicts:
            out.append(f"{study.name} verdicts: {'; '.join(verdicts)}.")
    return out


def _search_paragraph(res: Results, study: Study) -> list[str]:
    """The pick of the study's own search over agent sessions, when it has one."""
    if study.search is None:
        return []
    summary = res.load(f"study_search/{study.name}/summary.json")
    if summary is None:
        return []
    pick = summary["selected"]
    return [
        f"Study {study.name}: its own search over agent sessions "
        f"({summary['candidates']['searched']} candidates, N {summary['inputs']['n']}) "
        f"picked {pick['id']}, predicted score {_cell(pick['search_score'], 'f4')} on its "
        f"search inputs and {_cell(pick['evaluation_score'], 'f4')} on separate evaluation "
        "inputs (simulator predictions)."
    ]
