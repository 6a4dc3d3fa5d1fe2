"""rearrival capacity (docs/DESIGN.md §17 "Capacity"): the
goodput a row reports meets the SLO on the very plan `plans open` makes at that rate and
the rate x (1 + 2 x tolerance) does not; a non-monotone curve is flagged; the pick, the
deployment flags, the files and the one-line refusals."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
from conftest import TRACELAB_SAMPLE
from typer.testing import CliRunner

from rearrival.cli import app
from rearrival.errors import RearrivalError
from rearrival.model.configuration import RblnConfiguration, VllmConfiguration
from rearrival.model.fleet.latency import Slo
from rearrival.search.capacity import evaluate as evaluate_module
from rearrival.search.capacity.bisection import Trial, find_goodput, is_monotone
from rearrival.search.capacity.deploy import rbln_deployment, vllm_deployment
from rearrival.search.capacity.evaluate import Point, Workload, fleet_capacity
from rearrival.search.capacity.outputs import CAPACITY_COLUMNS
from rearrival.search.capacity.pick import choose
from rearrival.search.capacity.space import Fleet

ROUNDS = [
    {"new_tokens": 120, "gen_tokens": 400, "gap_after_s": 1.5},
    {"new_tokens": 40, "gen_tokens": 300, "gap_after_s": 3.0},
    {"new_tokens": 30, "gen_tokens": 200, "gap_after_s": 0.0},
]
HORIZON, WARMUP, SEED, TOLERANCE = "60", "10", "7", 0.02
SLO = "ttft=0.3,tpot=0.03"
STEP_COST = "0.01,0.0002,0.00002"
VLLM_KNOBS = ["--block-size", "16", "--num-blocks", "600", "--max-num-seqs", "8"]
VLLM_KNOBS += ["--max-num-batched-tokens", "2048", "--step-cost", STEP_COST]


@pytest.fixture(scope="module")
def pool_file(tmp_path_factory) -> Path:
    """Three agent sessions of three rounds, two sharing a system prompt."""
    path = tmp_path_factory.mktemp("capacity") / "pool.json"
    sessions = [
        {"session": 0, "start_s": 0.0, "prefix": "sys", "rounds": ROUNDS},
        {"session": 1, "start_s": 0.0, "prefix": "sys", "rounds": [ROUNDS[0], ROUNDS[2]]},
        {"session": 2, "start_s": 0.0, "rounds": ROUNDS[1:]},
    ]
    path.write_text(json.dumps({"prefixes": [{"id": "sys", "tokens": 300}], "sessions": sessions}))
    return path


@pytest.fixture(scope="module")
def capacity_dir(pool_file, tmp_path_factory) -> Path:
    """The issue's command, on a short horizon."""
    out = tmp_path_factory.mktemp("capacity") / "out"
    result = CliRunner().invoke(
        app,
        [
            "capacity", "--pool", str(pool_file), "--substrate", "vllm", "--slo", SLO,
            "--attainment", "0.9", "--horizon", HORIZON, "--warmup", WARMUP, "--seed", SEED,
            "--replicas", "1,2", "--routers", "round_robin,session_affinity", *VLLM_KNOBS,
            "--out", str(out),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return out


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def _attainment_of_plans_open(pool: Path, rate: str, row: dict, tmp: Path) -> float:
    """`plans open` at ``rate`` (the text), then `simulate` the row's fleet on it."""
    runner = CliRunner()
    plan = tmp / f"plan-{rate}.json"
    made = runner.invoke(
        app,
        ["plans", "open", "--pool", str(pool), "--rate", rate, "--horizon", HORIZON,
         "--seed", SEED, "--out", str(plan)],
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    knobs = VllmConfiguration.from_id(row["configuration"])
    ran = runner.invoke(
        app,
        ["simulate", str(plan), "--substrate", "vllm", "--block-size", str(knobs.block_size),
         "--num-blocks", str(knobs.num_blocks), "--max-num-seqs", str(knobs.batch_size),
         "--max-num-batched-tokens", str(knobs.max_num_batched_tokens), "--step-cost",
         STEP_COST, "--replicas", row["replicas"], "--router", row["router"], "--slo", SLO,
         "--attainment", "0.9", "--warmup", WARMUP, "--horizon", HORIZON, "--json"],
    )  # fmt: skip
    assert ran.exit_code == 0, ran.output
    return json.loads(ran.stdout.splitlines()[-1])["slo"]["attainment"]


def test_capacity_csv_has_one_row_per_fleet_and_the_columns(capacity_dir):
    rows = _rows(capacity_dir / "capacity.csv")
    assert [(r["replicas"], r["router"]) for r in rows] == [
        ("1", "round_robin"), ("1", "session_affinity"),
        ("2", "round_robin"), ("2", "session_affinity"),
    ]  # fmt: skip
    assert set(CAPACITY_COLUMNS) <= set(rows[0])
    assert {r["configuration"] for r in rows} == {"vllm:8:600x16:2048"}
    assert all(float(r["tolerance"]) == TOLERANCE for r in rows)
    summary = json.loads((capacity_dir / "summary.json").read_text())
    assert len(summary["pool"]["sha256"]) == 64
    assert summary["cost"]["step_cost"] == [0.01, 0.0002, 0.00002, 0.0]
    assert summary["slo"] == {"ttft_s": 0.3, "tpot_s": 0.03, "e2e_s": None, "attainment": 0.9}
    assert summary["tolerance"] == TOLERANCE and summary["workload"]["seed"] == 7
    for name in summary["pictures"]:
        assert (capacity_dir / name).read_bytes()[:4] == b"\x89PNG"


def test_reported_goodput_meets_on_plans_open_and_just_above_does_not(
    capacity_dir, pool_file, tmp_path
):
    """The issue's "Done when", on the predictor: each row's rate, given to `plans open`
    as the CSV prints it, meets the SLO with the row's attainment; x (1 + 2 tol) fails."""
    for row in _rows(capacity_dir / "capacity.csv"):
        rate = float(row["goodput_rate"])
        assert rate > 0
        got = _attainment_of_plans_open(pool_file, row["goodput_rate"], row, tmp_path)
        assert got == float(row["attainment"]) >= 0.9
        above = repr(rate * (1 + 2 * TOLERANCE))
        assert _attainment_of_plans_open(pool_file, above, row, tmp_path) < 0.9


def test_bisection_finds_a_threshold_to_the_tolerance():
    found = find_goodput(lambda r: r <= 0.37, start=0.01, tolerance=0.01)
    assert found.rate <= 0.37 < found.rate * 1.01
    assert not found.above_meets and found.bounded and found.monotone
    assert float(repr(found.rate)) == found.rate and len(repr(found.rate)) <= 10
    assert find_goodput(lambda r: False, start=0.01, tolerance=0.01).rate == 0.0


def test_a_meeting_rate_just_above_restarts_the_search_and_flags_the_curve():
    """Meets below 0.1 and again in (0.1033, 0.1035): the first answer (0.0993485) is
    checked at 1.04 x, which lands in the second band and meets, so the search goes on
    upwards from there and its own check above fails."""
    found = find_goodput(lambda r: r < 0.1 or 0.1033 < r < 0.1035, start=0.01, tolerance=0.02)
    assert 0.1033 < found.rate < 0.1035 and found.above == found.rate * 1.04
    assert not found.above_meets
    assert not found.monotone
    assert is_monotone([Trial(0.1, True), Trial(0.2, False), Trial(0.3, False)])
    assert not is_monotone([Trial(0.1, True), Trial(0.2, False), Trial(0.3, True)])


def test_the_grid_flags_a_constructed_non_monotone_curve(monkeypatch):
    """A curve that fails above 0.1 and meets again near 0.2: the bisection alone sees a
    single crossing; the grid's top rate (2 x the goodput) meets, so monotone is false."""

    def fake(workload, fleet, rate, plan=None):
        meets = rate < 0.1 or 0.19 < rate <= 0.21
        return Point(rate, 10, 20, 1.0 if meets else 0.5, meets, 1.0, 0.1, 0.0, None, None)

    monkeypatch.setattr(evaluate_module, "evaluate", fake)
    workload = Workload(None, 1000.0, 0.0, 0, Slo(ttft_s=1.0), None)
    monkeypatch.setattr(Workload, "ceiling", 50.0)
    monkeypatch.setattr(Workload, "measures", lambda self, rate: True)
    fleet = Fleet(VllmConfiguration((), 8, num_blocks=600), 1, "round_robin")
    plain = fleet_capacity(workload, fleet, 0.02, grid=0)
    assert plain.monotone and 0.098 < plain.goodput_rate < 0.1
    gridded = fleet_capacity(workload, fleet, 0.02, grid=6)
    assert gridded.goodput_rate == plain.goodput_rate
    assert not gridded.monotone
    assert "grid" in gridded.roles.values()


def test_the_pick_is_the_fewest_replicas_then_the_cheapest_per_session():
    config = VllmConfiguration((), 8, num_blocks=600)
    bigger = VllmConfiguration((), 8, num_blocks=1200)

    def point(meets: bool, cost: float) -> Point:
        return Point(1.0, 10, 20, 0.95 if meets else 0.5, meets, 10 * cost, cost, 0.0, None, None)

    points = [
        (Fleet(config, 1, "round_robin"), point(False, 1.0)),
        (Fleet(config, 2, "round_robin"), point(True, 3.0)),
        (Fleet(bigger, 2, "session_affinity"), point(True, 2.0)),
        (Fleet(config, 3, "round_robin"), point(True, 1.0)),
    ]
    pick = choose(1.0, points)
    assert pick.fleet == points[2][0]
    assert choose(1.0, points[:1]).fleet is None


def test_vllm_deployment_flags_and_router_policy():
    config = VllmConfiguration(
        (1, 2, 4, 8), 8, num_blocks=600, block_size=16, max_num_batched_tokens=2048
    )
    deploy = vllm_deployment(config, 2, "session_affinity", model="Qwen/Qwen3-4B")
    assert deploy["vllm_serve_flags"] == [
        "--max-num-seqs", "8", "--num-gpu-blocks-override", "600", "--block-size", "16",
        "--max-num-batched-tokens", "2048", "--enable-prefix-caching",
        "--cudagraph-capture-sizes", "1", "2", "4", "8",
    ]  # fmt: skip
    assert deploy["vllm_serve"][1].startswith("vllm serve Qwen/Qwen3-4B --port 8001 ")
    assert "--policy consistent_hash" in deploy["router"]
    assert "http://127.0.0.1:8000 http://127.0.0.1:8001" in deploy["router"]
    eager = VllmConfiguration((), 8, num_blocks=600)
    assert vllm_deployment(eager, 1, "round_robin")["router"] is None
    assert "--enforce-eager" in vllm_deployment(eager, 1, "round_robin")["vllm_serve_flags"]
    policies = {r: vllm_deployment(eager, 2, r)["router_policy"] for r in
                ("round_robin", "least_loaded", "prefix_aware")}  # fmt: skip
    assert policies == {
        "round_robin": "round_robin", "least_loaded": "power_of_two",
        "prefix_aware": "cache_aware",
    }  # fmt: skip


def test_rbln_deployment_counts_instances_of_the_papers_server():
    deploy = rbln_deployment(RblnConfiguration((1, 4, 8), 8), 9, "round_robin", num_devices=4)
    assert deploy["instances_per_server"] == 8 and deploy["servers"] == 2
    kwargs = deploy["optimum_rbln_from_pretrained"]
    assert kwargs["rbln_decoder_batch_sizes"] == [1, 4, 8] and kwargs["rbln_batch_size"] == 8
    assert kwargs["rbln_num_devices"] == 4


def test_an_rbln_fleet_says_what_to_serve_and_the_router_line():
    """An RBLN fleet of R instances is R vllm-rbln servers behind vllm-router (issue 36
    item 3): one serve line per instance and the router's, in the one spelling of
    rearrival.search.deploy that the vLLM fleet uses too."""
    from rearrival.search.deploy import shell_line, vllm_router_args

    deploy = rbln_deployment(RblnConfiguration((1, 4, 8), 8), 2, "session_affinity")
    assert len(deploy["vllm_serve"]) == 2
    assert deploy["vllm_serve"][1].startswith("vllm serve ARTIFACT --port 8001 --max-num-seqs 8")
    urls = ["http://127.0.0.1:8000", "http://127.0.0.1:8001"]
    assert deploy["router"] == shell_line(vllm_router_args(urls, "consistent_hash"))
    vllm = vllm_deployment(VllmConfiguration((), 8, num_blocks=600), 2, "session_affinity")
    assert vllm["router"] == deploy["router"]
    assert rbln_deployment(RblnConfiguration((1, 4, 8), 8), 1, "round_robin")["router"] is None


def test_a_target_rate_gives_the_pick_its_spread_and_deploy_lines(pool_file, tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        ["capacity", "--pool", str(pool_file), "--slo", SLO, "--horizon", HORIZON,
         "--warmup", WARMUP, "--seed", SEED, "--replicas", "1,2", *VLLM_KNOBS, "--grid", "0",
         "--tolerance", "0.1", "--rate", "0.3", "--resamples", "3", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    pick = json.loads((out / "summary.json").read_text())["pick"]
    assert pick["rate"] == 0.3 and pick["fleet"]["replicas"] == 1
    assert pick["at_rate"]["meets"] and pick["spread"]["resamples"] == 3
    assert "vllm serve" in result.stdout and "vllm-router" not in result.stdout
    assert pick["deploy"]["vllm_serve_flags"][:2] == ["--max-num-seqs", "8"]


def test_advise_at_a_rate_from_a_trace_is_the_capacity_pick_with_its_deploy_lines(tmp_path):
    """advise --trace T --rate R --slo prints the pick `capacity --rate` makes with the
    trace's sessions as the pool, the same lines, vllm-router command included."""
    shared = ["--token-scale", "0.15", "--substrate", "vllm", "--slo", SLO, "--horizon", "120",
              "--warmup", "20", "--seed", "3", "--replicas", "1,2", "--routers", "round_robin",
              "--num-blocks", "2400", "--max-num-seqs", "16", "--max-num-batched-tokens", "2048",
              "--step-cost", STEP_COST, "--rate", "1.5", "--resamples", "3"]  # fmt: skip
    runner = CliRunner()
    capacity = runner.invoke(
        app,
        ["capacity", "--pool", str(TRACELAB_SAMPLE), *shared, "--block-size", "16", "--grid",
         "0", "--out", str(tmp_path / "out")],
    )  # fmt: skip
    assert capacity.exit_code == 0, capacity.output
    advised = runner.invoke(
        app, ["advise", "--trace", str(TRACELAB_SAMPLE), *shared, "--block-sizes", "16"]
    )
    assert advised.exit_code == 0, advised.output

    def pick_lines(output: str) -> list[str]:
        lines = output.splitlines()
        return lines[next(i for i, line in enumerate(lines) if line.startswith("pick at")) :]

    assert pick_lines(advised.stdout) == pick_lines(capacity.stdout)
    assert " x2 round_robin" in advised.stdout
    assert "deploy: vllm-router --worker-urls http://127.0.0.1:8000 http://127.0.0.1:8001" in (
        advised.stdout
    )


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        (["--rate", "1", "--slo", SLO], "options --rate and --slo go together, with --trace"),
        (["--trace", "T.jsonl", "--rate", "1"], "options --rate and --slo go together"),
        (["--trace", "T.jsonl", "--rate", "1", "--slo", SLO, "--plans", "."],
         "--plans: not used by advise --rate"),
    ],
)  # fmt: skip
def test_advise_at_a_rate_refusals_are_one_line(options, needle):
    result = CliRunner().invoke(app, ["advise", *options])
    assert isinstance(result.exception, RearrivalError), result.output
    assert needle in str(result.exception) and "\n" not in str(result.exception)


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        (["--num-blocks", ",".join(map(str, range(600, 700))),
          "--max-num-seqs", ",".join(map(str, range(1, 61)))], "over the bound 5,000"),
        (["--tolerance", "0.9"], "option --tolerance 0.9"),
        (["--buckets", "1,2,4,8"], "--buckets: only for --substrate rbln"),
        (["--routers", "random"], "option --routers random"),
        (["--replicas", "0"], "option --replicas [0]"),
        (["--grid", "65"], "option --grid 65 is over the bound"),
        (["--token-scale", "0.5"], "option --token-scale: applies to a trace pool only"),
        (["--slo", "speed=1"], "--slo 'speed=1'"),
    ],
)  # fmt: skip
def test_refusals_are_one_line(pool_file, tmp_path, options, needle):
    base = {"--slo": SLO, "--horizon": HORIZON, "--step-cost": STEP_COST, "--num-blocks": "600"}
    for flag in options[::2]:
        base.pop(flag, None)
    args = [item for pair in base.items() for item in pair]
    result = CliRunner().invoke(
        app,
        ["capacity", "--pool", str(pool_file), *args, *options, "--out", str(tmp_path / "o")],
    )
    assert isinstance(result.exception, RearrivalError), result.output
    message = str(result.exception)
    assert needle in message and "\n" not in message
    assert not (tmp_path / "o").exists()


def test_no_pool_without_a_memory_block_is_one_line(pool_file, tmp_path):
    result = CliRunner().invoke(
        app,
        ["capacity", "--pool", str(pool_file), "--slo", SLO, "--horizon", HORIZON,
         "--step-cost", STEP_COST, "--out", str(tmp_path / "o")],
    )  # fmt: skip
    assert isinstance(result.exception, RearrivalError)
    assert "option --num-blocks" in str(result.exception)
    assert math.isfinite(1.0)


def test_the_capacity_stage_runs_only_when_a_study_asks_and_declares_its_files(pool_file, tmp_path):
    """rules/capacity.smk: a capacity: section puts the stage into `all` (the small and
    full definitions have none, and tests/test_rules_declared.py sees no capacity job
    there); its job gives its command exactly its declared files (the pool, the folder),
    and the report reads the folder as a declared input."""
    import yaml
    from test_rules_declared import REPO, _dry_run, dry_run_jobs, undeclared_or_unused

    work = tmp_path / "study"
    work.mkdir()
    (work / "pool.json").write_text(pool_file.read_text())
    config = yaml.safe_load((REPO / ".test" / "config" / "config.yaml").read_text())
    config["capacity"] = {
        "pool": "pool.json", "slo": SLO, "horizon": 60, "warmup": 10, "seed": 7,
        "replicas": [1, 2], "routers": "round_robin,session_affinity", "block_size": 16,
        "num_blocks": 600, "max_num_seqs": 8, "max_num_batched_tokens": 2048,
        "step_cost": STEP_COST,
    }  # fmt: skip
    (work / "capacity.yaml").write_text(yaml.safe_dump(config))
    jobs = dry_run_jobs(_dry_run(tmp_path, "capacity.yaml"))
    capacity = [job for job in jobs if job.rule == "capacity"]
    assert len(capacity) == 1 and capacity[0].inputs == ("pool.json",)
    assert capacity[0].outputs == ("results/capacity",)
    assert undeclared_or_unused(capacity[0]) == []
    assert "rearrival study capacity" in capacity[0].command
    report = [job for job in jobs if job.rule == "report"]  # it shows the stage's pictures
    assert len(report) == 1 and "results/capacity" in report[0].inputs
    assert undeclared_or_unused(report[0]) == []


def test_rbln_capacity_searches_bucket_sets_and_prints_the_compile_line(pool_file, tmp_path):
    out = tmp_path / "rbln"
    result = CliRunner().invoke(
        app,
        ["capacity", "--pool", str(pool_file), "--substrate", "rbln", "--slo",
         "ttft=0.5,tpot=0.05", "--horizon", HORIZON, "--warmup", WARMUP, "--seed", SEED,
         "--buckets", "1,2,4,8;1,8", "--grid", "0", "--tolerance", "0.1", "--rate", "0.2",
         "--resamples", "1", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = _rows(out / "capacity.csv")
    assert [r["configuration"] for r in rows] == ["8:1,2,4,8", "8:1,8"]
    assert all(float(r["goodput_rate"]) > 0 for r in rows)
    assert "rearrival rbln compile --model Qwen/Qwen3-4B --batch-size 8" in result.stdout
    assert "8 instances of 4 devices per RBLN-CA25 server" in result.stdout
