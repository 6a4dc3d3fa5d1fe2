"""The options of ``rearrival run``, one typed alias each.

Why a module of their own: ``run`` takes two dozen options across four backends, and written
inline they made the verb's function 191 lines long (issue 33: no function over 150 lines
outside the numba cores). Declared here, its signature is one line per option and its body
is its logic.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

RunPlanPathOption = Annotated[
    Path,
    typer.Argument(metavar="PLAN", help="Plan file (.parquet|.json), two-round or multi-round."),
]
RunOutOption = Annotated[
    Path, typer.Option("--out", help="Run directory to create (must not exist).")
]
RunBackendOption = Annotated[
    str,
    typer.Option("--backend", help="emulated (in process), emulated-http, rbln or vllm."),
]
RunBucketsOption = Annotated[
    str | None,
    typer.Option(
        "--buckets",
        help="Compiled buckets (default 1,2,4,8); vllm: CUDA-graph capture sizes, GPU "
        "only (default none: eager).",
    ),
]
RunBatchSizeOption = Annotated[
    int, typer.Option("--batch-size", help="Batch size (at most 1,024); vllm: --max-num-seqs.")
]
RunSlotsOption = Annotated[
    int | None, typer.Option("--slots", help="KV slots; default batch_size; at most 1,024.")
]
RunVariantOption = Annotated[str, typer.Option("--variant", help="wait, control or equal.")]
RunUrlOption = Annotated[
    str | None,
    typer.Option(
        "--url", help="emulated-http: a running emulate-server; default: start a fresh one."
    ),
]
RunSeedOption = Annotated[int, typer.Option("--seed", help="Run seed (server and sampler).")]
RunTimeScaleOption = Annotated[
    float | None,
    typer.Option(
        "--time-scale",
        help="Wall s per plan s (emulated-http; default: the schema's emulated_http.time_scale).",
    ),
]
RunStudyOption = Annotated[str, typer.Option("--study", help="Study name in the manifest.")]
RunReplicateOption = Annotated[
    int | None, typer.Option("--replicate", help="Replicate index; default: the plan's.")
]
RunConditionOption = Annotated[
    str | None,
    typer.Option(
        "--condition",
        help="Condition label; default: BACKEND:ID:VARIANT, ID the configuration's "
        "id (e.g. emulated:8:1,2,4,8:wait; /S appended when --slots differs).",
    ),
]
RunArtifactOption = Annotated[
    Path | None,
    typer.Option("--artifact", help="rbln: compiled model directory (rearrival rbln compile)."),
]
RunSitePackagesOption = Annotated[
    Path | None,
    typer.Option("--site-packages", help="rbln: where the patched vllm_rbln is installed."),
]
RunNumBlocksOption = Annotated[
    int,
    typer.Option(
        "--num-blocks",
        help="vllm: KV pool in blocks, null block included (it must hold one "
        "--max-model-len sequence).",
    ),
]
RunBlockSizeOption = Annotated[
    int, typer.Option("--block-size", help="vllm: tokens per KV block (CPU: multiple of 32).")
]
RunMaxNumBatchedTokensOption = Annotated[
    int, typer.Option("--max-num-batched-tokens", help="vllm: the per-step token budget.")
]
RunModelOption = Annotated[
    Path | None,
    typer.Option(
        "--model",
        help="vllm: model directory with a config.json (default: the shipped tiny-qwen3, "
        "random weights).",
    ),
]
RunMaxModelLenOption = Annotated[
    int | None,
    typer.Option("--max-model-len", help="vllm: default the model's max_position_embeddings."),
]
RunReplicasOption = Annotated[
    int,
    typer.Option(
        "--replicas",
        help="vllm: servers in a fleet behind vllm-router (README 'A study on a real "
        "fleet'); 1 (default) is one server and no router.",
    ),
]
RunRouterPolicyOption = Annotated[
    str,
    typer.Option(
        "--router-policy",
        help="vllm with --replicas > 1: vllm-router's --policy (round_robin, "
        "consistent_hash by the session header, cache_aware, power_of_two, random, "
        "sticky_least_loaded).",
    ),
]
