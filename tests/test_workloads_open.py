"""Open and closed agent traffic (docs/DESIGN.md §2 "Open traffic, shared
prefixes and renewal"): the same pool and seed give the same sessions in the same
order at every rate, byte-identical files, the rate and the CV asked for, closed-loop
chains, and one-line refusals naming the option."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import TRACELAB_SAMPLE
from typer.testing import CliRunner

from rearrival.cli import app
from rearrival.limits import MAX_WORKLOAD_SESSIONS
from rearrival.model.plans.plan import (
    After,
    MultiRoundSession,
    Plan,
    PlanError,
    Prefix,
    Round,
    load_plan,
    write_plan,
)
from rearrival.model.plans.plangen import generate_plan
from rearrival.model.plans.pool import load_pool
from rearrival.model.plans.tracelab_import import plans_from_trace
from rearrival.model.plans.workloads_open import (
    Arrivals,
    WorkloadError,
    closed_plan,
    open_plan,
)

runner = CliRunner()
PREFIXES = (Prefix("agent-a", 1200), Prefix("agent-b", 300), Prefix("unused", 5))


def pool_sessions(n: int = 7) -> tuple[MultiRoundSession, ...]:
    """Sessions of different lengths; even ones name agent-a, every third agent-b."""
    out = []
    for i in range(n):
        prefix = "agent-a" if i % 2 == 0 else ("agent-b" if i % 3 == 0 else None)
        tokens = {"agent-a": 1200, "agent-b": 300}.get(prefix, 0)
        rounds = tuple(Round(50 + i, 10 + k, 0.5 if k < i % 3 else 0.0) for k in range(1 + i % 3))
        out.append(MultiRoundSession(i, rounds, float(i), prefix, tokens))
    return tuple(out)


def test_same_sessions_in_the_same_order_at_every_rate() -> None:
    pool = pool_sessions()
    slow = open_plan(pool, PREFIXES, 0.5, 2000.0, 11)
    fast = open_plan(pool, PREFIXES, 2.0, 2000.0, 11)
    assert 0 < slow.n < fast.n
    key = [(s.rounds, s.prefix) for s in slow.sessions]
    assert [(s.rounds, s.prefix) for s in fast.sessions[: slow.n]] == key
    # only the times scale: the k-th start at rate 2 is a quarter of the k-th at 0.5
    for a, b in zip(slow.sessions, fast.sessions, strict=False):
        assert b.start_s == pytest.approx(a.start_s / 4, abs=1e-6)
    # the arrival law does not change the sessions either
    bursty = open_plan(pool, PREFIXES, 0.5, 2000.0, 11, ("gamma", 3.0))
    count = min(bursty.n, slow.n)
    assert [(s.rounds, s.prefix) for s in bursty.sessions[:count]] == key[:count]
    # another seed draws other sessions
    other = open_plan(pool, PREFIXES, 0.5, 2000.0, 12)
    assert [s.rounds for s in other.sessions[:50]] != [s.rounds for s in slow.sessions[:50]]


def test_starts_are_increasing_and_before_the_horizon() -> None:
    plan = open_plan(pool_sessions(), PREFIXES, 3.0, 100.0, 1)
    starts = [s.start_s for s in plan.sessions]
    assert starts == sorted(starts) and starts[0] > 0 and starts[-1] < 100.0
    assert all(s.after is None for s in plan.sessions)
    assert [s.session for s in plan.sessions] == list(range(plan.n))


def test_a_drawn_session_keeps_its_prefix_and_the_table_holds_the_used_ones() -> None:
    pool = pool_sessions()
    plan = open_plan(pool, PREFIXES, 1.0, 200.0, 5)
    by_rounds = {s.rounds: s for s in pool}
    for s in plan.sessions:
        source = by_rounds[s.rounds]
        assert (s.prefix, s.prefix_tokens, s.prompts()) == (
            source.prefix,
            source.prefix_tokens,
            source.prompts(),
        )
    assert plan.prefixes == PREFIXES[:2]  # pool order, the unused one left out
    none = open_plan(pool[1:2], PREFIXES, 1.0, 20.0, 5)
    assert none.prefixes == () and none.sessions[0].prefix is None


@pytest.mark.parametrize("name", ["open.json", "open.parquet"])
def test_the_same_inputs_give_byte_identical_files(tmp_path: Path, name: str) -> None:
    pool = pool_sessions()
    first = write_plan(open_plan(pool, PREFIXES, 0.7, 300.0, 9), tmp_path / f"a-{name}")
    again = write_plan(open_plan(pool, PREFIXES, 0.7, 300.0, 9), tmp_path / f"b-{name}")
    assert first.read_bytes() == again.read_bytes()
    loaded = load_plan(first)
    assert loaded.sessions == open_plan(pool, PREFIXES, 0.7, 300.0, 9).sessions
    closed = closed_plan(pool, PREFIXES, 3, 12, 1.5, 9)
    one = write_plan(closed, tmp_path / f"c-{name}")
    two = write_plan(closed_plan(pool, PREFIXES, 3, 12, 1.5, 9), tmp_path / f"d-{name}")
    assert one.read_bytes() == two.read_bytes()
    assert load_plan(one).sessions == closed.sessions


def test_poisson_recovers_the_rate_and_exponential_gaps() -> None:
    rate, horizon = 4.0, 5000.0  # about 20,000 starts
    plan = open_plan(pool_sessions(), PREFIXES, rate, horizon, 3)
    expected = rate * horizon
    # a Poisson count has standard deviation sqrt(mean): 4 of them is a 6e-5 chance
    assert abs(plan.n - expected) < 4 * math.sqrt(expected)
    gaps = np.diff([0.0] + [s.start_s for s in plan.sessions])
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.03)  # exponential: CV 1


@pytest.mark.parametrize("cv", [0.5, 2.0])
def test_gamma_gaps_have_the_cv_asked_for(cv: float) -> None:
    rate = 2.0
    plan = open_plan(pool_sessions(), PREFIXES, rate, 20_000.0, 4, f"gamma:{cv}")
    gaps = np.diff([0.0] + [s.start_s for s in plan.sessions])
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.08)


def test_trace_arrivals_replay_the_pool_at_scaled_starts() -> None:
    pool = pool_sessions()  # session i starts at i seconds
    plan = open_plan(pool, PREFIXES, None, 2.6, 0, "trace", time_scale=0.5)
    assert [s.start_s for s in plan.sessions] == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]
    assert [s.rounds for s in plan.sessions] == [s.rounds for s in pool[:6]]
    with pytest.raises(WorkloadError, match="no rate") as caught:
        open_plan(pool, PREFIXES, 1.0, 10.0, 0, "trace")
    assert caught.value.argument == "rate"
    renewed = (*pool[:2], MultiRoundSession(2, pool[2].rounds, after=After(0)))
    with pytest.raises(WorkloadError, match="pool session 2 follows another"):
        open_plan(renewed, (), None, 10.0, 0, "trace")
    with pytest.raises(WorkloadError, match="scales a trace's own starts") as caught:
        open_plan(pool, PREFIXES, 1.0, 10.0, 0, "poisson", time_scale=2.0)
    assert caught.value.argument == "time_scale"


def test_closed_loop_chains_of_concurrency_links() -> None:
    pool = pool_sessions()
    plan = closed_plan(pool, PREFIXES, 3, 11, 2.5, 8)
    assert plan.n == 11 and plan.renews
    assert [s.after for s in plan.sessions[:3]] == [None] * 3
    assert [s.start_s for s in plan.sessions] == [0.0] * 11
    assert [s.after for s in plan.sessions[3:]] == [After(i, 2.5) for i in range(8)]
    # the same choice stream as open traffic: the same sessions in the same order
    opened = open_plan(pool, PREFIXES, 1.0, 60.0, 8)
    count = min(opened.n, plan.n)
    assert [s.rounds for s in plan.sessions[:count]] == [s.rounds for s in opened.sessions[:count]]
    assert closed_plan(pool, PREFIXES, 4, 4, 0.0, 8).renews is False


@pytest.mark.parametrize(
    ("call", "argument", "needle"),
    [
        (lambda p: open_plan(p, (), 0.0, 10.0, 0), "rate", "rate 0.0: give sessions per second"),
        (lambda p: open_plan(p, (), None, 10.0, 0), "rate", "rate None"),
        (lambda p: open_plan(p, (), 1.0, -1.0, 0), "horizon_s", "horizon_s -1.0"),
        (lambda p: open_plan(p, (), 1.0, math.inf, 0), "horizon_s", "horizon_s inf"),
        (lambda p: open_plan(p, (), 1e-6, 10.0, 0), "horizon_s", "no session starts"),
        (lambda p: open_plan(p, (), 1.0, 10.0, 0, "gamma:0"), "arrivals", "a number > 0"),
        (lambda p: open_plan(p, (), 1.0, 10.0, 0, "weibull"), "arrivals", "'weibull'"),
        (lambda p: open_plan(p, (), 1000.0, 1e6, 0), "rate", "over the bound 100,000"),
        (lambda p: closed_plan(p, (), 5, 4, 0.0, 0), "concurrency", "C <= L"),
        (lambda p: closed_plan(p, (), 0, 4, 0.0, 0), "concurrency", "concurrency 0"),
        (lambda p: closed_plan(p, (), 1, 4, -1.0, 0), "think_s", "think_s -1.0"),
        (
            lambda p: closed_plan(p, (), 1, MAX_WORKLOAD_SESSIONS + 1, 0.0, 0),
            "sessions",
            "over the bound",
        ),
    ],
)
def test_each_refusal_is_one_line_naming_the_argument(call, argument: str, needle: str) -> None:
    with pytest.raises(WorkloadError) as caught:
        call(pool_sessions())
    assert caught.value.argument == argument and needle in str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_request_bound_counts_the_pool_s_rounds() -> None:
    long = (MultiRoundSession(0, (*(Round(5, 5, 0.1) for _ in range(99)), Round(5, 5))),)
    with pytest.raises(WorkloadError, match=r"expected requests .* 1,000,100 is over"):
        closed_plan(long, (), 1, 10_001, 0.0, 0)


def test_arrival_laws_parse() -> None:
    assert Arrivals.parse("poisson") == Arrivals("poisson")
    assert Arrivals.parse("gamma:2.5") == Arrivals("gamma", 2.5)
    assert Arrivals.parse(("gamma", 2)) == Arrivals("gamma", 2.0)
    assert Arrivals.parse("trace").label == "trace"
    for bad in ("gamma", "gamma:x", "poisson:2", "gamma:-1", "gamma:nan"):
        with pytest.raises(WorkloadError):
            Arrivals.parse(bad)


def test_pools_from_a_file_a_folder_and_two_round_plans(tmp_path: Path) -> None:
    pool = pool_sessions(4)
    write_plan(Plan(pool, prefixes=PREFIXES[:2]), tmp_path / "a.json")
    paper = generate_plan(3, study_seed=1, replicate=0)
    write_plan(paper, tmp_path / "b.parquet")
    one = load_pool(tmp_path / "a.json")
    assert one.sessions == pool and one.prefixes == PREFIXES[:2]
    both = load_pool(tmp_path)
    assert both.n == 7 and both.prefixes == PREFIXES[:2]
    # a paper session becomes its two rounds, with the same prompts
    assert [s.prompts() for s in both.sessions[4:]] == [s.prompts() for s in paper.sessions]
    assert [s.session for s in both.sessions] == list(range(7))


def test_a_folder_pool_moves_after_links_and_refuses_clashing_prefixes(tmp_path: Path) -> None:
    chained = (
        pool_sessions(1)[0],
        MultiRoundSession(1, pool_sessions(2)[1].rounds, after=After(0)),
    )
    write_plan(Plan(chained, prefixes=PREFIXES[:1]), tmp_path / "a.json")
    write_plan(Plan(chained, prefixes=PREFIXES[:1]), tmp_path / "b.json")
    joined = load_pool(tmp_path)
    assert [s.after for s in joined.sessions] == [None, After(0), None, After(2)]
    clash = (MultiRoundSession(0, chained[0].rounds, 0.0, "agent-a", 7),)
    write_plan(Plan(clash, prefixes=(Prefix("agent-a", 7),)), tmp_path / "c.json")
    with pytest.raises(PlanError, match=r"c\.json: prefix 'agent-a' has 7 tokens but 1200 in"):
        load_pool(tmp_path)


def test_a_pool_of_nothing_usable_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="holds no plan files"):
        load_pool(tmp_path)
    (tmp_path / "pool.csv").write_text("x")
    with pytest.raises(PlanError, match="a pool is a plan file"):
        load_pool(tmp_path / "pool.csv")


def test_from_trace_fills_one_prefix_per_agent_and_keeps_prompts() -> None:
    plain = plans_from_trace(TRACELAB_SAMPLE, token_scale=0.15).plan
    shared = plans_from_trace(TRACELAB_SAMPLE, token_scale=0.15, prefixes=True)
    # round 0's cached prefix of each agent (27,217 and 6,912 in the trace) x 0.15
    assert shared.plan.prefixes == (Prefix("claude", 4083), Prefix("codex", 1037))
    assert [s.prefix for s in shared.plan.sessions] == ["codex", "claude"]
    assert [s.prompts() for s in shared.plan.sessions] == [s.prompts() for s in plain.sessions]
    assert plain.prefixes == () and plain.sha256() != shared.plan.sha256()
    line = [x for x in shared.summary_lines() if x.startswith("shared prefixes")]
    assert len(line) == 1 and "claude 4,083 tokens (1 session)" in line[0]
    assert "--no-prefixes" in line[0]


def test_the_cli_fills_prefixes_unless_told_not_to(tmp_path: Path) -> None:
    base = ["plans", "from-trace", str(TRACELAB_SAMPLE), "--token-scale", "0.15"]
    on = runner.invoke(app, [*base, "--out", str(tmp_path / "on")])
    off = runner.invoke(app, [*base, "--no-prefixes", "--out", str(tmp_path / "off")])
    assert on.exit_code == 0 and off.exit_code == 0, on.output + off.output
    assert "shared prefixes from round 0's cached prefix" in on.output
    assert "shared prefixes" not in off.output
    with_prefixes = load_plan(tmp_path / "on/plan.parquet")
    without = load_plan(tmp_path / "off/plan.parquet")
    assert len(with_prefixes.prefixes) == 2 and without.prefixes == ()
    assert "prefixes" not in without.meta.import_flags  # an import without keeps its bytes


def _cli(*args: str):
    return runner.invoke(app, ["plans", *args])


def test_plans_open_and_closed_write_what_they_say(tmp_path: Path) -> None:
    pool = write_plan(Plan(pool_sessions(), prefixes=PREFIXES[:2]), tmp_path / "pool.json")
    args = ["--pool", str(pool), "--rate", "0.5", "--horizon", "600", "--seed", "4"]
    done = _cli("open", *args, "--out", str(tmp_path / "open.json"))
    assert done.exit_code == 0, done.output
    plan = load_plan(tmp_path / "open.json")
    assert f"{plan.n:,} sessions" in done.output and plan.sha256() in done.output
    assert "poisson arrivals over 600 s" in done.output
    assert plan.meta.notes["workload"]["rate"] == 0.5
    again = _cli("open", *args, "--out", str(tmp_path / "again.json"))
    assert again.exit_code == 0
    assert (tmp_path / "again.json").read_bytes() == (tmp_path / "open.json").read_bytes()
    closed = _cli(
        "closed", "--pool", str(pool), "--concurrency", "2", "--sessions", "6",
        "--think-s", "1", "--seed", "4", "--out", str(tmp_path / "closed.parquet"),
    )  # fmt: skip
    assert closed.exit_code == 0, closed.output
    assert load_plan(tmp_path / "closed.parquet").sessions[2].after == After(0, 1.0)


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--rate", "0"], "option --rate: rate 0.0"),
        (["--rate", "200", "--horizon", "3600"], "option --rate: sessions (rate x horizon_s)"),
        (["--rate", "1", "--arrivals", "gamma:-2"], "option --arrivals"),
        (["--rate", "1", "--arrivals", "trace"], "option --rate: arrivals trace"),
        (["--rate", "1", "--time-scale", "2"], "option --time-scale"),
        (["--rate", "1", "--token-scale", "0.5"], "option --token-scale: applies to a trace"),
    ],
)
def test_plans_open_refusals_are_one_line(tmp_path: Path, extra: list[str], needle: str) -> None:
    pool = write_plan(Plan(pool_sessions(), prefixes=PREFIXES[:2]), tmp_path / "pool.json")
    args = ["open", "--pool", str(pool), "--horizon", "60", "--seed", "1"]
    done = _console(*args, *extra, "--out", str(tmp_path / "o.json"))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rearrival: error: option"), done.stderr
    assert needle in lines[0] and not done.stdout
    assert not (tmp_path / "o.json").exists()


def test_plans_open_refuses_a_bad_out_suffix(tmp_path: Path) -> None:
    pool = write_plan(Plan(pool_sessions(), prefixes=PREFIXES[:2]), tmp_path / "pool.json")
    done = _console(
        "open", "--pool", str(pool), "--rate", "1", "--horizon", "5", "--seed", "1",
        "--out", str(tmp_path / "o.csv"),
    )  # fmt: skip
    assert done.returncode == 2 and "ends in .parquet or .json" in done.stderr


def _console(*args: str) -> subprocess.CompletedProcess:
    """The installed console script, which turns a refusal into one line and exit 2."""
    command = [str(Path(sys.executable).with_name("rearrival")), "plans", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
