"""The ``search`` section and a study's own ``search`` block (docs/DESIGN.md §12, paper
Section V-A): the one source of the search's defaults and of what config/schema.yaml
says of its keys (rearrival.config.keys)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Protocol

from rearrival.config.keys import key, object_schema
from rearrival.config.workload import Workload
from rearrival.errors import RearrivalError
from rearrival.limits import MAX_SESSIONS, SESSIONS_WHY, check_at_most


class SearchError(RearrivalError, ValueError):
    """Search settings, plans or shard files that cannot be used; names the file and fix."""


class _Searches(Protocol):
    """What the seed-block check reads of a study definition (config.study.StudyConfig,
    which imports this module, so it is described here rather than imported)."""

    source: str
    search: SearchSettings

    @property
    def studies(self) -> Mapping[str, Any]: ...

    def study(self, name: str) -> Any: ...


@dataclass(frozen=True)
class SearchSettings:
    """The ``search`` block of the study definition."""

    batch_sizes: tuple[int, ...] = key(
        (8, 10, 12, 16), description="Candidate batch sizes.", items={"minimum": 1}
    )
    max_buckets: int = key(
        6,
        description="Most buckets in a candidate, counting 1 and batch_size (6 -> 2,077 "
        "candidates).",
        minimum=2,
    )
    n: tuple[int, ...] = key(
        (6, 8, 10),
        description="Concurrency levels of the search and evaluation inputs.",
        items={"minimum": 1},
    )
    seeds: int = key(3, description="Seeds per N.", minimum=1)
    blocks: int = key(3, description="Input blocks per seed.", minimum=1)
    search_seed_block: int = key(100, description="Seed block of the search inputs.", minimum=0)
    evaluation_seed_block: int = key(
        200,
        description="Seed block of the evaluation inputs (never used for selection).",
        minimum=0,
    )
    restricted_n: tuple[tuple[int, ...], ...] = key(
        ((6, 8), (8, 10)), description="Restricted searches reported beside the full one."
    )
    top: int = key(20, description="Rows in the top-k tables.", minimum=1)
    shards: int = key(4, description="Snakemake jobs the candidate list is split into.", minimum=1)
    memory_filter: bool = key(
        True,
        description="Exclude candidates whose KV slots plus the model's weights do not fit the "
        "devices (profile memory block: memory per device, weights; KV bytes per slot); the "
        "summary counts what each filter removed.",
    )
    # agent sessions (a study's own search over its workload: generated or sampled from
    # a trace); None: the paper's two-round sessions. Not a key of the block: a study's
    # search takes the study's workload.
    workload: Workload | None = None

    def __post_init__(self) -> None:
        if self.search_seed_block == self.evaluation_seed_block:
            raise SearchError(
                "search.evaluation_seed_block must differ from "
                "search.search_seed_block so evaluation seeds are new"
            )
        if self.seeds < 1 or self.blocks < 1 or self.top < 1 or self.shards < 1:
            raise SearchError(
                "search.seeds, search.blocks, search.top and search.shards must be >= 1"
            )
        if not self.n or any(n < 1 for n in self.n):
            raise SearchError(f"search.n {list(self.n)} must list concurrency levels >= 1")
        check_at_most("--n (search.n)", max(self.n), MAX_SESSIONS, SESSIONS_WHY)
        for subset in self.restricted_n:
            if not subset or not set(subset) <= set(self.n):
                raise SearchError(
                    f"search.restricted_n entry {list(subset)} must be a "
                    f"non-empty subset of search.n {list(self.n)}"
                )

    @classmethod
    def from_mapping(
        cls, mapping: Mapping[str, Any], workload: Workload | None = None
    ) -> SearchSettings:
        """Typed settings from a (schema-valid) block; keys left out take the defaults."""
        raw = dict(mapping)
        for listed in ("batch_sizes", "n"):
            if listed in raw:
                raw[listed] = tuple(int(v) for v in raw[listed])
        if "restricted_n" in raw:
            raw["restricted_n"] = tuple(
                tuple(sorted(int(v) for v in s)) for s in raw["restricted_n"]
            )
        return cls(**raw, workload=workload)

    def with_study_block(self, own: Mapping[str, Any], workload: Workload | None) -> SearchSettings:
        """A study's own block over these (top-level) values; a new N set keeps only the
        restricted N sets inside it (as ``rearrival search --n`` does)."""
        merged = self.as_dict() | dict(own)
        if "n" in own and "restricted_n" not in own:
            merged["restricted_n"] = [s for s in self.restricted_n if set(s) <= set(own["n"])]
        return SearchSettings.from_mapping(merged, workload)

    def as_dict(self) -> dict[str, Any]:
        """The block's keys and values (the workload is the study's, registered there)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "workload"}

    @classmethod
    def from_config(cls, cfg: _Searches) -> SearchSettings:
        """The top-level ``search`` block (the paper's search, two-round inputs)."""
        _check_seed_blocks(cfg)
        return cfg.search

    @classmethod
    def for_study(cls, cfg: _Searches, name: str) -> SearchSettings:
        """A study's own search (``studies.<name>.search``) over the study's workload,
        whose pick is that study's ``selected`` configuration."""
        study = cfg.study(name)
        if study.search is None:
            raise SearchError(
                f"{cfg.source}: studies.{name} has no search block; give it one (its pick "
                "is the study's 'selected') or leave out --study for the top-level search"
            )
        _check_seed_blocks(cfg)
        return study.search

    def seed_block(self, inputs: str) -> int:
        return self.search_seed_block if inputs == "search" else self.evaluation_seed_block


def study_search_schema(description: str) -> dict[str, Any]:
    """The schema of a study's own ``search`` block: the top-level block's keys, its
    candidate and N lists not empty and both seed blocks given (they must be new)."""
    return object_schema(
        SearchSettings,
        description,
        overrides={
            "batch_sizes": {"minItems": 1},
            "max_buckets": {
                "description": "Most buckets in a candidate, counting 1 and batch_size."
            },
            "n": {"minItems": 1},
            "memory_filter": {
                "description": "Exclude candidates whose KV slots plus weights do not fit the "
                "devices."
            },
        },
        required=["search_seed_block", "evaluation_seed_block"],
    )


def _check_seed_blocks(cfg: _Searches) -> None:
    """Every search (the top-level one and each study's own) draws from seed blocks no
    study and no other search uses, so no input is ever shared."""
    owners: dict[int, str] = {
        s.seed_block: f"studies.{s.name}.seed_block" for s in cfg.studies.values()
    }
    searches = [("search", cfg.search)] + [
        (f"studies.{s.name}.search", s.search) for s in cfg.studies.values() if s.search is not None
    ]
    for where, block in searches:
        for seed_key in ("search_seed_block", "evaluation_seed_block"):
            value = getattr(block, seed_key)
            if value in owners:
                raise SearchError(
                    f"{cfg.source}: {where}.{seed_key} {value} is also {owners[value]}; give "
                    "every study and every search its own seed blocks"
                )
            owners[value] = f"{where}.{seed_key}"
