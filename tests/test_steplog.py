"""The [BUCKET] step log (docs/DESIGN.md §5): the emitted format, the real logger prefixes,
and garbage lines that must stop channel A instead of silently dropping a step."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from rearrival.errors import RearrivalError
from rearrival.measure.steplog import StepLogError, format_bucket_line, parse_step_log

# What `VLLM_LOGGING_LEVEL=DEBUG vllm serve ...` prints with the observation patch:
# engine-core process prefix, level, date, source location, other DEBUG/INFO lines.
PATCH_AT = "[model_base.py:123]"
VLLM_EXCERPT = "".join(
    [
        "INFO 11-29 10:00:00 [api_server.py:1885] vLLM API server version 0.22.0\n",
        "(EngineCore_0 pid=4711) INFO 11-29 10:00:01 [core.py:77] Initializing a V1 LLM engine\n",
        'INFO:     127.0.0.1:50312 - "POST /v1/completions HTTP/1.1" 200 OK\n',
        f"DEBUG 11-29 10:00:02 {PATCH_AT} [BUCKET] request_nums=3 padded_batch_size=4\n",
        f"(EngineCore_0 pid=4711) DEBUG 11-29 10:00:02 {PATCH_AT} "
        "[BUCKET] request_nums=1 padded_batch_size=1\n",
        "DEBUG 11-29 10:00:02 [scheduler.py:310] num_running=3 num_waiting=0 bucket sizes ok\n",
        f"\x1b[36mDEBUG\x1b[0m 11-29 10:00:03 {PATCH_AT} "
        "[BUCKET] request_nums=8 padded_batch_size=8\r\n",
        "INFO 11-29 10:00:03 [loggers.py:116] Engine 000: Avg prompt throughput: 1203.4 tokens/s\n",
        f"DEBUG 11-29 10:00:04 {PATCH_AT} [BUCKET] request_nums=5 padded_batch_size=8   \n",
    ]
)


def test_round_trip_of_formatted_lines() -> None:
    rng = random.Random(3)
    buckets = (1, 2, 4, 6, 8, 10, 16)
    pairs = []
    for _ in range(200):
        b = rng.choice(buckets)
        pairs.append((rng.randint(1, b), b))
    text = "\n".join(format_bucket_line(n, b) for n, b in pairs) + "\n"
    assert parse_step_log(text) == pairs


def test_format_is_the_published_line() -> None:
    assert format_bucket_line(3, 4) == "[BUCKET] request_nums=3 padded_batch_size=4"
    with pytest.raises(ValueError):
        format_bucket_line(5, 4)
    with pytest.raises(ValueError):
        format_bucket_line(0, 1)


def test_realistic_vllm_debug_log_is_read_with_prefixes(tmp_path: Path) -> None:
    expected = [(3, 4), (1, 1), (8, 8), (5, 8)]
    assert parse_step_log(VLLM_EXCERPT) == expected
    log = tmp_path / "server.log"
    log.write_text(VLLM_EXCERPT)
    assert parse_step_log(log) == expected
    assert parse_step_log(str(log)) == expected


def test_log_without_bucket_lines_gives_no_steps() -> None:
    assert parse_step_log("INFO started\nDEBUG nothing here\n") == []


@pytest.mark.parametrize(
    "garbage",
    [
        "DEBUG 11-29 10:00:05 [model_base.py:123] [BUCKET] request_nums=3 padded_batch_size=",
        "DEBUG 11-29 10:00:05 [model_base.py:123] [BUCKET] request_nums=x padded_batch_size=4",
        "DEBUG 11-29 10:00:05 [model_base.py:123] request_nums=3 padded_batch_size=4",
        "[BUCKET] request_nums=3 padded_batch_size=4[BUCKET] request_nums=1 padded_batch_size=1",
        "[BUCKET] request_nums=3 padded_batch_size=4 (truncated",
        "[BUCKET] request_nums=5 padded_batch_size=4",
        "[BUCKET] request_nums=0 padded_batch_size=1",
    ],
)
def test_malformed_bucket_line_names_file_and_line(tmp_path: Path, garbage: str) -> None:
    log = tmp_path / "server.log"
    log.write_text(VLLM_EXCERPT + garbage + "\n")
    with pytest.raises(StepLogError) as info:
        parse_step_log(log)
    message = str(info.value)
    assert f"{log}:10:" in message
    assert "\n" not in message
    assert isinstance(info.value, RearrivalError)


def test_malformed_text_names_the_text_source() -> None:
    with pytest.raises(StepLogError, match=r"<step log text>:2:"):
        parse_step_log("ok\n[BUCKET] request_nums=2\n")


def test_unreadable_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StepLogError, match="cannot read"):
        parse_step_log(tmp_path / "missing.log")


def test_timestamps_are_read_when_present_and_optional() -> None:
    """Calibration (docs/DESIGN.md §3) reads the patch's monotonic clock; older logs carry none."""
    from rearrival.measure.steplog import parse_step_times

    text = (
        f"DEBUG {PATCH_AT} {format_bucket_line(3, 4, 1_000)}\n"
        "[BUCKET] request_nums=3 padded_batch_size=4 t_mono_ns=2500\n"
        "[BUCKET] request_nums=1 padded_batch_size=1\n"
    )
    assert parse_step_times(text) == [(3, 4, 1000), (3, 4, 2500), (1, 1, None)]
    assert parse_step_log(text) == [(3, 4), (3, 4), (1, 1)]
    with pytest.raises(StepLogError, match=r":1: malformed bucket line"):
        parse_step_times("[BUCKET] request_nums=3 padded_batch_size=4 t_mono_ns=x\n")
