"""The ``search`` block of a study definition as typed settings (paper V-A), and the
command-line overrides of it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from rearrival.config.study import StudyConfig, Workload
from rearrival.search.errors import SearchError


@dataclass(frozen=True)
class SearchSettings:
    """The ``search`` block of the study definition (defaults = config/schema.yaml)."""

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
    # a trace); None: the paper's two-round sessions
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
        for subset in self.restricted_n:
            if not subset or not set(subset) <= set(self.n):
                raise SearchError(
                    f"search.restricted_n entry {list(subset)} must be a "
                    f"non-empty subset of search.n {list(self.n)}"
                )

    @classmethod
    def from_config(cls, cfg: StudyConfig) -> SearchSettings:
        """The top-level ``search`` block (the paper's search, two-round inputs)."""
        settings = cls._from_mapping(cfg.search)
        _check_seed_blocks(cfg)
        return settings

    @classmethod
    def for_study(cls, cfg: StudyConfig, name: str) -> SearchSettings:
        """A study's own search (``studies.<name>.search``) over the study's workload,
        whose pick is that study's ``selected`` configuration."""
        study = cfg.study(name)
        if study.search is None:
            raise SearchError(
                f"{cfg.source}: studies.{name} has no search block; give it one (its pick "
                "is the study's 'selected') or leave out --study for the top-level search"
            )
        _check_seed_blocks(cfg)
        return replace(cls._from_mapping(study.search), workload=study.workload)

    @classmethod
    def _from_mapping(cls, mapping: Mapping[str, Any]) -> SearchSettings:
        raw = dict(mapping)
        for key in ("batch_sizes", "n"):
            if key in raw:
                raw[key] = tuple(int(v) for v in raw[key])
        if "restricted_n" in raw:
            raw["restricted_n"] = tuple(
                tuple(sorted(int(v) for v in s)) for s in raw["restricted_n"]
            )
        return cls(**raw)

    def seed_block(self, inputs: str) -> int:
        return self.search_seed_block if inputs == "search" else self.evaluation_seed_block


def _check_seed_blocks(cfg: StudyConfig) -> None:
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
            value = int(block[key])
            if value in owners:
                raise SearchError(
                    f"{cfg.source}: {where}.{key} {value} is also {owners[value]}; give "
                    "every study and every search its own seed blocks"
                )
            owners[value] = f"{where}.{key}"


def override_settings(settings: SearchSettings, **changes: Any) -> SearchSettings:
    """Settings with command-line values (``--n``, ``--batch-sizes``, ``--max-buckets``,
    ``--memory-filter``) in place of the config's; a new N set keeps only the restricted
    N sets that lie inside it."""
    if not changes:
        return settings
    if "n" in changes:
        keep = set(changes["n"])
        changes["restricted_n"] = tuple(s for s in settings.restricted_n if set(s) <= keep)
    return replace(settings, **changes)
