"""Binary min-heaps on preallocated numpy arrays, for the compiled cores of both rule sets
(``rbln.core``, ``vllm.core``; docs/DESIGN.md §4, §15).

``push``/``pop`` order int64 keys (the RBLN core's free slots, eviction keys and packed
completion keys); ``push_arrival``/``pop_arrival`` order request ids by (time, request
id) through ``before``, which is how every core orders its arrivals and queued sends
(ties in request-id order, so in session order). Each function takes the heap array and
its current size and returns the new size (and the popped value), so a core keeps its
heaps as plain arrays. ``inline="always"`` folds them into the caller's machine code, as
when each core had its own copy, so the cores run no slower for sharing them."""

from __future__ import annotations

from numba import njit


@njit(cache=True, inline="always")
def push(heap, size, value):
    """Push ``value`` onto the int min-heap ``heap[:size]``; returns the new size."""
    pos = size
    while pos > 0:
        parent = (pos - 1) >> 1
        if heap[parent] <= value:
            break
        heap[pos] = heap[parent]
        pos = parent
    heap[pos] = value
    return size + 1


@njit(cache=True, inline="always")
def pop(heap, size):
    """Pop the smallest of ``heap[:size]`` (size > 0); returns (value, new size)."""
    top = heap[0]
    size -= 1
    last = heap[size]
    pos = 0
    while True:
        child = 2 * pos + 1
        if child >= size:
            break
        if child + 1 < size and heap[child + 1] < heap[child]:
            child += 1
        if last <= heap[child]:
            break
        heap[pos] = heap[child]
        pos = child
    if size > 0:
        heap[pos] = last
    return top, size


@njit(cache=True, inline="always")
def before(when, a, b):
    """Arrival heap order: (arrival time ``when[rid]``, request id)."""
    return when[a] < when[b] or (when[a] == when[b] and a < b)


@njit(cache=True, inline="always")
def push_arrival(heap, size, rid, when):
    """Push request ``rid`` onto the arrival heap ``heap[:size]``; returns the new size."""
    pos = size
    while pos > 0:
        parent = (pos - 1) >> 1
        if not before(when, rid, heap[parent]):
            break
        heap[pos] = heap[parent]
        pos = parent
    heap[pos] = rid
    return size + 1


@njit(cache=True, inline="always")
def pop_arrival(heap, size, when):
    """Pop the earliest request of ``heap[:size]`` (size > 0); returns (rid, new size)."""
    top = heap[0]
    size -= 1
    last = heap[size]
    pos = 0
    while True:
        child = 2 * pos + 1
        if child >= size:
            break
        if child + 1 < size and before(when, heap[child + 1], heap[child]):
            child += 1
        if not before(when, heap[child], last):
            break
        heap[pos] = heap[child]
        pos = child
    if size > 0:
        heap[pos] = last
    return top, size
