"""The report stage (docs/DESIGN.md §13) on a tiny but real results tree.

The tree is built with the pipeline's own stage functions (plans, predictions, emulated
runs, channel tables, decisions, injection) for a small study definition, without git:
the prereg records are written by hand because the report only reads their shas. The
report only reads what the stages wrote; it simulates nothing.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import yaml

from rearrival.config.calibration import PUBLISHED
from rearrival.config.study import load_study_config
from rearrival.judge.collect import collect_channels
from rearrival.judge.decisions import decision_table
from rearrival.judge.fixed_arrivals import (
    FixedArrivalError,
    fixed_arrival_device_s,
    fixed_arrival_frame,
    observed_rearrivals,
)
from rearrival.judge.predictions import predict_study
from rearrival.measure.backends import BackendSettings, RunRequest, run_backend
from rearrival.model.configuration import RblnConfiguration
from rearrival.model.cost.profile import load_profile, profile_bytes, profile_sha256
from rearrival.parquet import write_frame
from rearrival.report.render import render_tree
from rearrival.report.results import ReportError, Results
from rearrival.report.table_model import Column, Part, Table, display, table_csv, tex_escape
from rearrival.report.tables import TABLE_BUILDERS, table_family
from rearrival.vocabulary import RULE_SETS
from rearrival.workflow.plans import make_plans, plan_file, read_study_plan
from rearrival.workflow.predict import PredictionFiles, predict
from rearrival.workflow.run import injection, run_slots

PAPER_TABLES = ("III", "VI", "VIII", "IX", "X", "XI", "XII", "XIII", "XIV", "XV", "S1", "S8", "S9")
SRC = Path(__file__).resolve().parents[1] / "src" / "rearrival"

TINY_CONFIG = {
    "backend": "emulated",
    "study_seed": 4242,
    "replicates": 2,
    "configurations": {
        "baseline": {"buckets": [1, 2, 4], "batch_size": 4},
        "grid3": {"buckets": [1, 2, 3, 4], "batch_size": 4},
        "slots8": {"buckets": [1, 2, 4, 8], "batch_size": 8},
        "sat12": {"buckets": [1, 4, 12], "batch_size": 12},
    },
    "studies": {
        "grid": {
            "kind": "comparison",
            "description": "grid",
            "n": [4],
            "configurations": ["baseline", "grid3"],
            "variants": ["control", "wait"],
            "seed_block": 1,
        },
        "slots": {
            "kind": "comparison",
            "description": "slots",
            "n": [5],
            "configurations": ["baseline", "slots8"],
            "variants": ["wait"],
            "seed_block": 2,
        },
        "validation": {
            "kind": "validation",
            "description": "validation",
            "n": [5, 6],
            "configurations": ["baseline", "slots8"],
            "variants": ["wait"],
            "seed_block": 3,
            "rule": "fixed",
        },
        "saturation": {
            "kind": "saturation",
            "description": "saturation",
            "n": [5],
            "configurations": ["baseline", "slots8", "sat12"],
            "variants": ["wait"],
            "seed_block": 4,
        },
        "repeats": {
            "kind": "repeats",
            "description": "repeats",
            "n": [5],
            "configurations": ["baseline"],
            "variants": ["wait"],
            "repeats": 2,
            "seed_block": 5,
        },
    },
    "decision": {"confirmatory_n": [5], "exploratory_n": [6], "bootstrap_resamples": 200},
    "injection": {
        "background_sessions": 2,
        "background_gen_tokens": 24,
        "injected_prompt_tokens": [256, 1024],
        "inject_at_s": 0.2,
    },
}


def _short_plans(plans_dir: Path) -> None:
    """Shorten generations so the emulated runs take milliseconds (inputs stay valid)."""
    from rearrival.model.plans.plan import load_plan, write_plan

    for path in sorted(plans_dir.glob("*.parquet")):
        plan = load_plan(path)
        sessions = tuple(
            replace(
                s,
                gen_tokens=min(s.gen_tokens, 40),
                followup_gen_tokens=min(s.followup_gen_tokens, 40),
                tool_wait_s=min(s.tool_wait_s, 1.5),
            )
            for s in plan.sessions
        )
        write_plan(replace(plan, sessions=sessions), path)


def build_tree(root: Path) -> Path:
    """results/ with plans, predictions, runs, channels, decisions, prereg, injection."""
    config_path = root / "config.yaml"
    config_path.write_text(yaml.safe_dump(TINY_CONFIG))
    cfg = load_study_config(config_path)
    results = root / "results"
    for name, study in cfg.studies.items():
        plans_dir = results / "plans" / name
        make_plans(cfg, name, plans_dir)
        _short_plans(plans_dir)
        predictions = results / "predictions" / f"{name}.parquet"
        predict(cfg, name, plans_dir, prediction_files(results, name))
        commit = f"{sum(map(ord, name)):040x}"
        prereg = {"study": name, "commit": commit, "committed_at": "2026-01-01T00:00:00+00:00"}
        # the record names the sha256 of the profile committed beside the predictions
        files = {f"preregistration/{name}/profile.yaml": profile_sha256(None)}
        (results / "prereg").mkdir(parents=True, exist_ok=True)
        (results / "prereg" / f"{name}.json").write_text(
            json.dumps(prereg | {"history": [prereg], "files": files})
        )
        for n in study.n:
            for replicate in range(cfg.replicates):
                plan = read_study_plan(plans_dir, n, replicate)
                slots = run_slots(cfg, study, n, replicate)
                for slot in slots:
                    run = RunRequest(
                        study=name,
                        plan=plan,
                        plan_path=plan_file(plans_dir, n, replicate),
                        configuration=cfg.configurations[slot.configuration],
                        variant=slot.variant,
                        label=slot.label,
                        replicate=replicate,
                        seed=slot.seed,
                        condition_order=[s.label for s in slots],
                        prereg=prereg,
                    )
                    run_backend(
                        BackendSettings.from_study_config(cfg),
                        run,
                        results / "runs" / name / f"n{n}_r{replicate}" / slot.label,
                    )
        channels = results / "channels" / f"{name}.parquet"
        collect_channels(sorted((results / "runs" / name).iterdir()), channels)
        text, _ = decision_table(
            study,
            cfg.replicates,
            cfg.study_seed,
            pd.read_parquet(channels),
            pd.read_parquet(predictions),
            cfg.decision,
        )
        (results / "decisions").mkdir(parents=True, exist_ok=True)
        (results / "decisions" / f"{name}.csv").write_text(text)
        if study.kind == "validation":
            fixed = fixed_arrival_frame(
                study,
                pd.read_parquet(channels),
                lambda n, k, d=plans_dir: read_study_plan(d, n, k),
            )
            write_frame(fixed, results / "fixed_arrivals" / f"{name}.parquet")
    injection(cfg, results / "injection" / "gaps.parquet")
    return config_path


def prediction_files(results: Path, name: str) -> PredictionFiles:
    """Where the predict stage writes a study's tables under ``results``."""
    folder = results / "predictions"
    return PredictionFiles(
        folder / f"{name}.parquet",
        folder / f"{name}.requests.parquet",
        folder / f"{name}.evictions.parquet",
    )


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("report")
    build_tree(root)
    return root


@pytest.fixture(scope="module")
def rendered(tree) -> Path:
    out = tree / "reports"
    render_tree(load_study_config(tree / "config.yaml"), tree / "results", out)
    return out


def _csv(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, keep_default_na=False, dtype=str)


def test_every_table_in_three_formats_with_run_ids(rendered):
    index = json.loads((rendered / "tables" / "index.json").read_text())
    for table in PAPER_TABLES:
        files = [rendered / "tables" / f"table_{table}.{suffix}" for suffix in ("csv", "md", "tex")]
        assert all(f.is_file() and f.stat().st_size > 0 for f in files), table
        assert index["tables"][table] == [str(f.relative_to(rendered)) for f in files]
    for table in ("III", "VI", "IX", "X", "XI", "XII", "XIII", "S1", "S9"):
        frame = _csv(rendered / "tables" / f"table_{table}.csv")
        assert len(frame) > 0 and "run_ids" in frame, table
        from_runs = frame[frame["run_ids"] != ""]
        assert len(from_runs) > 0, table
        # every id names a run directory's manifest under results/runs
        for run_id in " ".join(from_runs["run_ids"]).split():
            assert re.fullmatch(r"[A-Za-z0-9._-]+\.r\d+\.emulated\.[0-9a-f]{8}", run_id)
    assert (rendered / "report.html").is_file()


def test_tables_are_computed_from_records(tree, rendered):
    """Table III's sums equal the channel table's sums for the same runs (oracle)."""
    channels = pd.read_parquet(tree / "results" / "channels" / "slots.parquet")
    table = _csv(rendered / "tables" / "table_III.csv")
    for row in table[table["part"].str.startswith("slots")].to_dict("records"):
        runs = channels[channels["run_id"].isin(row["run_ids"].split())]
        assert len(runs) == TINY_CONFIG["replicates"]
        assert float(row["a_prefill_s"]) == pytest.approx(runs["a_prefill_s"].sum(), rel=1e-12)
        assert row["reuse"] == f"{runs['reuse_hits'].sum()}/{runs['re_arrivals'].sum()}"
        assert int(row["total_tokens"]) == runs["total_computed_tokens"].sum()


def test_a_table_changes_when_one_run_changes(tree, rendered, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(tree / "results", results)
    path = results / "channels" / "slots.parquet"
    channels = pd.read_parquet(path)
    target = channels.index[channels["configuration"] == "slots8"][0]
    channels.loc[target, "a_s"] += 1.0
    channels.loc[target, "a_prefill_s"] += 1.0
    channels.loc[target, "reuse_hits"] = 0
    channels.to_parquet(path, index=False)
    out = tmp_path / "reports"
    render_tree(load_study_config(tree / "config.yaml"), results, out)
    before = _csv(rendered / "tables" / "table_III.csv")
    after = _csv(out / "tables" / "table_III.csv")
    changed = after["run_ids"].str.contains(channels.loc[target, "run_id"], regex=False)
    assert (after[changed]["a_prefill_s"] != before[changed]["a_prefill_s"]).all()
    assert (after[changed]["reuse"] != before[changed]["reuse"]).all()
    assert after[~changed].equals(before[~changed])


def test_html_states_the_backend_and_never_calls_emulation_hardware(rendered):
    html = (rendered / "report.html").read_text()
    assert "Backend: emulated" in html
    assert "not hardware measurements" in html
    assert "real hardware" not in html
    assert "TraceLab" in html  # the tool table source is stated at the top
    assert html.count("<svg") >= 5  # figures are inline
    assert "<img" not in html and 'src="http' not in html  # self-contained
    assert f"{sum(map(ord, 'validation')):040x}" in html  # prereg shas per study


def test_hardware_runs_are_labelled_as_measurements(tree, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(tree / "results", results)
    for path in (results / "channels").glob("*.parquet"):
        frame = pd.read_parquet(path)
        frame["backend"] = "rbln"
        frame.to_parquet(path, index=False)
    render_tree(load_study_config(tree / "config.yaml"), results, tmp_path / "reports")
    html = (tmp_path / "reports" / "report.html").read_text()
    assert "real hardware" in html and "emulated substrate" not in html


def test_absent_results_are_reported_not_fatal(rendered):
    """The tiny tree has no search: S8 says so, the rest still renders."""
    s8 = (rendered / "tables" / "table_S8.md").read_text()
    assert "not produced" in s8 and "results/search/summary.json" in s8
    index = json.loads((rendered / "tables" / "index.json").read_text())
    assert any("results/search/summary.json" in line for line in index["not_produced"])
    assert "search" not in index["figures"]
    assert "Not produced" in (rendered / "report.html").read_text()


def test_templates_and_code_hold_no_paper_numbers():
    report = SRC / "report"
    sources = [*sorted((report / "templates").glob("*.j2")), *sorted(report.glob("*.py"))]
    assert sources[0].suffix == ".j2"
    for path in sources:
        text = path.read_text()
        for literal in (
            "8.25",
            "9.72",
            "0.9941",
            "0.0377",
            "17,024",
            "0.9066",
            "1.47",
            "0.0169",
            "0.0172",
            "9 of 24",
        ):
            assert literal not in text, f"{path.name} holds paper literal {literal}"


def test_fixed_arrivals_at_the_simulated_times_reproduce_the_full_simulator(small_plan):
    """Oracle: pinning re-arrivals at the times the full simulator computes changes
    nothing, so the fixed-arrival path differs only through the arrivals it is given."""
    from rearrival.model.simulator.rbln.sim import SimConfig, simulate

    conf = RblnConfiguration((1, 2, 4), 4, name="baseline")
    full = simulate(small_plan, SimConfig(buckets=(1, 2, 4), batch_size=4))
    arrivals = [r.arrival_s for r in full.requests if r.turn == 1]
    assert fixed_arrival_device_s(small_plan, conf, "wait", arrivals) == pytest.approx(
        full.device_s, rel=1e-12
    )
    later = [a + 5.0 for a in arrivals]
    assert fixed_arrival_device_s(small_plan, conf, "wait", later) != full.device_s


def test_observed_rearrivals_name_the_run_when_incomplete():
    requests = pd.DataFrame({"session": [0, 0, 1], "turn": [0, 1, 0], "send_s": [0.0, 2.5, 0.0]})
    assert observed_rearrivals(requests, 1, "run x") == [2.5]
    with pytest.raises(FixedArrivalError, match=r"run x.*session 1"):
        observed_rearrivals(requests, 2, "run x")


def test_every_table_has_a_family_for_the_snakemake_report():
    """`snakemake --report` groups reports/tables/ by family (rules/report.smk); the
    family is the module a table is built in, so a new table cannot go ungrouped."""
    assert {table_family(t) for t in TABLE_BUILDERS} == {
        "mechanisms",
        "calibration",
        "costs",
        "validation",
        "search",
        "supplementary",
    }
    assert [t for t in TABLE_BUILDERS if table_family(t) == "mechanisms"] == ["III", "VI", "M"]
    assert table_family("scorecard") == "scorecard"


def test_formats_escape_and_keep_full_precision():
    table = Table(
        "T",
        "a_b & c",
        "50% of {x}",
        (
            Part(
                "p",
                (Column("v", "value", "f2"), Column("run_ids", "runs", "ids")),
                ({"v": 1 / 3, "run_ids": "a b"},),
            ),
        ),
    )
    assert table_csv(table).splitlines() == ["part,v,run_ids", f"p,{1 / 3!r},a b"]
    assert display(1 / 3, "f2") == "0.33" and display(0.125, "pct2") == "12.50%"
    assert display("a b c", "ids") == "3 run(s)" and display(None, "f4") == ""
    assert tex_escape("a_b & 50%") == r"a\_b \& 50\%"


def test_cli_tables_rerenders_same_bytes_and_reruns_nothing(tree, rendered, tmp_path):
    from typer.testing import CliRunner

    from rearrival.cli import app

    before = {p: p.stat().st_mtime_ns for p in (tree / "results").rglob("*") if p.is_file()}
    out = tmp_path / "cli"
    result = CliRunner().invoke(
        app,
        [
            "tables",
            "--config",
            str(tree / "config.yaml"),
            "--results",
            str(tree / "results"),
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    # same results, same bytes: the CLI's render equals the library's, file for file
    for path in rendered.rglob("*"):
        if path.is_file():
            assert (out / path.relative_to(rendered)).read_bytes() == path.read_bytes(), path
    after = {p: p.stat().st_mtime_ns for p in (tree / "results").rglob("*") if p.is_file()}
    assert after == before


def test_report_opens_with_the_scorecard_and_writes_it_beside_the_tables(rendered):
    from rearrival.report.findings import findings
    from rearrival.report.paper_numbers import load_paper_numbers

    html = (rendered / "report.html").read_text()
    assert html.index('id="scorecard"') < html.index('id="prereg"') < html.index('id="tables"')
    card = _csv(rendered / "tables" / "scorecard.csv")
    expected = [f.id for f in findings(load_paper_numbers())]
    assert list(card["id"]) == expected
    assert set(card["verdict"]) <= {"holds", "does not hold", "not comparable"}
    # the tiny study has none of the paper's studies by name or search: those findings
    # are not comparable, and every hardware finding is not judged on the emulator
    by_id = card.set_index("id")
    assert by_id.loc["search_pick", "verdict"] == "not comparable"
    assert by_id.loc["channel_r", "verdict"] == "not comparable"
    # KV memory and the injection stall are computed from this tree and hold
    assert by_id.loc["kv_memory", "verdict"] == "holds"
    assert by_id.loc["injection", "verdict"] == "holds"
    index = json.loads((rendered / "tables" / "index.json").read_text())
    assert index["scorecard"]["files"] == ["tables/scorecard.csv", "tables/scorecard.md"]
    assert sum(index["scorecard"]["counts"].values()) == len(expected)
    assert (rendered / "tables" / "scorecard.md").read_text().startswith("## Scorecard")


def test_cli_tables_scorecard_prints_one_line_per_finding(tree, tmp_path):
    from typer.testing import CliRunner

    from rearrival.cli import app

    out = tmp_path / "cli"
    result = CliRunner().invoke(
        app,
        [
            "tables",
            "--config",
            str(tree / "config.yaml"),
            "--results",
            str(tree / "results"),
            "--out",
            str(out),
            "--scorecard",
        ],
    )
    assert result.exit_code == 0, result.output
    card = _csv(out / "tables" / "scorecard.csv")
    lines = [
        line
        for line in result.stdout.splitlines()
        if line.split("  ")[0].strip() in ("holds", "does not hold", "not comparable")
    ]
    assert len(lines) == len(card)
    for line, (_, row) in zip(lines, card.iterrows(), strict=True):
        assert line.startswith(row["verdict"]) and f" {row['id']}: paper " in line
    assert result.stdout.rstrip().splitlines()[-1].endswith("not comparable")


def test_cli_tables_scorecard_prints_what_the_report_stage_wrote(tree, tmp_path, monkeypatch):
    """`tables --scorecard` re-rendered the whole report (17-22 s) before it printed
    (issue 29): a scorecard newer than the results and the config is printed as written,
    the same lines a render prints; a stale one is rendered again first, saying why."""
    import os

    from typer.testing import CliRunner

    from rearrival.cli import app
    from rearrival.report import render

    config = tmp_path / "config.yaml"
    config.write_text((tree / "config.yaml").read_text())
    out = tmp_path / "reports"
    args = ["tables", "--config", str(config), "--results", str(tree / "results")]
    args += ["--out", str(out), "--scorecard"]
    runner = CliRunner()
    fresh = runner.invoke(app, args)
    assert fresh.exit_code == 0, fresh.output
    renders, original = [], render.build_report
    monkeypatch.setattr(render, "build_report", lambda *a: renders.append(a) or original(*a))
    cached = runner.invoke(app, args)
    assert cached.exit_code == 0, cached.output
    assert renders == []
    assert cached.stdout.splitlines()[0] == (
        f"{out / 'tables' / 'scorecard.csv'}: written by the report stage, newer than "
        f"{tree / 'results'} and {config}"
    )
    assert cached.stdout.splitlines()[1:] == fresh.stdout.splitlines()[1:]
    later = (out / "tables" / "index.json").stat().st_mtime + 10
    os.utime(config, (later, later))
    stale = runner.invoke(app, args)
    assert stale.exit_code == 0 and len(renders) == 1
    assert f"{config} is newer than {out / 'tables' / 'index.json'}" in stale.stderr
    assert stale.stdout.splitlines()[1:] == fresh.stdout.splitlines()[1:]


# --- the profile every number rests on, and the second evaluation ------------------------


def dearer_profile(path: Path) -> Path:
    """The published constants with prefill three times and alpha twice as dear: another
    profile for the same model, so every priced number moves."""
    tree = yaml.safe_load(profile_bytes(None))
    tree["profile_version"] = "test-dearer/1"
    tree["prefill"]["per_chunk_s"]["value"] *= 3
    tree["decode"]["alpha_ms"]["value"] *= 2
    path.write_text(yaml.safe_dump(tree))
    return path


def published_exploratory(tree: Path, tmp_path: Path) -> Path:
    """A copy of the tree whose exploratory evaluation under the published constants is
    the tables its stages wrote with them (what a study with another profile gets)."""
    results = tmp_path / "results"
    shutil.copytree(tree / "results", results)
    for table in ("predictions", "channels", "decisions", "fixed_arrivals"):
        shutil.copytree(results / table, results / "exploratory" / PUBLISHED / table)
    return results


@pytest.fixture(scope="module")
def stored(tree) -> Results:
    return Results(load_study_config(tree / "config.yaml"), tree / "results")


def test_another_profile_reprices_predictions_and_channel_a_only(stored, tmp_path):
    """What the exploratory stages compute under another profile: the predictions and
    channel A move, every measured quantity stays, and so does the observed channel B."""
    dearer = load_profile(dearer_profile(tmp_path / "dearer.yaml"))
    study = stored.cfg.study("validation")
    plans = stored.root / "plans" / "validation"
    repriced = predict_study(
        stored.cfg.replicates,
        study,
        lambda n, k: read_study_plan(plans, n, k),
        {name: stored.cfg.configurations[name] for name in study.configurations},
        dearer,
    ).summaries
    predicted = stored.predictions("validation")
    assert (repriced["device_s"] > predicted["device_s"]).all()
    runs = stored.channels("validation")
    complete = runs["status"] == "complete"
    replicate_dirs = sorted({Path(d).parent for d in runs["run_dir"]})
    mine = collect_channels(replicate_dirs, None, dearer)
    assert (mine[complete]["a_s"] > runs[complete]["a_s"]).all()
    measured = ["b_s", "reuse_hits", "decode_steps", "padding_ratio", "histogram"]
    pd.testing.assert_frame_equal(mine[measured], runs[measured])
    text, _ = decision_table(
        study, stored.cfg.replicates, stored.cfg.study_seed, mine, repriced, stored.cfg.decision
    )
    rejudged, judged = pd.read_csv(io.StringIO(text)), stored.decisions("validation")
    pd.testing.assert_series_equal(rejudged["ratio_obs_b"], judged["ratio_obs_b"])
    assert (rejudged["ratio_pred"] != judged["ratio_pred"]).all()


def test_fixed_arrivals_are_priced_with_the_profile_they_are_given(stored, tmp_path):
    """The fixed-arrival simulator must use the constants the full predictions used, or
    Table XI would compare two profiles instead of two arrival rules."""
    dearer = load_profile(dearer_profile(tmp_path / "dearer.yaml"))
    study = stored.cfg.study("validation")
    plans = stored.root / "plans" / "validation"
    channels = stored.channels("validation")
    repriced = fixed_arrival_frame(
        study, channels, lambda n, k: read_study_plan(plans, n, k), dearer
    )
    published = stored.fixed_arrivals("validation")
    assert len(published) == len(repriced) > 0
    assert (repriced["device_s"] > published["device_s"]).all()
    xi = TABLE_BUILDERS["XI"](stored).parts[0].rows
    assert xi and all(row.get("ratio_pred_fixed") is not None for row in xi)


def test_the_report_reads_only_the_files_it_is_given(tree):
    """Declared files only: a table whose file the report was not given is not
    produced, and a run directory it was not given is refused, never read."""
    cfg = load_study_config(tree / "config.yaml")
    results = tree / "results"
    given = [results / "decisions" / "slots.csv", results / "channels" / "slots.parquet"]
    res = Results(cfg, results, declared=given)
    assert res.decisions("slots") is not None and res.channels("grid") is None
    assert any("channels/grid.parquet not produced" in line for line in res.missing)
    run_dir = res.channels("slots")["run_dir"].iloc[0]
    with pytest.raises(ReportError, match="a run the report was not given"):
        res.run_path(run_dir)


def test_header_names_the_profile_and_its_sha256_per_registration(rendered):
    html = (rendered / "report.html").read_text()
    header = html[: html.index('id="scorecard"')]
    assert "published (the paper&#39;s RBLN-CA25 constants" in header
    assert f"sha256 {profile_sha256(None)}" in header
    assert "5 of 5 registrations committed this sha256." in header
    prereg = html[html.index('id="prereg"') : html.index('id="reading"')]
    assert prereg.count(profile_sha256(None)) == 5
    # a published study with no calibrated profile in its tree has no second evaluation
    assert "No second evaluation with another profile" in html
    index = json.loads((rendered / "tables" / "index.json").read_text())
    assert index["profile"] == {"name": PUBLISHED, "sha256": profile_sha256(None)}
    assert index["scorecard"]["other_profile"] is None


def test_scorecard_judges_again_with_the_published_constants(tree, rendered, tmp_path):
    """A study configured with another profile file: its second evaluation reads the
    exploratory stages' tables under results/exploratory/published/ (here the tables the
    stages wrote with the published constants) and gives exactly the verdicts (and
    numbers) of the report made from them; the header flags that every registration
    committed another profile than the config now names."""
    dearer = dearer_profile(tmp_path / "dearer.yaml")
    config = yaml.safe_load((tree / "config.yaml").read_text()) | {"profile": str(dearer)}
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    results = published_exploratory(tree, tmp_path)
    out = tmp_path / "reports"
    render_tree(load_study_config(config_path), results, out)
    published, card = (
        _csv(rendered / "tables" / "scorecard.csv"),
        _csv(out / "tables" / "scorecard.csv"),
    )
    assert list(card["other_verdict"]) == list(published["verdict"])
    assert list(card["other_ours"]) == list(published["ours"])
    for row in card.itertuples():
        differs = row.verdict != row.other_verdict
        assert row.profiles.startswith("DIFFERS") == differs, row.id
    by_id = card.set_index("id")
    assert by_id.loc["search_pick", "profiles"].startswith("not re-judged: the search ran once")
    html = (out / "report.html").read_text()
    assert f"sha256 {profile_sha256(dearer)}" in html
    studies = ", ".join(load_study_config(config_path).studies)
    assert f"Registered with another profile: {studies} (" in html
    assert (
        "published (the paper&#39;s RBLN-CA25 constants" in html[html.index('id="other-profile"') :]
    )
    index = json.loads((out / "tables" / "index.json").read_text())
    assert index["scorecard"]["other_profile"]["name"] == PUBLISHED
    assert "Second, exploratory evaluation" in (out / "tables" / "scorecard.md").read_text()


def test_s9_names_the_dummy_block_rule_and_the_engines(rendered):
    release, rule = RULE_SETS["dummy"]
    notes = " ".join((rendered / "tables" / "table_S9.md").read_text().split())  # unwrapped
    assert f"'dummy' simulator: {release} release + {rule!r}" in notes
    engine = "The emulated engine stays immediate release + 'pre-evict', which is what the real"
    assert engine + " stack does" in notes


def test_s9_reserved_rule_binds_only_where_a_slot_is_contended(stored, rendered):
    """S9's dummy simulator (deferred + reserved) moves predictions where slots run out
    and cannot where every request of every session plus the padding block fits."""
    assert RULE_SETS["dummy"] == ("deferred", "reserved")
    keys = ["n", "replicate", "configuration", "variant"]
    frame = stored.predictions("saturation").set_index(keys)
    base, dummy = (frame[frame["simulator"] == s] for s in ("base", "dummy"))
    columns = ["device_s", "reuse_hits", "decode_steps", "histogram"]
    roomy = base.index.get_level_values("configuration") == "sat12"  # 12 slots >= 2 x 5 + 1
    pd.testing.assert_frame_equal(dummy[roomy][columns], base[roomy][columns])
    contended = ~roomy  # 4 and 8 slots for 5 sessions
    assert (dummy[contended]["device_s"] != base[contended]["device_s"]).any()
    errors = _csv(rendered / "tables" / "table_S9.csv")
    errors = errors[errors["error_base"] != ""]
    assert (errors["ratio_dummy"] != errors["ratio_base"]).any()


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not on PATH")
def test_report_renders_headless(rendered, tmp_path):
    png = tmp_path / "report.png"
    subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'ud'}",
            f"--screenshot={png}",
            "--window-size=1280,2000",
            (rendered / "report.html").as_uri(),
        ],
        check=True,
        timeout=60,
        capture_output=True,
    )
    assert png.is_file() and png.stat().st_size > 0


_MEASURE = """<script>
const table = document.querySelector("table.scorecard");
const align = (cells) => [...cells].map((c) => getComputedStyle(c).textAlign);
document.body.setAttribute("data-measure", JSON.stringify({
  table: table.scrollWidth, box: table.parentElement.clientWidth,
  headers: align(table.rows[0].cells), cells: align(table.rows[1].cells),
}));
</script></body>"""


def _measure_scorecard(html: str, width: int, tmp_path: Path) -> dict:
    """The scorecard's width against its box and each column's alignment, as headless
    chromium lays the page out in a window ``width`` pixels wide."""
    from html_measure import measured

    return measured(html, _MEASURE, width, tmp_path)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not on PATH")
@pytest.mark.parametrize("width", [1400, 1024])
def test_scorecard_fits_its_box_and_headers_align_with_their_text(tree, tmp_path, width):
    """The scorecard was clipped at 1,400 px and its headers right-aligned over
    left-aligned text (issue 29): with the second profile's columns too (the widest
    scorecard), it fits its box and aligns each header with its column."""
    config = yaml.safe_load((tree / "config.yaml").read_text())
    config["profile"] = str(dearer_profile(tmp_path / "dearer.yaml"))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    results = published_exploratory(tree, tmp_path)
    render_tree(load_study_config(tmp_path / "config.yaml"), results, tmp_path / "reports")
    html = (tmp_path / "reports" / "report.html").read_text()
    assert 'id="other-profile">Every finding is judged twice' in html
    measured = _measure_scorecard(html, width, tmp_path)
    assert measured["table"] <= measured["box"], measured
    assert measured["headers"] == measured["cells"] == ["left"] * len(measured["cells"])


def test_scorecard_headers_are_aligned_like_their_cells(rendered):
    """Without a browser: the stylesheet aligns the scorecard's header cells as its body
    cells, and the table is laid out to its box's width."""
    html = (rendered / "report.html").read_text()
    rule = re.search(r"table\.scorecard th, table\.scorecard td \{([^}]*)\}", html)
    assert rule and "text-align: left" in rule.group(1)
    layout = re.search(r"table\.scorecard \{([^}]*)\}", html)
    assert layout and "table-layout: fixed" in layout.group(1) and "width: 100%" in layout.group(1)


def test_every_html_table_scrolls_inside_its_own_box(rendered):
    """Wide tables (III, IX) scroll sideways in a box instead of running past the page."""
    from html.parser import HTMLParser

    class Tables(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.open: list[tuple[str, str]] = []
            self.parents: list[tuple[str, str]] = []

        def handle_starttag(self, tag, attrs):
            if tag == "table":
                self.parents.append(self.open[-1] if self.open else ("", ""))
            if tag in ("div", "table", "section", "body"):
                self.open.append((tag, dict(attrs).get("class") or ""))

        def handle_endtag(self, tag):
            if tag in ("div", "table", "section", "body"):
                self.open.pop()

    html = (rendered / "report.html").read_text()
    parser = Tables()
    parser.feed(html)
    assert len(parser.parents) > 10
    assert set(parser.parents) == {("div", "wide")}
    assert re.search(r"\.wide\s*\{[^}]*overflow-x:\s*auto", html)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not on PATH")
def test_every_table_fits_its_box_without_scrolling_sideways(rendered, tmp_path):
    """issue 36 item 9: the wide tables (III, IX) scrolled sideways; at 1,024 px every
    table of the report now wraps its cells inside its box."""
    from html_measure import table_widths

    html = (rendered / "report.html").read_text()
    widths = table_widths(html, 1024, tmp_path)
    assert len(widths) == html.count("<table") > 10
    assert all(table <= box for table, box in widths), widths


def test_a_study_with_a_capacity_stage_shows_its_pictures_and_pick(tree, tmp_path):
    """Where the study definition has a capacity: section, the report embeds the stage's
    three pictures and prints its pick and deploy lines from results/capacity; before the
    stage ran, the section says it is not produced."""
    from typer.testing import CliRunner

    from rearrival.cli import app

    pool = tmp_path / "pool.json"
    rounds = [{"new_tokens": 120, "gen_tokens": 60, "gap_after_s": 1.5},
              {"new_tokens": 40, "gen_tokens": 40, "gap_after_s": 0.0}]  # fmt: skip
    pool.write_text(json.dumps({"sessions": [{"session": 0, "start_s": 0.0, "rounds": rounds}]}))
    config = yaml.safe_load((tree / "config.yaml").read_text())
    config["capacity"] = {"pool": str(pool), "slo": "ttft=0.3,tpot=0.03", "horizon": 60}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    cfg = load_study_config(tmp_path / "config.yaml")
    results = tmp_path / "results"
    shutil.copytree(tree / "results", results)
    render_tree(cfg, results, tmp_path / "before")
    before = (tmp_path / "before" / "report.html").read_text()
    assert '<h2 id="capacity">' in before and "Not produced: results/capacity" in before
    made = CliRunner().invoke(
        app,
        ["capacity", "--pool", str(pool), "--slo", "ttft=0.3,tpot=0.03", "--horizon", "60",
         "--warmup", "10", "--replicas", "1,2", "--num-blocks", "600", "--max-num-seqs", "8",
         "--step-cost", "0.01,0.0002,0.00002", "--grid", "2", "--rate", "0.2",
         "--resamples", "0", "--out", str(results / "capacity")],
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    render_tree(cfg, results, tmp_path / "after")
    html = (tmp_path / "after" / "report.html").read_text()
    section = html[html.index('<h2 id="capacity">') :]
    for name in ("attainment_vs_rate", "goodput_per_replica", "device_s_vs_rate"):
        assert f'<figure id="capacity-{name}">\n<img src="data:image/png;base64,iVBOR' in section
    assert "pick at 0.2 sessions/s" in section and "deploy: vllm serve" in section
    assert "Not produced: results/capacity" not in html and 'src="http' not in html
