"""The compile-time candidates of the configuration search (paper V-A, V-D).

Candidate space. A candidate is a compiled configuration
(``rearrival.model.configuration.RblnConfiguration``, slots = batch_size). For each
batch_size B the bucket set holds 1 and B plus intermediate buckets from the integers
strictly between, at most ``max_buckets`` buckets IN TOTAL: 57 + 163 + 386 + 1,471 =
2,077 for B in {8, 10, 12, 16} and max_buckets 6 (4,393 for 7). The authors' script
counted intermediates + 1, so their ``--max-buckets 5`` is our 6 and their default 6
enumerated our 4,393 (paper V-A, last paragraph of the search text).
Order is stable: batch size ascending, then bucket tuples in lexicographic order.

The compile-budget and device-memory filters, the baseline every score divides by and
the resource costs of a candidate (Tables XIV, XV) live here too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import combinations
from typing import Any

from rearrival.config.search import SearchError, SearchSettings
from rearrival.config.study import StudyConfig
from rearrival.model.configuration import RblnConfiguration
from rearrival.model.cost.memory import DeviceMemory, device_memory
from rearrival.model.cost.profile import Profile, measured_profile


def candidate_record(candidate: RblnConfiguration) -> dict[str, Any]:
    """A candidate as the search's files write it: its ``id`` then its knobs
    (``selected.json``, advice); ``configuration_from_mapping`` reads it back."""
    return {"id": candidate.id, **candidate.as_dict()}


def enumerate_candidates(
    batch_sizes: Iterable[int] = (8, 10, 12, 16), max_buckets: int = 6
) -> list[RblnConfiguration]:
    """Every bucket set with 1 and B plus intermediates, at most ``max_buckets`` in total.

    Not filtered by compile budget; see ``candidates``.
    """
    sizes = sorted(set(batch_sizes))
    if not sizes or any(not isinstance(b, int) or b < 1 for b in sizes):
        raise SearchError(f"search.batch_sizes {list(batch_sizes)} must be integers >= 1")
    if not isinstance(max_buckets, int) or max_buckets < 2:
        raise SearchError(
            f"search.max_buckets {max_buckets!r} must be an "
            "integer >= 2: it counts 1 and batch_size too"
        )
    out: list[RblnConfiguration] = []
    for batch in sizes:
        if batch == 1:
            out.append(RblnConfiguration((1,), 1))
            continue
        between = range(2, batch)
        sets = [
            (1, *middle, batch)
            for k in range(0, min(max_buckets - 2, len(between)) + 1)
            for middle in combinations(between, k)
        ]
        out.extend(RblnConfiguration(buckets, batch) for buckets in sorted(sets))
    return out


def over_budget(candidate: RblnConfiguration, profile: Profile) -> bool:
    """True if compiling the candidate would exceed the compile budget (paper V-A)."""
    return profile.compile_seconds(candidate.n_buckets) > profile.compile_budget_s


def over_memory(candidate: RblnConfiguration, memory: DeviceMemory) -> bool:
    """True if the candidate's KV slots plus the weights do not fit the devices (V-D)."""
    return not memory.fits(candidate.slots)


def candidates(
    batch_sizes: Iterable[int] = (8, 10, 12, 16),
    max_buckets: int = 6,
    profile: Profile | None = None,
    memory: DeviceMemory | None = None,
    memory_filter: bool = True,
) -> list[RblnConfiguration]:
    """The searched candidates in stable order: enumeration minus those over the compile
    budget and, with ``memory_filter``, those whose KV and weights do not fit the devices
    (none of the paper's 2,077 is excluded by either; ``filter_counts`` counts them)."""
    profile = profile or measured_profile()
    memory = memory or device_memory(profile)
    return [
        c
        for c in enumerate_candidates(batch_sizes, max_buckets)
        if not over_budget(c, profile) and not (memory_filter and over_memory(c, memory))
    ]


def filter_counts(
    every: Sequence[RblnConfiguration], profile: Profile, memory: DeviceMemory, memory_filter: bool
) -> dict[str, int]:
    """How many candidates each filter removed, applied in order (compile budget first)."""
    budget = [c for c in every if over_budget(c, profile)]
    rest = [c for c in every if not over_budget(c, profile)]
    memory_out = [c for c in rest if over_memory(c, memory)] if memory_filter else []
    return {"excluded_by_compile_budget": len(budget), "excluded_by_memory": len(memory_out)}


def resource_costs(cand: RblnConfiguration, profile: Profile) -> dict[str, float]:
    """Compile time and artifact size (authors' fit) and KV reservation (Tables XIV, XV)."""
    kv = profile.kv_gib(cand.slots)
    return {
        "compile_s": profile.compile_seconds(cand.n_buckets),
        "artifact_gib": profile.artifact_gib(cand.n_buckets),
        "kv_gib": kv,
        "kv_gib_per_device": kv / profile.num_devices,
    }


def baseline_of(cfg: StudyConfig, study: str | None = None) -> RblnConfiguration:
    """The denominator of every score: the config's ``baseline`` configuration, or for a
    study's own search that study's baseline (its first configuration)."""
    name = "baseline" if study is None else cfg.study(study).baseline
    baseline = cfg.configurations.get(name)
    if baseline is None:
        raise SearchError(
            f"{cfg.source}: configurations.baseline is missing; the search "
            "scores candidates against it (e.g. buckets [1,2,4,8], batch_size 8)"
        )
    return baseline


def search_candidates(
    settings: SearchSettings, profile: Profile | None = None
) -> list[RblnConfiguration]:
    """The searched candidates; refuses an empty space before anything is simulated or
    written, naming the filter that removed the last candidate and how to relax it."""
    profile = profile or measured_profile()
    kept = candidates(
        settings.batch_sizes, settings.max_buckets, profile, memory_filter=settings.memory_filter
    )
    if not kept:
        raise SearchError(empty_space_message(settings, profile))
    return kept


def empty_space_message(settings: SearchSettings, profile: Profile) -> str:
    """Why no candidate is left: the compile budget (checked first) or device memory."""
    every = enumerate_candidates(settings.batch_sizes, settings.max_buckets)
    memory = device_memory(profile)
    counts = filter_counts(every, profile, memory, settings.memory_filter)
    sizes = ",".join(map(str, settings.batch_sizes))
    if counts["excluded_by_compile_budget"] == len(every):
        return (
            f"no candidate left: the compile budget ({profile.compile_budget_s:g} s) removed "
            f"all {len(every)} of batch sizes {sizes} with max_buckets {settings.max_buckets}; "
            "lower --max-buckets"
        )
    return (
        f"no candidate left: the memory filter removed all "
        f"{counts['excluded_by_memory']} within the compile budget (batch sizes {sizes}; at "
        f"most {memory.max_slots()} KV slots fit {memory.per_device_gib:g} GiB per device); "
        f"use batch sizes <= {memory.max_slots()} or --no-memory-filter"
    )
