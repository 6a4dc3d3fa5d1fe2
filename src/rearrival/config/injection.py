"""The ``injection`` section: the prefill-injection study (paper Section III-C). Its
defaults are the one source (config/schema.yaml documents the same values,
tests/test_config_schema.py checks that they agree)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InjectionSettings:
    """Background streaming sessions and the prefills injected into them."""

    background_sessions: int = 4
    background_gen_tokens: int = 256
    injected_prompt_tokens: tuple[int, ...] = (256, 1024, 2048, 4096)
    inject_at_s: float = 1.2
    configuration: str = "baseline"
