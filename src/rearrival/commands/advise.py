"""The ``advise`` verb (registered with the search area by ``commands.search``): the
configuration to compile and its spread over resampled workloads, from session plans or a
trace, on either substrate; with ``--rate``, the cheapest fleet at that rate
(docs/DESIGN.md §12 and §17, paper Sections V-A and V-D)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from rearrival.commands import search_vllm
from rearrival.commands.search_common import (
    chosen_profile,
    int_list,
    no_collection_passes,
    vllm_knobs,
)
from rearrival.commands.search_options import (
    DEFAULT_CONFIG,
    AdviseAsJsonOption,
    AdviseAttainmentOption,
    AdviseBatchSizesOption,
    AdviseHorizonOption,
    AdviseMaxBucketsOption,
    AdviseMemoryFilterOption,
    AdviseNOption,
    AdvisePlansDirOption,
    AdviseRateOption,
    AdviseReplicasOption,
    AdviseResamplesOption,
    AdviseRoutersOption,
    AdviseSearchDirOption,
    AdviseSeedOption,
    AdviseSloOption,
    AdviseStepCostOption,
    AdviseStudyOption,
    AdviseTimeOriginOption,
    AdviseTokenScaleOption,
    AdviseTraceOption,
    AdviseWarmupOption,
    AdviseWorkloadOption,
    ConfigOption,
    ProfileOption,
    WorkersOption,
)
from rearrival.commands.search_vllm import (
    BaselineOption,
    BlockSizesOption,
    BudgetsOption,
    CaptureSizesOption,
    MaxModelLenOption,
    MaxNumSeqsOption,
    NumBlocksOption,
    PoolSizesOption,
    SubstrateOption,
)

if TYPE_CHECKING:
    pass

AT_RATE_HORIZON_S = 600.0  # advise --rate: ten minutes of open traffic ...
AT_RATE_WARMUP_S = 60.0  # ... measured after the first minute


def advise(
    config: ConfigOption = DEFAULT_CONFIG,
    n: AdviseNOption = None,
    plans_dir: AdvisePlansDirOption = None,
    trace: AdviseTraceOption = None,
    token_scale: AdviseTokenScaleOption = 1.0,
    workload: AdviseWorkloadOption = "trace",
    time_origin: AdviseTimeOriginOption = "first",
    seed: AdviseSeedOption = 0,
    resamples: AdviseResamplesOption = 100,
    search_dir: AdviseSearchDirOption = None,
    batch_sizes: AdviseBatchSizesOption = None,
    max_buckets: AdviseMaxBucketsOption = None,
    workers: WorkersOption = 2,
    as_json: AdviseAsJsonOption = False,
    profile: ProfileOption = None,
    study: AdviseStudyOption = None,
    substrate: SubstrateOption = "rbln",
    max_num_seqs: MaxNumSeqsOption = None,
    num_blocks: NumBlocksOption = None,
    pool_sizes: PoolSizesOption = None,
    max_num_batched_tokens: BudgetsOption = None,
    block_sizes: BlockSizesOption = None,
    capture_sizes: CaptureSizesOption = None,
    baseline: BaselineOption = None,
    max_model_len: MaxModelLenOption = None,
    memory_filter: AdviseMemoryFilterOption = None,
    rate: AdviseRateOption = None,
    slo: AdviseSloOption = None,
    attainment: AdviseAttainmentOption = 0.9,
    horizon: AdviseHorizonOption = AT_RATE_HORIZON_S,
    warmup: AdviseWarmupOption = AT_RATE_WARMUP_S,
    replicas: AdviseReplicasOption = "1,2,4,8",
    routers: AdviseRoutersOption = "round_robin,session_affinity",
    step_cost: AdviseStepCostOption = None,
) -> None:
    """What to compile (paper V-D): baseline reuse loss, the search's pick, its predicted
    saving, memory (with the headroom per device) and compile cost, and whether more
    slots would still help and fit. With --substrate vllm: how much KV and which knobs,
    the prefix-cache hit rate at each pool size beside its structural upper bound, the
    prefill recomputed because tool waits let blocks be evicted, and the pick's saving
    (docs/DESIGN.md §15). With --trace --rate R --slo: the capacity pick at R (docs/DESIGN.md
    §17): the cheapest fleet meeting the SLO, its spread and its vllm serve / vllm-router
    (or optimum-rbln) lines."""
    if rate is not None or slo is not None:
        _advise_at_rate(
            trace,
            rate,
            slo,
            {
                "max_num_seqs": max_num_seqs,
                "num_blocks": num_blocks,
                "max_num_batched_tokens": max_num_batched_tokens,
                "block_sizes": block_sizes,
                "capture_sizes": capture_sizes,
                "batch_sizes": batch_sizes,
                "max_buckets": max_buckets,
                "step_cost": step_cost,
            },
            substrate=substrate,
            attainment=attainment,
            horizon=horizon,
            warmup=warmup,
            seed=seed,
            replicas=replicas,
            routers=routers,
            profile=profile,
            token_scale=token_scale,
            resamples=resamples,
            workers=workers,
            unused={"--plans": plans_dir, "--search": search_dir, "--study": study, "--n": n},
        )
        return
    _check_workload_options(trace, workload, time_origin, seed, resamples)
    given = vllm_knobs(
        substrate,
        {"batch_sizes": batch_sizes, "max_buckets": max_buckets},
        max_num_seqs=max_num_seqs,
        num_blocks=num_blocks,
        pool_sizes=pool_sizes,
        token_budgets=max_num_batched_tokens,
        block_sizes=block_sizes,
        capture_sets=capture_sizes,
        baseline=baseline,
    )
    if substrate == "vllm":
        _advise_vllm(
            config,
            trace=trace,
            plans_dir=plans_dir,
            search_dir=search_dir,
            profile_path=profile,
            given=given,
            memory_filter=memory_filter,
            n=n,
            study=study,
            token_scale=token_scale,
            max_model_len=max_model_len,
            seed=seed,
            resamples=resamples,
            as_json=as_json,
            workload=workload,
            time_origin=time_origin,
        )
        return
    if memory_filter is not None or max_model_len is not None:
        raise search_vllm.SubstrateOptionError(
            "--memory-filter, --max-model-len: only for --substrate vllm (the RBLN advice "
            "checks memory always and imports at the profile's maximum sequence length)"
        )
    _advise_rbln(
        config,
        trace=trace,
        plans_dir=plans_dir,
        search_dir=search_dir,
        n=n,
        axes={"batch_sizes": batch_sizes, "max_buckets": max_buckets},
        token_scale=token_scale,
        workload=workload,
        time_origin=time_origin,
        seed=seed,
        resamples=resamples,
        workers=workers,
        profile=profile,
        study=study,
        as_json=as_json,
    )


def _advise_rbln(
    config: Path,
    *,
    trace: Path | None,
    plans_dir: Path | None,
    search_dir: Path | None,
    n: str | None,
    axes: dict,
    token_scale: float,
    workload: str,
    time_origin: str,
    seed: int,
    resamples: int,
    workers: int,
    profile: Path | None,
    study: str | None,
    as_json: bool,
) -> None:
    """``advise`` on RBLN: the config's evaluation inputs, a plans directory or a trace,
    with the pick of a finished search or of the search run now on ``axes``."""
    from rearrival.config.search import SearchError
    from rearrival.config.study import load_study_config
    from rearrival.limits import MAX_RESAMPLES, RESAMPLES_WHY, check_at_most
    from rearrival.model.plans.trace_plans import TraceError
    from rearrival.search.advise import advise as make_advice
    from rearrival.search.advise import to_markdown
    from rearrival.search.trace_advice import advise_trace

    if trace is not None and plans_dir is not None:
        raise SearchError("options --trace and --plans both give the inputs; pass one")
    check_at_most("--resamples", resamples, MAX_RESAMPLES, RESAMPLES_WHY)
    no_collection_passes()
    cfg = load_study_config(config)
    n_set = int_list("--n", n)
    axes = {
        key: value
        for key, value in (
            ("batch_sizes", int_list("--batch-sizes", axes["batch_sizes"])),
            ("max_buckets", axes["max_buckets"]),
        )
        if value is not None
    }
    if axes and search_dir is not None:
        raise SearchError(
            "options --batch-sizes, --max-buckets shape the search advise runs now; with "
            "--search the pick is that search's: drop one of them"
        )
    chosen = chosen_profile(cfg, profile)
    costs = chosen.profile
    if trace is None:
        advice = make_advice(
            cfg,
            n=n_set,
            plans_dir=plans_dir,
            search_dir=search_dir,
            workers=workers,
            profile=costs,
            study=study,
            axes=axes,
        )
    else:
        try:
            advice = advise_trace(
                cfg,
                trace,
                n=n_set,
                token_scale=token_scale,
                search_dir=search_dir,
                seed=seed,
                resamples=resamples,
                workers=workers,
                profile=costs,
                workload=workload,
                time_origin=time_origin,
                axes=axes,
            )
        except TraceError as exc:
            typer.echo(f"rearrival: error: {exc}", err=True)
            raise typer.Exit(2) from None
    chosen.announce()
    typer.echo(json.dumps(advice, indent=2, sort_keys=True) if as_json else to_markdown(advice))


def _advise_at_rate(
    trace: Path | None,
    rate: float | None,
    slo: str | None,
    raw: dict[str, str | int | None],
    *,
    unused: dict[str, object],
    **settings: object,
) -> None:
    """``advise --trace T --rate R --slo ...`` (``capacity.advise_at_rate``), after
    refusing what it cannot use."""
    from rearrival.commands.capacity import CapacityOptionError, advise_at_rate

    if trace is None or rate is None or slo is None:
        raise CapacityOptionError(
            "options --rate and --slo go together, with --trace: advise --trace T --rate R "
            "--slo ttft=0.3,tpot=0.03"
        )
    named = [option for option, value in unused.items() if value is not None]
    if named:
        raise CapacityOptionError(
            f"{', '.join(named)}: not used by advise --rate (the pool is the trace's "
            "sessions); drop them"
        )
    advise_at_rate(trace, rate, slo, raw, **settings)


def _check_workload_options(
    trace: Path | None, workload: str, time_origin: str, seed: int, resamples: int
) -> None:
    """Refuse workload options that would be silently ignored: --workload and
    --time-origin shape a trace's inputs; --seed and --resamples only drawn workloads."""
    from rearrival.config.search import SearchError
    from rearrival.limits import MAX_RESAMPLES, RESAMPLES_WHY, check_at_most

    check_at_most("--resamples", resamples, MAX_RESAMPLES, RESAMPLES_WHY)  # a bound first
    if trace is None and (workload != "trace" or time_origin != "first"):
        raise SearchError("options --workload, --time-origin: only with --trace")
    if workload != "drawn" and (seed != 0 or resamples != 100):
        raise SearchError(
            "options --seed, --resamples: only with --trace --workload drawn (the trace's "
            "own timing draws nothing)"
        )
    if workload == "drawn" and time_origin != "first":
        raise SearchError(
            "option --time-origin: drawn workloads start every session at t = 0; drop it"
        )


def _advise_vllm(config: Path, *, search_dir: Path | None, **options) -> None:
    """``advise --substrate vllm``: the trace, plans or config inputs searched now."""
    from rearrival.config.search import SearchError
    from rearrival.config.study import load_study_config
    from rearrival.limits import MAX_RESAMPLES, RESAMPLES_WHY, check_at_most
    from rearrival.model.plans.trace_plans import TraceError

    if options["trace"] is not None and options["plans_dir"] is not None:
        raise SearchError("options --trace and --plans both give the inputs; pass one")
    if search_dir is not None:
        raise SearchError(
            "option --search: with --substrate vllm the advice searches its inputs itself "
            "(a finished vLLM search's selected.json holds no per-pool table); drop --search"
        )
    check_at_most("--resamples", options["resamples"], MAX_RESAMPLES, RESAMPLES_WHY)
    no_collection_passes()
    options["n"] = int_list("--n", options["n"])
    try:
        search_vllm.advise(load_study_config(config), **options)
    except TraceError as exc:
        typer.echo(f"rearrival: error: {exc}", err=True)
        raise typer.Exit(2) from None
