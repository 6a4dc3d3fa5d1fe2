"""The vllm backend's parts that need no server: vLLM's iteration log (lines as vLLM 0.32.0
writes them), its failure reasons, the server command line, the served model, and prompt
ids below the model's vocabulary (docs/DESIGN.md §15)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from rearrival.config.served_model import ServedModelError, load_served_model, shipped_model
from rearrival.measure.client_http import ClientError
from rearrival.measure.prompt_ids import TOKEN_ID_LOW, new_ids
from rearrival.measure.records.contract import RequestRecord
from rearrival.measure.steplog import StepLogError
from rearrival.measure.vllm.iterations import IterationStepLog, parse_iterations
from rearrival.measure.vllm.server import (
    engine_core_pids,
    kv_cache_memory_bytes,
    server_argv,
    vllm_reason,
)
from rearrival.model.configuration import VllmConfiguration

PREFIX = "(APIServer pid=24330) INFO 12-01 20:15:30 [loggers.py:199] Engine 000: "


def line(i: int, ctx: int, ctx_tok: int, gen: int, gen_tok: int, ms: float = 4.85) -> str:
    return (
        f"{PREFIX}Iteration({i}): {ctx} context requests, {ctx_tok} context tokens, {gen} "
        f"generation requests, {gen_tok} generation tokens, iteration elapsed time: {ms:.2f} "
        "ms, CPU KV cache usage: 7.9%"
    )


# One 300-token prompt generating 3 tokens, then a 40-token follow-up generating 2.
LOG = "\n".join(
    [
        "(APIServer pid=24330) INFO 12-01 20:14:43 [launcher.py:195] Route: /v1/completions",
        line(0, 1, 300, 0, 0, 24.71),
        line(1, 0, 0, 1, 1),
        line(2, 0, 0, 1, 1),
        line(3, 1, 40, 0, 0),
        line(4, 0, 0, 1, 1),
    ]
)
REQUESTS = [
    RequestRecord(0, 0, 0.0, 0.1, 0.2, 300, 0, 300, 3),
    RequestRecord(0, 1, 0.5, 0.6, 0.7, 328, 288, 40, 2),
]


def test_iteration_lines_become_steps_with_their_counts() -> None:
    steps = IterationStepLog().steps(LOG)
    assert list(steps["kind"]) == ["prefill", "decode", "decode", "prefill", "decode"]
    assert list(steps["n"]) == [0, 1, 1, 0, 1]
    assert steps["b"].isna().tolist() == [True, False, False, True, False]
    assert steps["elapsed_s"].iloc[0] == pytest.approx(0.02471)
    assert steps["kv_cache_usage"].iloc[0] == pytest.approx(0.079)
    assert IterationStepLog().coverage_problem(steps, REQUESTS, {}) is None
    mixed = IterationStepLog().steps(line(0, 2, 511, 1, 1))
    assert list(mixed["kind"]) == ["mixed"]


def test_capture_sizes_pad_the_decode_tokens() -> None:
    steps = IterationStepLog((1, 2, 4, 8)).steps(line(0, 0, 0, 3, 3))
    assert int(steps["b"].iloc[0]) == 4 and int(steps["n"].iloc[0]) == 3


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (LOG.replace("Iteration(2)", "Iteration(7)"), r":4: iteration 7 follows 1"),
        (LOG.replace("Iteration(0)", "Iteration(1)"), r":2: iteration 1 follows the start"),
        (LOG.replace("40 context tokens", "forty context tokens"), r":5: malformed iteration"),
        (line(0, 1, 0, 0, 0), "impossible counts"),
        (line(0, 0, 0, 0, 0), "impossible counts"),
    ],
    ids=["gap", "not-from-zero", "garbage", "no-tokens", "empty-step"],
)
def test_a_bad_iteration_log_is_one_clear_error(text: str, message: str) -> None:
    with pytest.raises(StepLogError, match=message):
        parse_iterations(text)


def test_steps_that_do_not_cover_the_requests_are_named() -> None:
    log = IterationStepLog()
    assert "no iteration line" in log.coverage_problem(log.steps(""), REQUESTS, {})
    short = log.steps("\n".join(LOG.splitlines()[:-1]))
    assert "decode 2 tokens, the requests needed 3" in log.coverage_problem(short, REQUESTS, {})
    recomputed = log.steps(LOG.replace("40 context tokens", "72 context tokens"))
    assert "prefill 372 tokens" in log.coverage_problem(recomputed, REQUESTS, {})
    preempted = {"vllm:num_preemptions_total": 1.0}
    assert log.coverage_problem(recomputed, REQUESTS, preempted) is None
    # a resumed request's recomputed output is logged as generation tokens
    redecoded = log.steps(LOG.replace("1 generation tokens", "5 generation tokens"))
    assert "no preemption to recompute more" in log.coverage_problem(redecoded, REQUESTS, {})
    assert log.coverage_problem(redecoded, REQUESTS, preempted) is None


def test_vllms_reason_is_its_first_error_not_a_warning() -> None:
    log = "\n".join(
        [
            "(APIServer pid=1) WARNING 12-01 21:02:22 [base.py:380] ValueError: Tokenizer "
            "not available when `skip_tokenizer_init=True`",
            "(Worker pid=3) ERROR 12-01 20:16:03 [multiproc_executor.py:1063] IndexError: "
            "index out of range in self",
            "(EngineCore pid=2) ERROR 12-01 20:16:03 [core.py:1512] RuntimeError: Worker failed",
            "(APIServer pid=1) ERROR 12-01 20:16:03 [async_llm.py:906] "
            "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
            "nanobind: leaked 4 instances!",
        ]
    )
    assert vllm_reason(log) == "IndexError: index out of range in self"
    assert vllm_reason("ValueError: No common block size for 16\n") == (
        "ValueError: No common block size for 16"
    )
    assert vllm_reason("INFO starting\nbound to port\nnanobind: leaked\n") == "bound to port"
    assert engine_core_pids(log) == [2]


def test_server_argv_holds_the_configurations_knobs() -> None:
    model = load_served_model()
    configuration = VllmConfiguration((), 8, num_blocks=128, block_size=32)
    argv = server_argv(Path("/py"), configuration, model, port=9, seed=3, max_model_len=2048)
    assert argv[:3] == ["/py", "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--max-num-seqs") + 1] == "8"
    assert argv[argv.index("--num-gpu-blocks-override") + 1] == "128"
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == str(128 * 32 * 1024)
    assert kv_cache_memory_bytes(configuration, model) == 128 * 32 * 1024  # 1 KiB a token
    for flag in ("--enforce-eager", "--enable-prefix-caching", "--load-format"):
        assert flag in argv
    study_seed = 2**63 + 5  # a study's run seeds are 64-bit; vLLM takes [0, 2**32)
    argv = server_argv(Path("/py"), configuration, model, port=9, seed=study_seed, max_model_len=8)
    assert argv[argv.index("--seed") + 1] == "5"
    with pytest.raises(ValueError, match="CPU build has no CUDA graphs"):
        server_argv(
            Path("/py"),
            VllmConfiguration((1, 2, 4, 8), 8, num_blocks=128),
            model,
            port=9,
            seed=3,
            max_model_len=2048,
        )
    gpu = server_argv(
        Path("/py"),
        VllmConfiguration((1, 2, 4, 8), 8, num_blocks=128),
        model,
        port=9,
        seed=3,
        max_model_len=2048,
        device="gpu",
    )
    sizes = gpu.index("--cudagraph-capture-sizes")
    assert gpu[sizes + 1 : sizes + 5] == ["1", "2", "4", "8"] and "--enforce-eager" not in gpu


def test_served_model_is_read_from_its_config(tmp_path: Path) -> None:
    model = load_served_model()
    data = (shipped_model() / "config.json").read_bytes()
    assert model.config_sha256 == hashlib.sha256(data).hexdigest()
    assert (model.vocab_size, model.max_position_embeddings) == (2048, 8192)
    assert model.kv_bytes_per_token == 2 * 2 * 1 * 64 * 4 and not model.has_weights
    broken = json.loads(data) | {"vocab_size": "many"}
    (tmp_path / "config.json").write_text(json.dumps(broken))
    with pytest.raises(ServedModelError, match="field 'vocab_size' is 'many'"):
        load_served_model(tmp_path)
    with pytest.raises(ServedModelError, match="cannot read it"):
        load_served_model(tmp_path / "absent")


def test_prompt_ids_stay_below_the_models_vocabulary() -> None:
    for session in range(4):
        for round_index in range(3):
            ids = new_ids("seed:1", session, round_index, 500, 2048)
            assert all(TOKEN_ID_LOW <= i < 2048 for i in ids)
    with pytest.raises(ClientError, match="vocabulary of 2048"):
        new_ids("seed:1", 2048 - TOKEN_ID_LOW, 0, 5, 2048)


def test_a_validation_error_is_quoted_with_the_cause_pydantic_prints_below_it() -> None:
    """issue 38: `--max-model-len 100000` once gave only "ValidationError: 1 validation
    error for ModelConfig"; vLLM's cause is on the next lines."""
    log = "\n".join(
        [
            "(APIServer pid=1) Traceback (most recent call last):",
            "(APIServer pid=1) pydantic_core._pydantic_core.ValidationError: 1 validation "
            "error for ModelConfig",
            "(APIServer pid=1)   Value error, User-specified max_model_len (100000) is greater "
            "than the derived max_model_len (max_position_embeddings=8192 or "
            "model_max_length=None in model's config.json). [type=value_error, "
            "input_value=ArgsKwargs((), {'model': '/m'}), input_type=ArgsKwargs]",
            "(APIServer pid=1)     For further information visit https://errors.pydantic.dev/2",
        ]
    )
    assert vllm_reason(log) == (
        "ValidationError: 1 validation error for ModelConfig: Value error, User-specified "
        "max_model_len (100000) is greater than the derived max_model_len "
        "(max_position_embeddings=8192 or model_max_length=None in model's config.json)."
    )


def test_a_killed_engine_is_reported_as_vllm_logged_it_not_as_engine_dead() -> None:
    log = "\n".join(
        [
            "(APIServer pid=1) WARNING 12-01 20:16:03 [core_client.py:818] [shutdown] "
            "MPClient: engine core exited unexpectedly; starting cleanup",
            "(APIServer pid=1) ERROR 12-01 20:16:03 [async_llm.py:906] "
            "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See "
            "stack trace (above) for the root cause.",
        ]
    )
    assert vllm_reason(log) == (
        "[shutdown] MPClient: engine core exited unexpectedly; starting cleanup"
    )
    dead_only = log.splitlines()[1]
    assert vllm_reason(dead_only).startswith("EngineDeadError: EngineCore encountered")


def test_serving_options_reach_the_server_argv() -> None:
    """issue 38: tensor parallelism, the synchronous scheduler the predictor models, and
    the study's own further arguments (after the project's, so recorded in the argv)."""
    from rearrival.measure.vllm.server import ServingOptions

    model = load_served_model()
    configuration = VllmConfiguration((1, 2), 8, num_blocks=128, block_size=32)
    serving = ServingOptions(2, True, ("--attention-backend", "FLASHINFER"))
    argv = server_argv(
        Path("/py"),
        configuration,
        model,
        port=9,
        seed=3,
        max_model_len=2048,
        device="gpu",
        serving=serving,
    )
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert "--no-async-scheduling" in argv
    assert argv[-2:] == ["--attention-backend", "FLASHINFER"]
    plain = server_argv(
        Path("/py"),
        VllmConfiguration((), 8, num_blocks=128),
        model,
        port=9,
        seed=3,
        max_model_len=8,
    )
    assert "--tensor-parallel-size" not in plain and "--no-async-scheduling" not in plain


def test_the_installed_vllm_is_asked_whether_it_has_no_async_scheduling() -> None:
    from vllm_env import require_vllm

    from rearrival.vllm_env import has_no_async_scheduling

    assert has_no_async_scheduling(require_vllm())  # vLLM 0.32.0 has it
