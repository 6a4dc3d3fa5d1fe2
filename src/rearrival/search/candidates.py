"""The compile-time candidates of the configuration search (paper V-A, V-D).

Candidate space. For each batch_size B the bucket set holds 1 and B plus intermediate
buckets from the integers strictly between, at most ``max_buckets`` buckets IN TOTAL:
57 + 163 + 386 + 1,471 = 2,077 for B in {8, 10, 12, 16} and max_buckets 6 (4,393 for 7).
The authors' script counted intermediates + 1, so their ``--max-buckets 5`` is our 6 and
their default 6 enumerated our 4,393 (paper V-A, last paragraph of the search text).
Order is stable: batch size ascending, then bucket tuples in lexicographic order.

The compile-budget and device-memory filters, the baseline every score divides by and
the resource costs of a candidate (Tables XIV, XV) live here too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from itertools import combinations
from typing import Any

from rearrival.config.search import SearchError, SearchSettings
from rearrival.config.study import StudyConfig
from rearrival.model.buckets import select_bucket
from rearrival.model.cost.memory import DeviceMemory, device_memory
from rearrival.model.cost.profile import Profile, measured_profile
from rearrival.model.simulator.sim import SimConfig
from rearrival.search.space import SpaceSize, space_size


@dataclass(frozen=True)
class Candidate:
    """One compile-time configuration: decode buckets, batch_size, KV slots (= batch_size)."""

    buckets: tuple[int, ...]
    batch_size: int
    slots: int | None = None

    def __post_init__(self) -> None:
        buckets = tuple(self.buckets)
        if (
            not buckets
            or list(buckets) != sorted(set(buckets))
            or buckets[0] < 1
            or buckets[-1] != self.batch_size
        ):
            raise SearchError(
                f"candidate buckets {buckets} must be ascending positive "
                f"integers ending at batch_size {self.batch_size}"
            )
        object.__setattr__(self, "buckets", buckets)
        slots = self.batch_size if self.slots is None else self.slots
        if slots < 1:
            raise SearchError(f"candidate {self.batch_size}:{buckets} needs slots >= 1")
        object.__setattr__(self, "slots", slots)

    @cached_property
    def id(self) -> str:
        """Stable name, e.g. ``16:1,4,6,8,10,16`` (``/S`` appended only if slots differ)."""
        text = f"{self.batch_size}:{','.join(map(str, self.buckets))}"
        return text if self.slots == self.batch_size else f"{text}/{self.slots}"

    @property
    def n_buckets(self) -> int:
        return len(self.buckets)

    @cached_property
    def bucket_map(self) -> tuple[int, ...]:
        """b(n) for n = 0..batch_size (0 at n = 0), the only way buckets reach the schedule."""
        return (0, *(select_bucket(n, self.buckets) for n in range(1, self.batch_size + 1)))

    def tiebreak(self) -> tuple[Any, ...]:
        """Among equal predicted cost prefer fewer buckets (compile time, artifact size),
        then fewer slots (KV memory), then the enumeration order."""
        return (self.n_buckets, self.slots, self.batch_size, self.buckets)

    def sim_config(self) -> Any:
        """The base simulator of the paper (deferred release, no dummy-block rule)."""
        return SimConfig(
            buckets=self.buckets,
            batch_size=self.batch_size,
            slots=self.slots,
            release="deferred",
            dummy_block="off",
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "buckets": list(self.buckets),
            "batch_size": self.batch_size,
            "slots": self.slots,
        }


BASELINE = Candidate((1, 2, 4, 8), 8)


def parse_candidate_id(text: str) -> Candidate:
    """Inverse of ``Candidate.id``."""
    match = re.fullmatch(r"(\d+):([\d,]+)(?:/(\d+))?", text)
    if match is None:
        raise SearchError(f"candidate id {text!r} is not of the form 16:1,4,6,8,10,16")
    slots = int(match[3]) if match[3] else None
    return Candidate(tuple(int(b) for b in match[2].split(",")), int(match[1]), slots)


def enumerate_candidates(
    batch_sizes: Iterable[int] = (8, 10, 12, 16), max_buckets: int = 6
) -> list[Candidate]:
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
    out: list[Candidate] = []
    for batch in sizes:
        if batch == 1:
            out.append(Candidate((1,), 1))
            continue
        between = range(2, batch)
        sets = [
            (1, *middle, batch)
            for k in range(0, min(max_buckets - 2, len(between)) + 1)
            for middle in combinations(between, k)
        ]
        out.extend(Candidate(buckets, batch) for buckets in sorted(sets))
    return out


def candidates(
    batch_sizes: Iterable[int] = (8, 10, 12, 16),
    max_buckets: int = 6,
    profile: Profile | None = None,
    memory: DeviceMemory | None = None,
    memory_filter: bool = True,
) -> list[Candidate]:
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


def resource_costs(cand: Candidate, profile: Profile) -> dict[str, float]:
    """Compile time and artifact size (authors' fit) and KV reservation (Tables XIV, XV)."""
    kv = profile.kv_gib(cand.slots)
    return {
        "compile_s": profile.compile_seconds(cand.n_buckets),
        "artifact_gib": profile.artifact_gib(cand.n_buckets),
        "kv_gib": kv,
        "kv_gib_per_device": kv / profile.num_devices,
    }


def baseline_of(cfg: StudyConfig, study: str | None = None) -> Candidate:
    """The denominator of every score: the config's ``baseline`` configuration, or for a
    study's own search that study's baseline (its first configuration)."""
    name = "baseline" if study is None else cfg.study(study).baseline
    raw = cfg.configurations.get(name)
    if raw is None:
        raise SearchError(
            f"{cfg.source}: configurations.baseline is missing; the search "
            "scores candidates against it (e.g. buckets [1,2,4,8], batch_size 8)"
        )
    return Candidate(raw.buckets, raw.batch_size, raw.slots)


def search_candidates(settings: SearchSettings, profile: Profile | None = None) -> list[Candidate]:
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
