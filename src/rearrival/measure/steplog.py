"""The decode step log: one ``[BUCKET]`` line per decode step (docs/DESIGN.md §5, paper II-D).

The serving stack does not report which bucket a decode step ran in, so the published
study added one observation-only log statement to vllm-rbln's decoder preprocessing
(``RBLNOptimumDecoderMixin.preprocess_for_decoder``, right after ``select_bucket_size``):
``[BUCKET] request_nums=<n> padded_batch_size=<b>``, and since calibration (docs/DESIGN.md §3)
a trailing ``t_mono_ns=<t>``: a monotonic clock reading taken as the step is prepared, so
the gap to the next decode line is that step's duration. Channel A is rebuilt from exactly
these (n, b) pairs, so the emulated backend writes the same line and every backend's log
is read by the one parser here. A real log carries a logger prefix (level, date, source
file) and many unrelated lines; those are skipped. A line that carries the marker but
cannot be read is an error, never skipped: a silently dropped step would bias channel A.
"""

from __future__ import annotations

import re
from pathlib import Path

from rearrival.errors import RearrivalError

MARKER = "[BUCKET]"
# Words that only occur in the patch's line: a line holding any of them is meant to be a
# bucket line, so it must parse.
_SIGNS = (MARKER, "request_nums", "padded_batch_size")
# The timestamp is optional: logs written before calibration existed carry none.
_LINE = re.compile(
    r"\[BUCKET\] request_nums=(\d+) padded_batch_size=(\d+)(?: t_mono_ns=(\d+))?\s*$"
)
# vLLM colours its logger prefix when writing to a terminal; captured logs can keep it.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_EXPECTED = (
    "expected '[BUCKET] request_nums=<n> padded_batch_size=<b> [t_mono_ns=<t>]' with 1 <= n <= b"
)


class StepLogError(RearrivalError, ValueError):
    """A step-log line that looks like a bucket line but cannot be read."""


def format_bucket_line(n: int, b: int, t_mono_ns: int | None = None) -> str:
    """The patch's log message for a decode step of ``n`` requests padded to bucket ``b``,
    with the monotonic clock reading at the step's start when one is given."""
    if not 1 <= n <= b:
        raise ValueError(f"a decode step needs 1 <= n <= b, got n={n}, b={b}")
    line = f"{MARKER} request_nums={n} padded_batch_size={b}"
    return line if t_mono_ns is None else f"{line} t_mono_ns={int(t_mono_ns)}"


def _source_text(text_or_path: str | Path) -> tuple[str, str]:
    """(source name for errors, log text). A ``str`` is a path only when it names a file."""
    if isinstance(text_or_path, Path) or (
        "\n" not in text_or_path and MARKER not in text_or_path and Path(text_or_path).is_file()
    ):
        path = Path(text_or_path)
        try:
            return str(path), path.read_text(errors="replace")
        except OSError as exc:
            raise StepLogError(
                f"{path}: cannot read the step log ({exc.strerror}); "
                "pass the server.log of a run directory"
            ) from exc
    return "<step log text>", text_or_path


def parse_step_log(text_or_path: str | Path) -> list[tuple[int, int]]:
    """The (n, b) pair of every decode step, in log order.

    Accepts log text or a path. Lines without bucket words are ignored; a line with
    them that does not end in a well-formed bucket message (or has n > b or n < 1)
    raises :class:`StepLogError` naming the file and line number.
    """
    return [(n, b) for n, b, _ in parse_step_times(text_or_path)]


def parse_step_times(text_or_path: str | Path) -> list[tuple[int, int, int | None]]:
    """(n, b, t_mono_ns or None) of every decode step, in log order (same rules as
    :func:`parse_step_log`); the calibration stage turns the timestamps into durations."""
    source, text = _source_text(text_or_path)
    pairs: list[tuple[int, int, int | None]] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not any(sign in raw for sign in _SIGNS):
            continue
        line = _ANSI.sub("", raw)
        match = _LINE.search(line)
        if match is None or line.count(MARKER) != 1:
            raise StepLogError(
                f"{source}:{lineno}: malformed bucket line {raw.strip()!r}; "
                f"{_EXPECTED}; fix or delete the line"
            )
        n, b = int(match.group(1)), int(match.group(2))
        if not 1 <= n <= b:
            raise StepLogError(
                f"{source}:{lineno}: bucket line has request_nums={n} "
                f"padded_batch_size={b}; {_EXPECTED}; fix or delete the line"
            )
        stamp = match.group(3)
        pairs.append((n, b, None if stamp is None else int(stamp)))
    return pairs
