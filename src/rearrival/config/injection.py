"""The ``injection`` section: the prefill-injection study (paper Section III-C). Its
fields are the one source of their defaults and of what config/schema.yaml says of them
(rearrival.config.keys)."""

from __future__ import annotations

from dataclasses import dataclass

from rearrival.config.keys import key


@dataclass(frozen=True)
class InjectionSettings:
    """Background streaming sessions and the prefills injected into them."""

    background_sessions: int = key(
        4, description="Streaming sessions decoding when the prefill is injected.", minimum=1
    )
    background_gen_tokens: int = key(
        256, description="Tokens each background session generates.", minimum=2
    )
    injected_prompt_tokens: tuple[int, ...] = key(
        (256, 1024, 2048, 4096),
        description="Prompt sizes of the injected prefills.",
        items={"minimum": 1},
    )
    inject_at_s: float = key(
        1.2,
        description="When the injected request arrives (s after the background starts).",
        minimum=0,
    )
    configuration: str = key("baseline", description="Configuration name the injection runs on.")
