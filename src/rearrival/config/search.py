"""The ``search`` section and a study's own ``search`` block (docs/DESIGN.md §12, paper
Section V-A): the one source of the search's defaults (config/schema.yaml documents the
same values; tests/test_config_schema.py checks that they agree)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Protocol

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

    batch_sizes: tuple[int, ...] = (8, 10, 12, 16)
    max_buckets: int = 6
    n: tuple[int, ...] = (6, 8, 10)
    seeds: int = 3
    blocks: int = 3
    search_seed_block: int = 100
    evaluation_seed_block: int = 200
    restricted_n: tuple[tuple[int, ...], ...] = ((6, 8), (8, 10))
    top: int = 20
    shards: int = 4
    memory_filter: bool = True
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
        for key in ("batch_sizes", "n"):
            if key in raw:
                raw[key] = tuple(int(v) for v in raw[key])
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
        for key in ("search_seed_block", "evaluation_seed_block"):
            value = getattr(block, key)
            if value in owners:
                raise SearchError(
                    f"{cfg.source}: {where}.{key} {value} is also {owners[value]}; give "
                    "every study and every search its own seed blocks"
                )
            owners[value] = f"{where}.{key}"
