"""The options of ``rearrival search`` and ``rearrival advise``, one typed alias each.

Why a module of their own: each verb takes two dozen options, and written inline they made
the verbs' functions 160 and 280 lines long (issue 33: no function over 150 lines outside
the numba cores). Declared here, a verb's signature is one line per option and its body is
its logic; an option both verbs take alike (``--workers``) is declared once, while those
whose help differs between the verbs (``--n``, ``--plans``, ``--study``, ...) keep one alias
per verb. The vLLM knobs both verbs share live beside their parser in
``rearrival.commands.search_vllm``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rearrival.commands.profile import PROFILE_HELP

DEFAULT_CONFIG = Path("config/config.yaml")
ConfigOption = Annotated[Path, typer.Option("--config", help="Study definition (YAML).")]
ProfileOption = Annotated[
    Path | None,
    typer.Option(
        "--profile",
        help=f"{PROFILE_HELP} With --substrate vllm: a vLLM profile (docs/DESIGN.md §15).",
    ),
]
WORKERS_HELP = (
    "Worker processes (each holds its own copy of the candidates' tables; counted in the "
    "search's memory bound of 2 GiB)."
)

SearchOutOption = Annotated[
    Path | None,
    typer.Option(
        "--out",
        help="Output directory (plans/, scores.parquet, selected.json, "
        "summary.json); needed when no subcommand is given, unless each file is named.",
    ),
]
SearchPlansOutOption = Annotated[
    Path | None,
    typer.Option(
        "--plans-out",
        help="Directory to write the input plans to (default: plans/ under --out).",
    ),
]
WorkersOption = Annotated[int, typer.Option("--workers", min=1, help=WORKERS_HELP)]
SearchNOption = Annotated[
    str | None,
    typer.Option(
        "--n",
        help="Concurrency levels of the inputs, e.g. 16,32,48, each at most 1,024 "
        "(default: search.n); restricted N sets not inside it are dropped.",
    ),
]
SearchBatchSizesOption = Annotated[
    str | None,
    typer.Option(
        "--batch-sizes",
        help="Candidate batch sizes, e.g. 16,24,32,40,48, each at most 1,024 (default: "
        "search.batch_sizes); the space is counted first and at most 100,000 candidates "
        "are scored.",
    ),
]
SearchMaxBucketsOption = Annotated[
    int | None,
    typer.Option(
        "--max-buckets",
        min=2,
        help="Most buckets per candidate, counting 1 and batch_size (default: search.max_buckets).",
    ),
]
SearchMemoryFilterOption = Annotated[
    bool | None,
    typer.Option(
        "--memory-filter/--no-memory-filter",
        help="Exclude candidates whose KV and "
        "weights do not fit the devices (default: search.memory_filter).",
    ),
]
SearchStudyOption = Annotated[
    str | None,
    typer.Option(
        "--study",
        help="Run this study's own search (studies.<name>.search) over its workload, "
        "e.g. agent sessions; default: the top-level search.",
    ),
]
SearchPlansDirOption = Annotated[
    Path | None,
    typer.Option(
        "--plans",
        help="Search over the plans in this directory (e.g. from `rearrival plans "
        "from-trace`; search/ and evaluation/ subdirectories are held apart) instead "
        "of generated ones; their N set is used.",
    ),
]
AdviseNOption = Annotated[
    str | None,
    typer.Option(
        "--n",
        help="Concurrency levels, e.g. 6,8,10, each at most 1,024 (default: the "
        "search's own N set; a different set than --search's is refused).",
    ),
]
AdvisePlansDirOption = Annotated[
    Path | None,
    typer.Option(
        "--plans",
        help="Directory of plan files (.parquet/.json) to diagnose instead of "
        "the config's evaluation inputs.",
    ),
]
AdviseTraceOption = Annotated[
    Path | None,
    typer.Option(
        "--trace",
        help="Your agents' trace (TraceLab .jsonl[.gz] or OTLP JSON): advise on N "
        "sessions drawn from it at each N.",
    ),
]
AdviseTokenScaleOption = Annotated[
    float,
    typer.Option("--token-scale", help="With --trace: what-if factor on every token count."),
]
AdviseWorkloadOption = Annotated[
    str,
    typer.Option(
        "--workload",
        help="With --trace: trace (its sessions as the timestamps place them, the same "
        "answer as `plans from-trace` + `advise --plans`) or drawn (a what-if: N "
        "sessions drawn from it at each N, all starting together).",
    ),
]
AdviseTimeOriginOption = Annotated[
    str,
    typer.Option(
        "--time-origin",
        help="With --trace --workload trace: first (as the timestamps say) or zero "
        "(every session at t = 0), as `plans from-trace` takes it.",
    ),
]
AdviseSeedOption = Annotated[
    int, typer.Option("--seed", help="With --workload drawn: seed of the drawn workloads.")
]
AdviseResamplesOption = Annotated[
    int,
    typer.Option(
        "--resamples",
        min=1,
        help="With --workload drawn: bootstrap session sets (at most 10,000).",
    ),
]
AdviseSearchDirOption = Annotated[
    Path | None,
    typer.Option(
        "--search",
        help="Finished search: its directory or its selected.json; default: run the search now.",
    ),
]
AdviseBatchSizesOption = Annotated[
    str | None,
    typer.Option(
        "--batch-sizes",
        help="RBLN: candidate batch sizes of the search run now, e.g. 16,24,32 (default: "
        "search.batch_sizes), as `rearrival search` takes them.",
    ),
]
AdviseMaxBucketsOption = Annotated[
    int | None,
    typer.Option(
        "--max-buckets",
        min=2,
        help="RBLN: most buckets per candidate of the search run now, counting 1 and "
        "batch_size (default: search.max_buckets).",
    ),
]
AdviseAsJsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of Markdown.")]
AdviseStudyOption = Annotated[
    str | None,
    typer.Option(
        "--study",
        help="Use this study's own search, evaluation inputs and baseline (a study "
        "with a workload and a search block, e.g. agent sessions).",
    ),
]
AdviseMemoryFilterOption = Annotated[
    bool | None,
    typer.Option(
        "--memory-filter/--no-memory-filter",
        help="vLLM: exclude given pools (--num-blocks) whose KV and weights do not fit "
        "the profile's memory (default: on).",
    ),
]
AdviseRateOption = Annotated[
    float | None,
    typer.Option(
        "--rate",
        help="With --trace and --slo: peak sessions/s; answer the cheapest fleet meeting "
        "the SLO there, as `capacity --rate` does from a pool, and what to deploy.",
    ),
]
AdviseSloOption = Annotated[
    str | None, typer.Option("--slo", help="With --rate: thresholds, e.g. ttft=0.3,tpot=0.03.")
]
AdviseAttainmentOption = Annotated[
    float, typer.Option("--attainment", help="With --rate: share that must meet the SLO.")
]
AdviseHorizonOption = Annotated[
    float, typer.Option("--horizon", help="With --rate: seconds over which sessions start.")
]
AdviseWarmupOption = Annotated[
    float, typer.Option("--warmup", help="With --rate: requests before this not measured.")
]
AdviseReplicasOption = Annotated[
    str, typer.Option("--replicas", help="With --rate: fleet sizes, e.g. 1,2,4,8.")
]
AdviseRoutersOption = Annotated[
    str, typer.Option("--routers", help="With --rate: routers to compare.")
]
AdviseStepCostOption = Annotated[
    str | None,
    typer.Option("--step-cost", help="With --rate, vLLM: BASE,DEC,PRE[,KV] seconds."),
]
