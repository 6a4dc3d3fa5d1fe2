"""vLLM's own start-up checks applied before anything is registered, searched or started
(rearrival.model.vllm_knobs, docs/DESIGN.md §15 "Knobs vLLM refuses", issue 38): block
sizes per device, the model length against the model, the model's config.json, the
pool against one sequence of the model length. Each refusal is one line naming the key
and the fix, in the study definition (so `snakemake -n` refuses and registers nothing),
in `search --substrate vllm` and in `advise --substrate vllm`. No server starts here."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import snakemake, workflow_repo

from rearrival.config.errors import StudyConfigError
from rearrival.config.served_model import ServedModelError, load_served_model, shipped_model
from rearrival.config.study import load_study_config
from rearrival.model.vllm_knobs import block_size_problem, max_model_len_problem, pool_problem

REPO = Path(__file__).resolve().parents[1]
CLI = str(Path(sys.executable).with_name("rearrival"))
CPU_PROFILE = REPO / "src" / "rearrival" / "data" / "profile_vllm_tiny_qwen3_cpu.yaml"


@pytest.mark.parametrize(
    ("size", "device", "fix"),
    [(17, "cpu", "give 32"), (100, "cpu", "give 96 or 128"), (24, "gpu", "give 16 or 32")],
)
def test_a_block_size_the_device_refuses_names_the_key_and_the_nearest_sizes(
    size: int, device: str, fix: str
) -> None:
    problem = block_size_problem(size, device, "configurations.x.block_size")
    assert problem is not None and problem.startswith("configurations.x.block_size: ")
    assert problem.endswith(fix)


@pytest.mark.parametrize(("size", "device"), [(32, "cpu"), (128, "cpu"), (16, "gpu"), (17, None)])
def test_block_sizes_vllm_takes_pass(size: int, device: str | None) -> None:
    assert block_size_problem(size, device, "k") is None


def test_the_model_length_is_bounded_by_the_model_unless_its_model_max_length_allows() -> None:
    assert max_model_len_problem(8192, 8192, "k") is None
    assert "give at most 8,192" in (max_model_len_problem(8193, 8192, "k") or "")
    assert max_model_len_problem(16384, 8192, "k", model_max_length=16384) is None


def test_the_pool_must_hold_one_sequence_of_the_model_length() -> None:
    assert pool_problem(64, 32, 2048, "k") is None
    assert "give num_blocks >= 64" in (pool_problem(63, 32, 2048, "k") or "")


def _config(tmp_path: Path, edit) -> Path:
    raw = yaml.safe_load((REPO / "config" / "vllm.yaml").read_text())
    raw |= {"tool_table": str(REPO / "config" / "vllm_tools.json"), "profile": str(CPU_PROFILE)}
    edit(raw)
    path = tmp_path / "vllm.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _incomplete_model(tmp_path: Path, raw: dict) -> None:
    model = tmp_path / "model"
    shutil.copytree(shipped_model(), model)
    config = json.loads((model / "config.json").read_text())
    del config["num_attention_heads"]
    (model / "config.json").write_text(json.dumps(config))
    raw["vllm"]["model"] = str(model)


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (
            lambda raw: raw["configurations"]["baseline"].update(block_size=17),
            "configurations.baseline.block_size: block size 17 on cpu: vLLM's CPU attention "
            "kernels take multiples of 32 only; give 32",
        ),
        (
            lambda raw: raw["vllm"].update(max_model_len=100000),
            "vllm.max_model_len: 100,000 tokens is longer than the served model allows "
            "(max_position_embeddings 8,192)",
        ),
        (
            lambda raw: raw["configurations"]["more_seqs"].update(num_blocks=40),
            "configurations.more_seqs.num_blocks: 40 blocks of 32 tokens hold 1,280 tokens, "
            "less than one sequence of max_model_len 2,048",
        ),
        (
            lambda raw: (
                raw["vllm"].update(device="gpu")
                or raw["configurations"]["baseline"].update(block_size=24)
            ),
            "configurations.baseline.block_size: block size 24 on gpu",
        ),
    ],
    ids=["block-size-17", "max-model-len-100000", "pool-too-small", "gpu-block-size"],
)
def test_the_study_definition_refuses_what_vllm_refuses_at_start(
    tmp_path: Path, edit, words: str
) -> None:
    with pytest.raises(StudyConfigError) as refused:
        load_study_config(_config(tmp_path, edit))
    assert words in str(refused.value) and "\n" not in str(refused.value)


def test_a_model_config_without_num_attention_heads_is_refused_naming_the_field(
    tmp_path: Path,
) -> None:
    with pytest.raises(StudyConfigError, match=r"vllm\.model: .*num_attention_heads missing"):
        load_study_config(_config(tmp_path, lambda raw: _incomplete_model(tmp_path, raw)))
    with pytest.raises(ServedModelError, match=r"field\(s\) num_attention_heads missing"):
        load_served_model(tmp_path / "model")


def test_snakemake_dry_run_refuses_block_size_17_and_commits_nothing(
    tmp_path: Path, no_git_identity: Path
) -> None:
    raw = yaml.safe_load((REPO / "config" / "vllm.yaml").read_text())
    raw |= {"tool_table": str(REPO / "config" / "vllm_tools.json"), "profile": str(CPU_PROFILE)}
    raw["configurations"]["baseline"]["block_size"] = 17
    work = workflow_repo(tmp_path, raw)
    head = subprocess.run(
        ["git", "-C", str(work), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout
    done = snakemake(work, no_git_identity, "-n", "all")
    assert done.returncode != 0
    assert "configurations.baseline.block_size: block size 17 on cpu" in done.stderr
    assert "Traceback" not in done.stderr
    after = subprocess.run(
        ["git", "-C", str(work), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout
    assert after == head and not (work / "results").exists()


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (
            ("search", "--substrate", "vllm", "--block-sizes", "17"),
            "option --block-sizes: block size 17 on cpu",
        ),
        (
            ("search", "--substrate", "vllm", "--block-sizes", "100"),
            "option --block-sizes: block size 100 on cpu: vLLM's CPU attention kernels take "
            "multiples of 32 only; give 96 or 128",
        ),
        (
            ("advise", "--substrate", "vllm", "--block-sizes", "17"),
            "option --block-sizes: block size 17 on cpu",
        ),
        (
            ("advise", "--substrate", "vllm", "--max-model-len", "99999999"),
            "option --max-model-len: 99,999,999 tokens is longer than the served model allows",
        ),
    ],
    ids=["search-17", "search-100", "advise-17", "advise-max-model-len"],
)
def test_search_and_advise_refuse_knobs_vllm_refuses(
    tmp_path: Path, args: tuple[str, ...], words: str
) -> None:
    done = _cli(
        *args,
        "--profile",
        str(CPU_PROFILE),
        *(("--out", str(tmp_path / "s")) if args[0] == "search" else ()),
    )
    assert done.returncode == 2
    line = done.stderr.strip()
    assert len(line.splitlines()) == 1 and line.startswith(f"rearrival: error: {words}"), line


def test_the_vllm_run_stage_holds_the_device(tmp_path: Path, no_git_identity: Path) -> None:
    """One server per device at a time (issue 38: two replicates on two cores measured
    each other): every run job holds the `device` resource the default profile has one of."""
    raw = yaml.safe_load((REPO / "config" / "vllm.yaml").read_text())
    raw |= {"tool_table": str(REPO / "config" / "vllm_tools.json"), "profile": str(CPU_PROFILE)}
    work = workflow_repo(tmp_path, raw)
    done = snakemake(work, no_git_identity, "-n", "all")
    assert done.returncode == 0, done.stderr
    jobs = done.stdout.split("rule run_replicate:")[1:]
    assert len(jobs) == raw["replicates"]
    assert all("device=1" in job.split("\n\n", 1)[0] for job in jobs), jobs[0]
    # the job's process is the verb (exec), so kill -TERM of the job reaches its handler
    assert all("exec rearrival study run" in job for job in jobs), jobs[0]


def test_extra_args_may_not_set_a_knob_the_project_sets(tmp_path: Path) -> None:
    edit = lambda raw: raw["vllm"].update(extra_args=["--block-size=64"])  # noqa: E731
    with pytest.raises(StudyConfigError, match=r"vllm\.extra_args: --block-size is set by"):
        load_study_config(_config(tmp_path, edit))


def test_serving_settings_at_their_defaults_leave_digests_and_designs_as_they_were(
    tmp_path: Path,
) -> None:
    """Finished studies keep their job digests and registered designs (nothing reruns,
    no registered design changes); a study that sets them registers them."""
    from rearrival.workflow.params import PER_STUDY
    from rearrival.workflow.preregister import registered_design

    plain = load_study_config(_config(tmp_path, lambda raw: None))
    study = plain.study("vllm_validation")
    new = {"extra_args", "async_scheduling", "tensor_parallel_size"}
    assert not new & set(registered_design(plain, study)["vllm"])
    assert not new & set(PER_STUDY["run"](plain, study)["settings"]["vllm"])
    assert not new & set(PER_STUDY["search"](plain, study)["vllm"])
    sharded = load_study_config(
        _config(
            tmp_path, lambda raw: raw["vllm"].update(tensor_parallel_size=2, async_scheduling=True)
        )
    )
    design = registered_design(sharded, sharded.study("vllm_validation"))["vllm"]
    assert (design["tensor_parallel_size"], design["async_scheduling"]) == (2, True)
