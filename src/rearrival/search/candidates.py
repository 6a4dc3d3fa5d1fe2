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

from collections.abc import Iterable
from itertools import combinations
from typing import Any

from rearrival.config.search import SearchError, SearchSettings
from rearrival.config.study import StudyConfig
from rearrival.model.configuration import RblnConfiguration
from rearrival.model.cost.memory import DeviceMemory, device_memory
from rearrival.model.cost.profile import Profile, measured_profile
from rearrival.search.space import SpaceSize, space_size


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


def candidates(
    batch_sizes: Iterable[int] = (8, 10, 12, 16),
    max_buckets: int = 6,
    profile: Profile | None = None,
    memory: DeviceMemory | None = None,
    memory_filter: bool = True,
) -> list[RblnConfiguration]:
    """The searched candidates in stable order: enumeration minus those over the compile
    budget and, with ``memory_filter``, those whose KV and weights do not fit the devices
    (none of the paper's 2,077 is excluded by either). Both filters decide by size alone,
    so the space is counted first (``rearrival.search.space``: a space over the bound is
    refused) and only what they leave is enumerated."""
    profile = profile or measured_profile()
    memory = memory or device_memory(profile)
    size = space_size(batch_sizes, max_buckets, profile, memory, memory_filter)
    size.check_bound()
    if not size.searched:
        return []
    return enumerate_candidates(size.searched_batch_sizes, size.searched_max_buckets)


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
        raise SearchError(settings_space(settings, profile).empty_message())
    return kept


def settings_space(settings: SearchSettings, profile: Profile) -> SpaceSize:
    """The counted space of a search's settings (what the summary reports)."""
    return space_size(
        settings.batch_sizes,
        settings.max_buckets,
        profile,
        device_memory(profile),
        settings.memory_filter,
    )
