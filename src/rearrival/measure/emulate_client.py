"""Replaying against an already running emulate-server (``rearrival run --server-url``,
docs/DESIGN.md §5): what it serves, the slice of its step log a replay wrote, and the
run directory."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import aiohttp

from rearrival.measure.client import ReplayOptions, replay
from rearrival.measure.client_http import ClientError, get_json, get_text
from rearrival.measure.client_records import RunOutcome, write_client_run
from rearrival.model.configuration import knob_names
from rearrival.model.plans.plan import Plan


async def fetch_server_log(url: str, *, since_bytes: int = 0) -> str:
    """The emulate-server's step log (``/rearrival/log``) from byte offset ``since_bytes``."""
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        text = await get_text(http, f"{url.rstrip('/')}/rearrival/log")
    return text.encode()[since_bytes:].decode(errors="replace")


async def server_configuration(url: str) -> dict[str, Any]:
    """What an emulate-server serves (buckets, batch_size, slots, seed, time_scale)."""
    return dict(await get_json(f"{url.rstrip('/')}/rearrival/config"))


def check_configuration(served: dict[str, Any], configuration: dict[str, Any], url: str) -> None:
    """Refuse to label a run with a configuration the server does not serve (the
    emulated server is the RBLN twin: its knobs are an RBLN configuration's)."""
    for key in knob_names("rbln"):
        if served.get(key) != configuration[key]:
            raise ClientError(
                f"server {url}: serves {key}={served.get(key)}, the run "
                f"asks for {configuration[key]}; restart emulate-server with the "
                "run's configuration or let the run start a fresh one"
            )


async def replay_url(
    plan: Plan,
    url: str,
    out: Path,
    *,
    variant: str,
    options: ReplayOptions,
    manifest: dict[str, Any],
) -> RunOutcome:
    """Replay against an already running emulate-server and write the run directory.

    The step log is the slice of the server's log written during this replay, so steps
    of earlier runs on the same server never leak into this one.
    """
    try:
        offset: int | None = len((await fetch_server_log(url)).encode())
    except ClientError:
        offset = None  # the replay reports the unreachable server as the run's reason
    run = await replay(plan, url, variant=variant, options=options)
    log = None
    if offset is not None:
        with contextlib.suppress(ClientError):
            log = await fetch_server_log(url, since_bytes=offset)
    return write_client_run(out, run, manifest=manifest, server_log=log)
