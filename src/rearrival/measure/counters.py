"""The Prometheus counters of a server's /metrics (docs/DESIGN.md §15): scraped before and
after a replay, their delta is what the run moved them by; the cached-token counter is
what the requests' own reuse reports must sum to (never ``prefix_cache_hits``, paper
Section II-D)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from rearrival.measure.client_http import ClientError, get_text

CACHED_COUNTER = "vllm:prompt_tokens_cached_total"


def parse_counters(text: str) -> dict[str, float]:
    """Every ``vllm:*_total`` counter sample, summed over label sets (engines, models).

    Untyped samples count too: a ``# TYPE`` line naming the family without ``_total``
    leaves the parser unable to type the sample, yet it is the same counter.
    """
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.type not in ("counter", "unknown", "untyped"):
            continue
        for sample in family.samples:
            if sample.name.startswith("vllm:") and sample.name.endswith("_total"):
                totals[sample.name] = totals.get(sample.name, 0.0) + float(sample.value)
    return totals


async def scrape_metrics(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """The server's ``vllm:*_total`` counters now."""
    text = await get_text(session, f"{url}/metrics")
    try:
        return parse_counters(text)
    except ValueError as exc:
        raise ClientError(
            f"GET {url}/metrics: not Prometheus text ({exc}); point the server URL at a vLLM server"
        ) from None


def summed(counters: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Counters of several servers added name by name (a fleet's counters as one)."""
    total: dict[str, float] = {}
    for one in counters:
        for name, value in one.items():
            total[name] = total.get(name, 0.0) + value
    return total


def counter_delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """What each server counter moved during the run (counters scraped both times)."""
    return {name: after[name] - before.get(name, 0.0) for name in after if name in before}
