"""The decode step log: one ``[BUCKET]`` line per decode step (SPEC section 6, paper II-D).

The serving stack does not report which bucket a decode step ran in, so the published
study added one observation-only log statement to vllm-rbln's decoder preprocessing
(``RBLNOptimumDecoderMixin.preprocess_for_decoder``, right after ``select_bucket_size``):
``[BUCKET] request_nums=<n> padded_batch_size=<b>``. Channel A is rebuilt from exactly
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
_LINE = re.compile(r"\[BUCKET\] request_nums=(\d+) padded_batch_size=(\d+)\s*$")
# vLLM colours its logger prefix when writing to a terminal; captured logs can keep it.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_EXPECTED = "expected '[BUCKET] request_nums=<n> padded_batch_size=<b>' with 1 <= n <= b"


class StepLogError(RearrivalError, ValueError):
    """A step-log line that looks like a bucket line but cannot be read."""


def format_bucket_line(n: int, b: int) -> str:
    """The patch's log message for a decode step of ``n`` requests padded to bucket ``b``."""
    if not 1 <= n <= b:
        raise ValueError(f"a decode step needs 1 <= n <= b, got n={n}, b={b}")
    return f"{MARKER} request_nums={n} padded_batch_size={b}"


def _source_text(text_or_path: str | Path) -> tuple[str, str]:
    """(source name for errors, log text). A ``str`` is a path only when it names a file."""
    if isinstance(text_or_path, Path) or (
        "\n" not in text_or_path and MARKER not in text_or_path
        and Path(text_or_path).is_file()
    ):
        path = Path(text_or_path)
        try:
            return str(path), path.read_text(errors="replace")
        except OSError as exc:
            raise StepLogError(f"{path}: cannot read the step log ({exc.strerror}); "
                               "pass the server.log of a run directory") from exc
    return "<step log text>", text_or_path


def parse_step_log(text_or_path: str | Path) -> list[tuple[int, int]]:
    """The (n, b) pair of every decode step, in log order.

    Accepts log text or a path. Lines without bucket words are ignored; a line with
    them that does not end in a well-formed bucket message (or has n > b or n < 1)
    raises :class:`StepLogError` naming the file and line number.
    """
    source, text = _source_text(text_or_path)
    pairs: list[tuple[int, int]] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not any(sign in raw for sign in _SIGNS):
            continue
        line = _ANSI.sub("", raw)
        match = _LINE.search(line)
        if match is None or line.count(MARKER) != 1:
            raise StepLogError(f"{source}:{lineno}: malformed bucket line {raw.strip()!r}; "
                               f"{_EXPECTED}; fix or delete the line")
        n, b = int(match.group(1)), int(match.group(2))
        if not 1 <= n <= b:
            raise StepLogError(f"{source}:{lineno}: bucket line has request_nums={n} "
                               f"padded_batch_size={b}; {_EXPECTED}; fix or delete the line")
        pairs.append((n, b))
    return pairs
