"""What to deploy for a chosen fleet (docs/DESIGN.md §17 "Capacity"): the exact flags of
each replica and of the router in front of them, from the configuration the capacity
search priced, so the server an operator starts is the one that was simulated.

vLLM (0.32.0's ``vllm serve``, flags read in ``vllm/engine/arg_utils.py``):
``--max-num-seqs``, ``--num-gpu-blocks-override`` (the pool in blocks, the null block
included, as ``VllmConfiguration.num_blocks`` counts it), ``--max-num-batched-tokens``,
``--block-size``, ``--enable-prefix-caching``, and the CUDA-graph capture sizes as
``--cudagraph-capture-sizes`` (or ``--enforce-eager`` for none): the one spelling of
``rearrival.search.deploy``, which advise prints too. The router is vllm-router 0.1.17
(``vllm_router/router_args.py`` of its wheel): ``--worker-urls`` and ``--policy``, one of its seven;
the simulated routers map to ``ROUTER_POLICIES``; the two that are not the same rule say so in
``POLICY_NOTES``.

RBLN: optimum-rbln's ``from_pretrained`` export arguments of the configuration
(``rearrival.measure.rbln.CompileConfig``), and how many instances fit the paper's server:
an RBLN-CA25 server holds 8 cards recognised as 32 devices, and the paper served one
instance on 4 of them (``ModelSpec.num_devices``).
"""

from __future__ import annotations

import math
from typing import Any

from rearrival.model.configuration import RblnConfiguration, VllmConfiguration
from rearrival.search.deploy import (
    MODEL_PLACEHOLDER,
    rbln_compile_args,
    rbln_serve_args,
    replica_serve_lines,
    replica_urls,
    shell_line,
    vllm_router_args,
    vllm_serve_args,
)

# vllm-router 0.1.17 --policy for each simulated router (docs/DESIGN.md §17, "Deployment").
ROUTER_POLICIES = {
    "round_robin": "round_robin",
    "least_loaded": "power_of_two",
    "session_affinity": "consistent_hash",
    "prefix_aware": "cache_aware",
}
POLICY_NOTES = {
    "round_robin": "the same rule: the k-th request to worker k mod R",
    "least_loaded": "power_of_two compares two workers drawn at random by load, where the "
    "simulation takes the least loaded of all; with 2 workers they agree",
    "session_affinity": "consistent_hash keeps a session on one worker by hashing its "
    "X-Session-ID header (send the session id with every round); its first placement is by "
    "hash, where the simulation places round 0 on the least loaded worker "
    "(sticky_least_loaded is vllm-router's policy closest to that)",
    "prefix_aware": "cache_aware routes by the longest cached prompt prefix, as the "
    "simulation does by cached full blocks, with its own load-balance thresholds",
}
# The paper's server (docs/DESIGN.md §17, "Deployment"):
# an RBLN-CA25 holds 8 cards recognised as 32 devices.
RBLN_SERVER_DEVICES = 32


def vllm_deployment(
    configuration: VllmConfiguration,
    replicas: int,
    router: str,
    *,
    model: str = MODEL_PLACEHOLDER,
    host: str = "127.0.0.1",
) -> dict[str, Any]:
    """Every command line of the fleet: one ``vllm serve`` per replica (port 8000 + i, the
    flags of ``rearrival.search.deploy.vllm_serve_args``), and the router over them
    (skipped for one replica, which needs none)."""
    serve = vllm_serve_args(configuration, model=model)
    return {
        "substrate": "vllm",
        "vllm_serve_flags": serve[3:],  # after `vllm serve MODEL`
        "vllm_serve": replica_serve_lines(serve, replicas),
        "router": router_line(replicas, router, host),
        "router_policy": ROUTER_POLICIES[router],
        "router_note": POLICY_NOTES[router],
    }


def router_line(replicas: int, router: str, host: str = "127.0.0.1") -> str | None:
    """The ``vllm-router`` line over the fleet's servers (None for one replica, which
    needs no router)."""
    if replicas == 1:
        return None
    return shell_line(vllm_router_args(replica_urls(replicas, host), ROUTER_POLICIES[router]))


def rbln_deployment(
    configuration: RblnConfiguration,
    replicas: int,
    router: str,
    *,
    model: str | None = None,
    max_seq_len: int | None = None,
    num_devices: int | None = None,
    host: str = "127.0.0.1",
) -> dict[str, Any]:
    """The optimum-rbln compile arguments, the servers the fleet needs, one vllm-rbln
    ``vllm serve`` per instance (each on its own ``num_devices`` devices) and the router
    over them."""
    from rearrival.config.calibration import ModelSpec
    from rearrival.measure.rbln import CompileConfig

    devices = num_devices or ModelSpec.num_devices
    compile_config = CompileConfig(
        model or ModelSpec.name,
        configuration,
        max_seq_len or ModelSpec.max_seq_len,
        devices,
    )
    per_server = max(1, RBLN_SERVER_DEVICES // devices)
    return {
        "substrate": "rbln",
        "optimum_rbln_from_pretrained": compile_config.from_pretrained_kwargs(),
        "kv_slots": configuration.slots,
        "rearrival_compile": shell_line(
            rbln_compile_args(
                configuration,
                model=compile_config.model,
                max_seq_len=compile_config.max_seq_len,
                num_devices=devices,
                artifacts="ARTIFACTS",
            )
        ),
        "devices_per_instance": devices,
        "instances_per_server": per_server,
        "servers": math.ceil(replicas / per_server),
        "vllm_serve": replica_serve_lines(
            rbln_serve_args(configuration, max_seq_len=compile_config.max_seq_len), replicas
        ),
        "router": router_line(replicas, router, host),
        "router_policy": ROUTER_POLICIES[router],
        "router_note": POLICY_NOTES[router],
    }


def deployment(configuration: Any, replicas: int, router: str, **kwargs: Any) -> dict[str, Any]:
    """The deployment of either substrate's configuration."""
    if isinstance(configuration, VllmConfiguration):
        return vllm_deployment(configuration, replicas, router, **kwargs)
    return rbln_deployment(configuration, replicas, router, **kwargs)
