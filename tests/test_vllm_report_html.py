"""The vLLM study's section of the HTML report (docs/DESIGN.md §13, §15): built once from
what the stages wrote, rendered as reports/vllm.md, as the section file the HTML report
composes and as SVG figures; the HTML report composed of section files only, so another
engine's section joins it as one more file.

The runs are the predictor's own engine under the profile's step cost
(tests/vllm_agreement_cases.py), one on a pool that evicts across tool waits and one on
a pool that never does, with the vLLM tables and comparisons the stages compute from
them: no server starts here (`make all-vllm` renders the real section in .ci/run).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from html_measure import CHROMIUM, table_widths
from vllm_agreement_cases import configuration, evicting_plan, profile_file, simulated_run

from rearrival.config.study import Study, load_study_config
from rearrival.errors import StageError
from rearrival.judge.collect import collect_channels
from rearrival.judge.predictions import predict_study
from rearrival.judge.vllm_agreement import compare_run, write_agreement
from rearrival.judge.vllm_tables import vllm_tables
from rearrival.measure.records import read_run
from rearrival.model.cost.vllm_profile import VllmStepCost, load_vllm_profile
from rearrival.report.engine import engine_html, write_engine_report
from rearrival.report.figure_model import Figure
from rearrival.report.sections import (
    Heading,
    Prose,
    Section,
    read_section,
    section_markdown,
    section_sequence,
    write_section,
)
from rearrival.report.table_model import Column, Part, Table
from rearrival.report.vllm import VllmSection, vllm_section, withheld_reasons

REPO = Path(__file__).resolve().parents[1]
COST = VllmStepCost(4e-3, 5e-4, 4e-5, 0.0)
POOLS = {"evicting": 20, "roomy": 64}


def decisions() -> pd.DataFrame:
    """One comparison withheld on its channels, one withheld for a missing replicate."""
    common = {"replicates": 1, "ratio_pred": 0.9, "ratio_obs_a": 0.91, "error": 0.01}
    return pd.DataFrame(
        [
            common
            | {"comparison": "roomy", "ratio_obs_b": 0.5, "tau": 0.02, "channel_diff": 0.41}
            | {"verdict": "withheld", "note": None},
            common
            | {"comparison": "other", "ratio_obs_b": None, "tau": 0.02, "channel_diff": None}
            | {"verdict": "withheld", "note": "not judged: replicate 1 of other missing"},
        ]
    )


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> VllmSection:
    """One study of two configurations, one run each, with its tables and comparisons."""
    tmp = tmp_path_factory.mktemp("vllm-study")
    plan = evicting_plan()
    profile = load_vllm_profile(profile_file(tmp / "profile.yaml", COST))
    confs, replicates, records = {}, [], []
    for name, blocks in POOLS.items():
        conf = configuration(blocks)
        replicate = tmp / "runs" / name / f"n{plan.n}_r0"
        run_dir = simulated_run(replicate, plan, conf, COST, name=name)
        manifest = json.loads((run_dir / "manifest.json").read_text())
        manifest["configuration"]["name"] = name  # as the run stage names it
        (run_dir / "manifest.json").write_text(json.dumps(manifest))
        confs[name], replicates, records = conf, [*replicates, replicate], [*records, run_dir]
    study = Study("agree", "validation", "", (plan.n,), tuple(POOLS), ("wait",), 1)
    predicted = predict_study(1, study, lambda n, r: plan, confs, profile)
    tables = vllm_tables(
        [read_run(r) for r in records],
        lambda n, r: plan,
        confs,
        predicted.summaries,
        predicted.requests,
        collect_channels(replicates, None, profile),
    )
    agreements = [
        write_agreement(compare_run(read_run(r), plan, profile, "plan"), tmp / "agreement" / n)
        for n, r in zip(POOLS, records, strict=True)
    ]
    prereg = {"commit": "c" * 40, "committed_at": "T", "files": {"x/profile.yaml": "ab" * 32}}
    return VllmSection(
        "agree",
        prereg,
        decisions(),
        tables["runs"],
        tables["rounds"],
        tables["requests"],
        agreements,
    )


@pytest.fixture(scope="module")
def section(study) -> Section:
    return vllm_section([study])


def test_the_section_shows_each_configuration_predicted_against_vllm(study, section):
    """What ran where (from the runs' manifests), the registration, the decisions with
    why they are withheld, Tables VA1-VA3, and the three figures drawn."""
    text = section_markdown(section, "vllm/figures", level=1)
    engine = json.loads((Path(study.agreements[0]) / "summary.json").read_text())["run"]
    assert section.backend == f"{engine['backend']} ({engine['device']})" == "vllm (cpu)"
    assert section.lead[0].startswith(
        f"vLLM {engine['vllm_version']} on {engine['device']} serving {engine['model']}"
    )
    requests = int(study.runs["requests"].sum())
    assert f"(planned arrivals): {requests} of {requests}" in text
    for heading in ("Table VA1", "Table VA2", "Table VA3", "Reuse by round", "Decisions"):
        assert heading in text
    assert "roomy is withheld: channels A and B disagree on the ratio by 0.4100" in text
    assert "other is withheld: not judged: replicate 1 of other missing" in text
    assert "profile.yaml, sha256 abababababab" in text
    drawn = {f.id for f in section.figures if f.svg}
    assert drawn == {"agree_cached_tokens", "agree_lost_prefixes", "agree_device_time"}
    assert "![Cached tokens per request, study agree](vllm/figures/agree_cached_tokens.svg)" in text
    lost = study.runs.set_index("configuration")["re_arrivals_lost_observed"]
    assert lost["evicting"] > 0 == lost["roomy"]  # the figures have something to show


def test_withheld_reasons_come_from_each_row():
    assert withheld_reasons(decisions().assign(verdict="pass")) == []
    assert withheld_reasons(pd.DataFrame()) == []


def test_the_stage_writes_markdown_section_file_and_figures_the_same_bytes_twice(study, tmp_path):
    """`rearrival study vllm-report` output is deterministic (a second `make all-vllm`
    rewrites nothing), and the section file holds every figure inline."""
    written = []
    for k in range(2):
        out = tmp_path / str(k)
        figures = write_section(vllm_section([study]), out / "section.json", out / "figures")
        written.append({p.name: p.read_bytes() for p in [out / "section.json", *figures]})
    assert written[0] == written[1]
    assert set(written[0]) == {
        "section.json",
        "agree_cached_tokens.svg",
        "agree_lost_prefixes.svg",
        "agree_device_time.svg",
    }
    data = read_section(tmp_path / "0" / "section.json")
    svgs = [b["svg"] for b in data["blocks"] if b["kind"] == "figure"]
    assert [s + "\n" for s in svgs] == [
        (tmp_path / "0" / "figures" / f"agree_{n}.svg").read_text()
        for n in ("cached_tokens", "lost_prefixes", "device_time")
    ]


def _config(tmp_path: Path) -> Path:
    raw = (REPO / "config" / "vllm.yaml").read_text()
    raw = raw.replace("config/vllm_tools.json", str(REPO / "config" / "vllm_tools.json"))
    raw = raw.replace(
        "src/rearrival/data/profile_vllm_tiny_qwen3_cpu.yaml",
        str(REPO / "src/rearrival/data/profile_vllm_tiny_qwen3_cpu.yaml"),
    )
    path = tmp_path / "vllm.yaml"
    path.write_text(raw)
    return path


def other_engine() -> Section:
    """A second real-engine section, as another study's stage would build it (a fleet)."""
    table = Table(
        "F1",
        "Placement per condition",
        "Which replica served each request.",
        (
            Part(
                "rows",
                (Column("policy", "policy"), Column("hits", "hits", "int")),
                ({"policy": "round_robin", "hits": 12},),
            ),
        ),
        backend="vllm fleet: two servers behind vllm-router 0.1.17",
    )
    figure = Figure("fleet_ttft", "TTFT per replica", "Over the run.", "<svg></svg>", table.backend)
    blocks = (Heading("Placement"), Prose("Two servers, one router."), table, figure)
    return Section("fleet", "A study on a real fleet", table.backend, blocks)


def test_the_html_report_composes_section_files_in_order(study, tmp_path):
    """The vLLM section and a second one (another engine's) plug in as files: each under
    its own anchor, every table and figure naming its backend, nothing else read."""
    cfg = load_study_config(_config(tmp_path))
    files = []
    for built in (vllm_section([study]), other_engine()):
        path = tmp_path / built.id / "section.json"
        write_section(built, path, tmp_path / built.id / "figures")
        files.append(path)
    html_path = tmp_path / "report.html"
    write_engine_report(cfg, files, html_path)
    html = html_path.read_text()
    assert html.index('id="section-vllm"') < html.index('id="section-fleet"')
    assert "Backend: vllm (cpu); vllm fleet: two servers" in html
    assert html.count("<svg") == 4
    assert 'id="figure-agree_cached_tokens"' in html
    produced = re.findall(r"Produced by: ([^.<]*)", html)
    assert len(produced) == html.count('class="caption"') and all(produced)
    assert "<h4>Table F1: Placement per condition</h4>" in html
    assert "the emulated twin produced none of them" in html
    assert engine_html(cfg, section_sequence(files)) == html
    with pytest.raises(StageError, match="sections fleet given twice"):
        section_sequence([files[1], files[1]])


def test_a_section_file_from_elsewhere_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "section.json"
    bad.write_text(json.dumps({"format": 99}))
    with pytest.raises(StageError, match=r"section\.json: format 99, expected 1; rerun"):
        read_section(bad)
    bad.write_text(json.dumps({"format": 1, "id": "x"}))
    with pytest.raises(StageError, match="lacks title, backend, lead, blocks"):
        read_section(bad)
    bad.write_text("{")
    with pytest.raises(StageError, match="not a readable section file"):
        read_section(bad)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not on PATH")
def test_every_table_of_the_section_fits_its_box(study, tmp_path):
    """VA1 has 14 columns: at 1,024 px it wraps its cells instead of scrolling sideways."""
    cfg = load_study_config(_config(tmp_path))
    path = tmp_path / "section.json"
    write_section(vllm_section([study]), path, tmp_path / "figures")
    html = engine_html(cfg, section_sequence([path]))
    widths = table_widths(html, 1024, tmp_path)
    assert len(widths) == html.count("<table>") > 5
    assert all(table <= box for table, box in widths), widths
