"""No verb can be made to use more than 2 GiB by its options alone (rearrival.limits,
rearrival.search.space): every option that sizes the work is refused over its documented
bound in one line naming the bound, before the work it limits starts, and the search
space is counted before it is enumerated (issue 29, item 1).

Each refusal here returns in a small fraction of a second; on the code before these
bounds, most of these commands grew to many GiB (`search --batch-sizes 1000`: 24 GB in
90 s) or ran for hours."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO, TRACELAB_SAMPLE, config_with_search, random_plan
from typer.testing import CliRunner

from rearrival.cli import app
from rearrival.errors import RearrivalError
from rearrival.limits import MAX_BATCH_SIZE, MAX_CANDIDATES, MAX_MEMORY_GIB, MAX_SESSIONS
from rearrival.model.cost.memory import device_memory
from rearrival.model.cost.profile import measured_profile
from rearrival.model.plans.plan import write_plan
from rearrival.search.candidates import enumerate_candidates
from rearrival.search.space import Footprint, bucket_sets, space_size

CLI = Path(sys.executable).with_name("rearrival")
runner = CliRunner()
SMALL = {"n": [3], "seeds": 1, "blocks": 1, "top": 2, "restricted_n": [], "shards": 1}
FLEET = ["--n", "16,32,48", "--batch-sizes", "16,24,32,40,48", "--max-buckets", "5"]


@pytest.fixture
def config(tmp_path: Path) -> str:
    return str(config_with_search(tmp_path, SMALL))


@pytest.fixture
def plan_file(tmp_path: Path) -> str:
    path = tmp_path / "p.json"
    write_plan(random_plan(random.Random(5), 4, max_gen=20), path)
    return str(path)


def refusal(args: list[str], *needles: str) -> str:
    """The one-line error a verb refuses ``args`` with (the CLI prints it as
    `rearrival: error: ...`, exit code 2), checked to name each of ``needles``."""
    result = runner.invoke(app, args)
    assert isinstance(result.exception, RearrivalError), result.output
    message = str(result.exception)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message
    return message


def test_the_session_bound_is_the_schemas_bound_on_a_study() -> None:
    schema = yaml.safe_load((REPO / "config" / "schema.yaml").read_text())
    study = schema["properties"]["studies"]["additionalProperties"]["properties"]
    assert study["n"]["items"]["maximum"] == MAX_SESSIONS


# --- the search space is counted, never enumerated to be sized ----------------------------


def test_counting_agrees_with_enumeration() -> None:
    for batch in (1, 2, 3, 8, 10, 16):
        for most in (2, 3, 4, 6, 30):
            every = enumerate_candidates((batch,), most)
            assert bucket_sets(batch, most) == len(every), (batch, most)
    profile, memory = measured_profile(), device_memory()
    counted = space_size((8, 10, 12, 16), 6, profile, memory)
    assert (counted.enumerated, counted.searched) == (2077, 2077)


def test_a_mistyped_batch_size_is_removed_by_its_size_alone(tmp_path, config) -> None:
    """The issue's case: batch size 1000 needs 1,000 KV slots, 49 fit; its
    41,251,954,753 bucket sets are counted, not built."""
    out = tmp_path / "out"
    message = refusal(
        ["search", "--batch-sizes", "1000", "--out", str(out), "--config", config],
        "memory filter removed all 41,251,954,753",
        "batch sizes <= 49",
    )
    assert "--no-memory-filter" in message and not out.exists()


def search(config: str, *options: str) -> list[str]:
    """A search writing beside its config (in the test's directory), were it not refused."""
    return ["search", *options, "--out", str(Path(config).parent / "o"), "--config", config]


def test_a_space_over_the_candidate_bound_is_refused(config) -> None:
    refusal(
        search(config, "--batch-sizes", "1000", "--no-memory-filter"),
        f"{MAX_CANDIDATES:,}",
        "--max-buckets",
    )
    refusal(
        search(config, "--batch-sizes", "48", "--max-buckets", "1000000"),
        "54,134,985,146,858 candidates",  # C(46, k) for k <= 25: 27 buckets fit the budget
        f"{MAX_CANDIDATES:,}",
    )


def test_a_batch_size_over_the_bound_is_refused(config) -> None:
    refusal(
        search(config, "--batch-sizes", "8,5000", "--no-memory-filter"),
        "--batch-sizes",
        f"5,000 is over the bound {MAX_BATCH_SIZE:,}",
    )


def test_search_n_over_the_bound_is_refused(config) -> None:
    refusal(
        search(config, "--n", "8,5000"),
        "--n",
        f"5,000 is over the bound {MAX_SESSIONS:,}",
    )


def test_a_search_over_the_memory_bound_is_refused_before_its_plans(tmp_path, config) -> None:
    """Every N from 1 to 1,024 on the default 3 seeds x 3 blocks: 18,432 plans of 9.4
    million sessions, refused before one is drawn."""
    (tmp_path / "big").mkdir()
    big = str(config_with_search(tmp_path / "big", {"n": list(range(1, 1025))}))
    out = tmp_path / "out"
    refusal(
        ["search", "--out", str(out), "--config", big],
        "18,432 plans",
        f"over the bound of {MAX_MEMORY_GIB:g} GiB",
    )
    assert not out.exists()


def test_workers_count_in_the_memory_estimate(tmp_path) -> None:
    """The README's fleet search (3 seeds x 3 blocks) fits the bound with 2 workers
    (1.43 GiB measured) but not with 8, each holding its own copy of the candidates'
    tables."""
    assert Footprint(32_231, 48, 54, 3_456, 2).gib() <= MAX_MEMORY_GIB
    config = str(config_with_search(tmp_path, {"restricted_n": []}))
    refusal(
        search(config, *FLEET, "--workers", "8"),
        "8 worker processes",
        "use --workers 1",
    )


# --- advise, plan, simulate, run, emulate-server, tools show, plans from-trace ------------


def test_advise_n_and_resamples_over_their_bounds_are_refused(config) -> None:
    refusal(["advise", "--n", "5000", "--config", config], f"over the bound {MAX_SESSIONS:,}")
    refusal(
        ["advise", "--resamples", "1000000000", "--config", config],
        "--resamples",
        "over the bound 10,000",
    )


def test_advise_with_many_workers_is_refused_by_the_estimate(tmp_path) -> None:
    fleet = {"n": [16, 32, 48], "batch_sizes": [16, 24, 32, 40, 48], "max_buckets": 5}
    fleet["restricted_n"] = []
    config = str(config_with_search(tmp_path, fleet))
    refusal(["advise", "--workers", "8", "--config", config], "8 worker processes")


def test_plan_n_over_the_bound_is_refused(tmp_path) -> None:
    out = tmp_path / "p.json"
    refusal(
        ["plan", "--n", "100000000", "--study-seed", "1", "--replicate", "0", "--out", str(out)],
        "--n",
        f"over the bound {MAX_SESSIONS:,}",
    )
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--buckets", "1,100000000", "--batch-size", "100000000"], "--batch-size"),
        (["--slots", "1000000000"], "--slots"),
    ],
)
def test_simulate_knobs_over_the_bound_are_refused(plan_file, args, needle) -> None:
    message = refusal(["simulate", plan_file, *args], needle)
    assert f"over the bound {MAX_BATCH_SIZE:,}" in message


def test_simulate_vllm_pool_over_the_bound_is_refused(plan_file) -> None:
    vllm = ["simulate", plan_file, "--substrate", "vllm", "--step-cost", "0.01,0.0001,0.00001"]
    knobs = {"--block-size": "16", "--num-blocks": "64", "--max-num-seqs": "8"}
    knobs["--max-num-batched-tokens"] = "100000000"

    def options(**changed: str) -> list[str]:
        given = knobs | {f"--{k.replace('_', '-')}": v for k, v in changed.items()}
        return [part for pair in given.items() for part in pair]

    refusal([*vllm, *options(num_blocks="1000000000")], "--num-blocks", "over the bound 1,048,576")
    refusal(
        [*vllm, *options(max_num_seqs="100000000")],
        "--max-num-seqs",
        f"over the bound {MAX_BATCH_SIZE:,}",
    )


@pytest.mark.parametrize("verb", ["run", "emulate-server"])
def test_run_and_emulate_server_knobs_over_the_bound_are_refused(tmp_path, plan_file, verb):
    where = [plan_file, "--out", str(tmp_path / "run")] if verb == "run" else ["--port", "1"]
    refusal([verb, *where, "--slots", "1000000000"], f"over the bound {MAX_BATCH_SIZE:,}")


def test_tools_show_draws_over_the_bound_are_refused() -> None:
    refusal(["tools", "show", "--draws", "1000000000"], "--draws", "over the bound 1,000,000")


def test_trace_sessions_are_bounded_by_the_trace(tmp_path) -> None:
    """plans from-trace samples without replacement: at most the trace's own sessions."""
    trace = ["plans", "from-trace", str(TRACELAB_SAMPLE), "--out", str(tmp_path / "o")]
    result = runner.invoke(app, [*trace, "--sessions", "1000000000", "--token-scale", "0.15"])
    assert result.exit_code == 2 and "the trace has 2 sessions" in result.output


def test_the_cli_refuses_in_one_line_with_exit_code_2(tmp_path, config) -> None:
    """Through the console entry point: `rearrival: error: ...` alone, nothing written."""
    out = tmp_path / "out"
    options = ["--batch-sizes", "1000", "--no-memory-filter", "--out", str(out)]
    done = subprocess.run(
        [str(CLI), "search", *options, "--config", config],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("rearrival: error: ")
    assert not out.exists() and done.stdout == ""
