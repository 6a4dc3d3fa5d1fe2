"""The ``fleet:`` section of a study definition (docs/DESIGN.md §18; README "A study on a
real fleet"): the preregistered open-traffic study on vLLM servers behind vllm-router.

Its conditions are every router policy x the two KV pools (``small_pool``: re-arrivals
lose prefixes to eviction; ``large_pool``: they do not), each run on a fresh fleet, on one
open plan drawn from ``pool`` (Poisson session starts at ``rate`` over ``horizon_s``,
``seed``). A policy whose placement the project cannot know in advance (consistent_hash:
a hash the router computes) is predicted by its nearest router model, named here once
(:data:`NEAREST_ROUTER_MODEL`) and stated in the registration."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from rearrival.config.errors import StudyConfigError
from rearrival.config.keys import key

# vllm-router's policy -> the fleet predictor's router (rearrival.model.fleet.routers) that
# stands for it in the registered predictions, and why it is the nearest.
NEAREST_ROUTER_MODEL: dict[str, tuple[str, str]] = {
    "round_robin": ("round_robin", "the same rule: requests in turn over the replicas"),
    "consistent_hash": (
        "session_affinity",
        "every round of a session on one replica, as the router's hash of X-Session-ID "
        "keeps it; which replica is the router's hash, unknown in advance, so the model's "
        "session-to-replica map differs from the router's while the rule (never move a "
        "session) is the same",
    ),
    "cache_aware": (
        "prefix_aware",
        "a request to the replica holding the longest cached prefix of its prompt; the "
        "router matches text in a tree of its own, the model matches token blocks",
    ),
}


@dataclass(frozen=True)
class FleetCondition:
    """One router policy on one KV pool (a configuration name); one fresh fleet per run."""

    policy: str
    configuration: str

    @property
    def label(self) -> str:
        return f"{self.policy}-{self.configuration}"

    @property
    def router_model(self) -> str:
        """The fleet predictor's router registered for this policy."""
        return NEAREST_ROUTER_MODEL[self.policy][0]


@dataclass(frozen=True)
class FleetStudySettings:
    pool: str = key(
        description="Sessions the open plan draws from: a plan file (sessions naming a shared "
        "prefix)."
    )
    rate: float = key(description="Poisson session starts per second.", exclusiveMinimum=0)
    horizon_s: float = key(description="Seconds over which sessions start.", exclusiveMinimum=0)
    small_pool: str = key(
        description="The configuration whose KV pool is too small to keep every session's "
        "prefix across its tool waits."
    )
    large_pool: str = key(description="The configuration whose KV pool keeps every prefix.")
    study: str = key(
        "fleet_open",
        description="The study's name (preregistration/<study>/, results/runs/<study>/).",
        pattern="^[a-z0-9_]+$",
    )
    seed: int = key(0, description="Seed of the open plan.", minimum=0)
    replicas: int = key(2, description="vLLM servers behind the router.", minimum=2)
    policies: tuple[str, ...] = key(
        ("round_robin", "consistent_hash"),
        description="vllm-router policies, each with a registered nearest router model: "
        "round_robin, consistent_hash, cache_aware.",
        minItems=2,
        items={"enum": ["round_robin", "consistent_hash", "cache_aware"]},
    )
    replicates: int = key(1, description="Runs per condition, each on a fresh fleet.", minimum=1)
    variant: str = key(
        "wait", description="The plan variant replayed (wait: the tool gaps as drawn)."
    )
    router_ready_timeout_s: float = key(
        60.0, description="Seconds the router may take to become ready.", exclusiveMinimum=0
    )
    description: str = key("", description="What the study asks (the report's heading line).")

    @classmethod
    def from_mapping(
        cls, raw: dict[str, Any] | None, source: str, configurations: dict[str, Any]
    ) -> FleetStudySettings | None:
        """The section (None when absent), its names checked against ``configurations``."""
        if raw is None:
            return None
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()}
        try:
            settings = cls(**values)
        except TypeError as exc:
            raise StudyConfigError(f"{source}: fleet: {exc}") from None
        problem = settings.problem(configurations)
        if problem is not None:
            raise StudyConfigError(f"{source}: fleet.{problem}")
        return settings

    def problem(self, configurations: dict[str, Any]) -> str | None:
        """What the schema cannot say: known policies, defined and distinct pools, the
        small pool smaller than the large one."""
        for policy in self.policies:
            if policy not in NEAREST_ROUTER_MODEL:
                return (
                    f"policies names {policy!r}, which has no registered router model; "
                    f"use {', '.join(NEAREST_ROUTER_MODEL)}"
                )
        if len(set(self.policies)) != len(self.policies):
            return "policies names a policy twice; name each once"
        for pool_key in ("small_pool", "large_pool"):
            name = getattr(self, pool_key)
            if name not in configurations:
                return (
                    f"{pool_key} names '{name}', which is not under configurations; define it or "
                    f"use one of {', '.join(configurations)}"
                )
        small, large = (configurations[self.small_pool], configurations[self.large_pool])
        if not getattr(small, "num_blocks", 0) < getattr(large, "num_blocks", 0):
            return (
                f"small_pool '{self.small_pool}' must have fewer num_blocks than large_pool "
                f"'{self.large_pool}'; swap them or resize the pools"
            )
        return None

    @property
    def pools(self) -> tuple[str, str]:
        return (self.small_pool, self.large_pool)

    def conditions(self) -> tuple[FleetCondition, ...]:
        """Every policy on every pool, policies first (the report's order)."""
        return tuple(FleetCondition(p, c) for p in self.policies for c in self.pools)

    def condition(self, label: str) -> FleetCondition:
        for condition in self.conditions():
            if condition.label == label:
                return condition
        known = ", ".join(c.label for c in self.conditions())
        raise StudyConfigError(f"fleet condition {label!r}: not in the study; use one of {known}")

    def as_dict(self) -> dict[str, Any]:
        return {
            f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v
            for f in fields(self)
        }
