"""Discrete batch alignment (paper Section III-A; docs/DESIGN.md §1): a decode batch of n
requests runs as the next size compiled at build time, the rest of it padding.

RBLN compiles decoder graphs for a bucket set whose largest bucket is the batch size; a
vLLM GPU server captures CUDA graphs for a set of sizes and runs a batch above the largest
eagerly, unpadded. The configuration types (``rearrival.model.configuration``) check their
knobs here (the simulator's own ``SimConfig`` is an ``RblnConfiguration``), so the
checks and the slots default exist once; the simulators and the emulator pad with these
functions.
"""

from __future__ import annotations

from bisect import bisect_left

from rearrival.limits import BATCH_SIZE_WHY, MAX_BATCH_SIZE, bound_problem


def is_integer(value: object) -> bool:
    """An int that is not a bool (True == 1 would pass as a batch size)."""
    return isinstance(value, int) and not isinstance(value, bool)


def int_sizes(value: object) -> tuple[int, ...] | None:
    """A list of sizes as a tuple, or None when it is not a list of anything (a number,
    None): the caller names its field."""
    try:
        return tuple(value)  # type: ignore[call-overload]
    except TypeError:
        return None


def default_slots(slots: int | None, batch_size: int) -> int:
    """KV slots S default to batch_size: eager attention allocates one ``max_seq_len``
    block per sequence of the batch (paper Section II-B; docs/DESIGN.md §1)."""
    return batch_size if slots is None else slots


def slots_problem(slots: object) -> str | None:
    """What is wrong with a KV slot count (not a positive integer, or over the bound of
    ``size_problem``), or None."""
    if not is_integer(slots) or slots < 1:  # type: ignore[operator]
        return f"slots {slots!r} must be a positive integer (default: batch_size)"
    return size_problem("slots", slots)  # type: ignore[arg-type]


def select_bucket(n: int, buckets: tuple[int, ...]) -> int:
    """Smallest compiled bucket holding ``n`` requests (discrete batch alignment, III-A).

    ``buckets`` must be sorted ascending; ``n`` above the largest bucket is a caller bug
    because the RBLN scheduler never runs more than batch_size requests.
    """
    index = bisect_left(buckets, n)
    if index == len(buckets):
        raise ValueError(f"{n} running requests exceed the largest bucket {buckets[-1]}")
    return buckets[index]


def size_problem(name: str, value: int) -> str | None:
    """A batch size or KV slot count over ``MAX_BATCH_SIZE``, or None: a configuration's
    tables (bucket map, step times, slots) grow with it."""
    return bound_problem(name, value, MAX_BATCH_SIZE, BATCH_SIZE_WHY)


def sizes_problem(buckets: tuple[int, ...], what: str, example: str) -> str | None:
    """What is wrong with a set of compiled sizes (positive, ascending, distinct), or None."""
    if not all(is_integer(b) and b > 0 for b in buckets):
        return f"{what} {list(buckets)} must be positive integers such as {example}"
    if list(buckets) != sorted(set(buckets)):
        return f"{what} {list(buckets)} must be ascending without repeats, e.g. {example}"
    return None


def bucket_set_problem(buckets: tuple[int, ...], batch_size: int) -> str | None:
    """What is wrong with an RBLN bucket set for a batch size, or None.

    The buckets are distinct positive integers in ascending order and the largest is
    batch_size, since the scheduler runs up to batch_size requests and vllm-rbln compiles
    no decoder graph larger than the batch.
    """
    if not is_integer(batch_size) or batch_size < 1:
        return f"batch_size {batch_size!r} must be a positive integer"
    too_large = size_problem("batch_size", batch_size)
    if too_large is not None:
        return too_large
    if not buckets:
        return f"buckets {list(buckets)} must be positive integers such as 1,2,4,8"
    problem = sizes_problem(buckets, "buckets", "1,2,4,8")
    if problem is not None:
        return problem
    if buckets[-1] != batch_size:
        return (
            f"buckets {list(buckets)} must have batch_size {batch_size} as the largest "
            f"bucket; add {batch_size} and drop larger ones, or set batch_size to "
            f"{buckets[-1]}"
        )
    return None


def capture_padded(n: int, sizes: tuple[int, ...]) -> int:
    """The batch ``n`` decode requests run as on vLLM: the next capture size holding
    them, or ``n`` itself (eager) above the largest or with no graphs captured."""
    index = bisect_left(sizes, n)
    return sizes[index] if index < len(sizes) else n
