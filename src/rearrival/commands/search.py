"""CLI verbs of the search area (registered by rearrival.cli): search (plans, shard, merge,
or everything at once) and advise (docs/DESIGN.md §12, paper Sections V-A and V-D)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from rearrival.commands import search_vllm
from rearrival.commands.panels import PanelledGroup
from rearrival.commands.profile import PROFILE_HELP
from rearrival.commands.search_options import (
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
    SearchBatchSizesOption,
    SearchMaxBucketsOption,
    SearchMemoryFilterOption,
    SearchNOption,
    SearchOutOption,
    SearchPlansDirOption,
    SearchPlansOutOption,
    SearchStudyOption,
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
from rearrival.commands.values import Values, checked_config

if TYPE_CHECKING:
    from rearrival.commands.profile import ProfileChoice
    from rearrival.search.outputs import OutputPaths

DEFAULT_CONFIG = Path("config/config.yaml")
ConfigOption = Annotated[Path, typer.Option("--config", help="Study definition (YAML).")]
AT_RATE_HORIZON_S = 600.0  # advise --rate: ten minutes of open traffic ...
AT_RATE_WARMUP_S = 60.0  # ... measured after the first minute
ProfileOption = Annotated[
    Path | None,
    typer.Option(
        "--profile",
        help=f"{PROFILE_HELP} With --substrate vllm: a vLLM profile (docs/DESIGN.md §15).",
    ),
]
# ctx.obj key set on the ``rearrival study search`` group: a workflow stage, whose profile
# is the one its rule passes (a missing calibration is an error, never the published one).
STAGE = "workflow_stage"


def _file_option(flag: str, default_name: str) -> typer.models.OptionInfo:
    return typer.Option(
        flag, help=f"File to write (default: {default_name} under the output directory)."
    )


ScoresOption = Annotated[Path | None, _file_option("--scores", "scores.parquet")]
SelectedOption = Annotated[Path | None, _file_option("--selected", "selected.json")]
SummaryOption = Annotated[Path | None, _file_option("--summary", "summary.json")]


def _output_paths(
    flag: str,
    out: Path | None,
    scores: Path | None,
    selected: Path | None,
    summary: Path | None,
    plans_out: Path | None = None,
    writes_plans: bool = False,
) -> OutputPaths:
    """Where the result files go: each as named, else under the output directory;
    refuses a missing file name when no directory gives its default."""
    from rearrival.config.search import SearchError
    from rearrival.search.outputs import OutputPaths

    named = {"--scores": scores, "--selected": selected, "--summary": summary}
    if writes_plans:
        named["--plans-out"] = plans_out
    missing = [name for name, value in named.items() if value is None]
    if out is None and missing:
        raise SearchError(
            f"option {flag} is missing: give the directory for the search results, e.g. "
            f"`rearrival search {flag} results/search` (or name {', '.join(missing)})"
        )
    default = OutputPaths.under(out) if out is not None else None
    return OutputPaths(
        scores or default.scores, selected or default.selected, summary or default.summary
    )


def _no_collection_passes() -> None:
    """Turn off the cyclic garbage collector for this short-lived command: numpy, pandas
    and numba leave about a million objects that every full collection walks again
    (0.2-0.3 s of a 1.7 s paper-space search); the search frees its memory by reference
    counting and creates no large cyclic garbage."""
    import gc

    gc.disable()


def _profile(cfg, path: Path | None, ctx: typer.Context | None = None) -> ProfileChoice:
    """The profile a search or advice predicts with, checked against the config's model:
    in a workflow stage --profile, else the config's choice (a missing file is an error);
    run by hand, the rule of ``rearrival.commands.profile``."""
    from dataclasses import replace

    from rearrival.commands.profile import ProfileChoice, choose_profile

    given = None if path is None else str(path)
    if ((ctx.obj if ctx is not None else None) or {}).get(STAGE):
        chosen = cfg.measurement if given is None else replace(cfg.measurement, profile=given)
        return ProfileChoice(chosen.prediction_profile(), "", stage=True)
    return choose_profile(cfg.measurement, given)


def _int_list(option: str, text: str | None) -> tuple[int, ...] | None:
    from rearrival.config.search import SearchError

    if text is None:
        return None
    try:
        values = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError as exc:
        raise SearchError(
            f"option {option} {text!r}: give comma-separated integers, e.g. 16,32,48"
        ) from exc
    if not values:
        raise SearchError(f"option {option} is empty: give comma-separated integers")
    return values


def _load(config: Path, ctx: typer.Context | None = None):
    """The study and its search settings, with the ``rearrival search`` options applied."""
    from rearrival.config.search import SearchSettings
    from rearrival.search.settings import override_settings

    obj = ctx.obj if ctx is not None else None  # set by the `search` callback
    study = _study(ctx)
    cfg = checked_config(config, "search", study, (obj or {}).get("values"))
    settings = (
        SearchSettings.from_config(cfg) if study is None else SearchSettings.for_study(cfg, study)
    )
    overrides = (obj or {}).get("search_overrides", {})
    return cfg, override_settings(settings, **overrides)


def _study(ctx: typer.Context | None) -> str | None:
    """The study whose own search (``--study``) the verb runs; None: the top-level one."""
    return ((ctx.obj if ctx is not None else None) or {}).get("search_study")


def _vllm_knobs(substrate: str, rbln_axes: dict[str, object], **knobs: str | None) -> dict:
    """The vLLM knobs given (parsed by ``search_vllm.given_options``), after refusing
    the options of the other substrate: search and advise take the same ones alike."""
    given = search_vllm.given_options(_int_list, **knobs)
    search_vllm.check_substrate(substrate, {**given, **rbln_axes})
    return given


def search(
    ctx: typer.Context,
    out: SearchOutOption = None,
    scores: ScoresOption = None,
    selected: SelectedOption = None,
    summary_file: SummaryOption = None,
    plans_out: SearchPlansOutOption = None,
    config: ConfigOption = DEFAULT_CONFIG,
    workers: WorkersOption = 2,
    n: SearchNOption = None,
    batch_sizes: SearchBatchSizesOption = None,
    max_buckets: SearchMaxBucketsOption = None,
    memory_filter: SearchMemoryFilterOption = None,
    profile: ProfileOption = None,
    study: SearchStudyOption = None,
    plans_dir: SearchPlansDirOption = None,
    values: Values = None,
    substrate: SubstrateOption = "rbln",
    max_num_seqs: MaxNumSeqsOption = None,
    num_blocks: NumBlocksOption = None,
    pool_sizes: PoolSizesOption = None,
    max_num_batched_tokens: BudgetsOption = None,
    block_sizes: BlockSizesOption = None,
    capture_sizes: CaptureSizesOption = None,
    baseline: BaselineOption = None,
) -> None:
    """Configuration search (paper V-A): with no subcommand, run plans, every candidate and
    the merge in one process; subcommands split the same work into jobs. The options
    before a subcommand apply to it too (`rearrival search --n 16,32 shard ...`). With
    --substrate vllm: max_num_seqs, KV pools, token budgets and (GPU) capture sizes,
    scored exactly in one process (docs/DESIGN.md §15)."""
    given = _vllm_knobs(
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
        if ctx.invoked_subcommand is not None:
            raise search_vllm.SubstrateOptionError(
                f"--substrate vllm runs the whole search in one process; drop "
                f"`{ctx.invoked_subcommand}` (plans, shard and merge split the RBLN search)"
            )
        _no_collection_passes()
        search_vllm.search(
            checked_config(config, "search", study, values),
            out=out,
            paths=_output_paths(
                "--out", out, scores, selected, summary_file, plans_out, plans_dir is None
            ),
            plans_out=plans_out,
            plans_dir=plans_dir,
            profile_path=profile,
            given=given,
            memory_filter=memory_filter,
            n=_int_list("--n", n),
            study=study,
            warn=warn,
        )
        return
    overrides = {
        key: value
        for key, value in (
            ("n", _int_list("--n", n)),
            ("batch_sizes", _int_list("--batch-sizes", batch_sizes)),
            ("max_buckets", max_buckets),
            ("memory_filter", memory_filter),
        )
        if value is not None
    }
    ctx.obj = {
        **(ctx.obj or {}),
        "search_overrides": overrides,
        "search_study": study,
        "values": values,
    }
    if ctx.invoked_subcommand is not None:
        return
    _no_collection_passes()
    paths = _output_paths(
        "--out", out, scores, selected, summary_file, plans_out, plans_dir is None
    )
    cfg = checked_config(config, "search", study, values)
    chosen = _profile(cfg, profile, ctx)
    if plans_dir is not None:
        from rearrival.search.plan_dir import search_plan_dir

        summary = search_plan_dir(cfg, plans_dir, paths, workers, chosen.profile, overrides)
    else:
        from rearrival.search.run import run_search

        plans_out = plans_out or out / "plans"
        summary = run_search(cfg, paths, plans_out, workers, chosen.profile, overrides, study)
    chosen.announce()
    warn(summary["caveats"])
    typer.echo(summary_lines(paths.summary.parent if out is None else out, summary))


def warn(caveats: list[dict]) -> None:
    """What the answer cannot tell (rearrival.search.caveats), one line each on stderr."""
    for caveat in caveats:
        typer.echo(f"rearrival: warning: {caveat['message']}", err=True)


def summary_lines(out: Path, summary: dict) -> str:
    """What the search did, in two lines under 100 columns: how many candidates each
    filter removed (the counts summary.json and Table S8 carry), then the pick."""
    counts, selected = summary["candidates"], summary["selected"]
    memory = (
        f"{counts['excluded_by_memory']:,} over device memory"
        if counts["memory_filter"]
        else "memory filter off"
    )
    return (
        f"{out}: searched {counts['searched']:,} of {counts['enumerated']:,} candidates "
        f"({counts['excluded_by_compile_budget']:,} over the compile budget, {memory})\n"
        f"selected {selected['id']}: search score {selected['search_score']:.4f}, "
        f"evaluation score {selected['evaluation_score']:.4f}"
    )


def plans(
    ctx: typer.Context,
    out: Annotated[
        Path,
        typer.Option(
            "--out", help="Directory to write (search/, evaluation/); replaced as a whole."
        ),
    ],
    config: ConfigOption = DEFAULT_CONFIG,
) -> None:
    """Write the search and evaluation input plans (N x seeds x blocks each, disjoint seeds)."""
    from rearrival.search.inputs import make_plans, write_plans

    cfg, settings = _load(config, ctx)
    made = make_plans(cfg, settings)
    write_plans(made, out)
    typer.echo(f"{out}: {len(made)} plans")


def shard(
    ctx: typer.Context,
    plans_dir: Annotated[Path, typer.Option("--plans", help="Output of `search plans`.")],
    index: Annotated[int, typer.Option("--shard", min=0, help="This shard (0..S-1).")],
    out: Annotated[Path, typer.Option("--out", help="Shard Parquet file to write.")],
    config: ConfigOption = DEFAULT_CONFIG,
    shards: Annotated[
        int | None,
        typer.Option("--shards", min=1, help="Shard count (default: search.shards of the config)."),
    ] = None,
    workers: WorkersOption = 1,
    profile: ProfileOption = None,
) -> None:
    """Simulate candidates[K::S] (plus the baseline) on every search and evaluation plan."""
    from rearrival.parquet import write_frame
    from rearrival.search.candidates import baseline_of, search_candidates
    from rearrival.search.evaluate import run_shard
    from rearrival.search.inputs import read_plans

    cfg, settings = _load(config, ctx)
    count = shards or settings.shards
    chosen = _profile(cfg, profile, ctx)
    costs = chosen.profile
    frame = run_shard(
        search_candidates(settings, costs),
        read_plans(plans_dir, settings),
        index,
        count,
        baseline_of(cfg, _study(ctx)),
        workers,
        costs,
    )
    write_frame(frame, out)
    chosen.announce()
    typer.echo(
        f"{out}: shard {index}/{count}, {frame['candidate'].nunique()} candidates, "
        f"{len(frame)} rows"
    )


def merge(
    ctx: typer.Context,
    shard_files: Annotated[list[Path], typer.Argument(help="Every shard file.")],
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out-dir",
            help="Directory for scores.parquet, selected.json and summary.json "
            "(not needed when each file is named).",
        ),
    ] = None,
    scores: ScoresOption = None,
    selected: SelectedOption = None,
    summary_file: SummaryOption = None,
    config: ConfigOption = DEFAULT_CONFIG,
    profile: ProfileOption = None,
) -> None:
    """Merge shard files into one ranking; the bytes do not depend on the shard count."""
    import pandas as pd

    from rearrival.config.search import SearchError
    from rearrival.search.candidates import baseline_of, search_candidates
    from rearrival.search.merge import combine_shards
    from rearrival.search.outputs import write_outputs

    paths = _output_paths("--out-dir", out_dir, scores, selected, summary_file)
    cfg, settings = _load(config, ctx)
    frames = []
    for path in shard_files:
        try:
            frames.append((str(path), pd.read_parquet(path)))
        except (OSError, ValueError) as exc:
            raise SearchError(
                f"{path}: not a readable shard file ({exc}); re-run `rearrival search shard`"
            ) from exc
    chosen = _profile(cfg, profile, ctx)
    costs = chosen.profile
    summary = write_outputs(
        combine_shards(frames),
        search_candidates(settings, costs),
        baseline_of(cfg, _study(ctx)),
        settings,
        paths,
        costs,
    )
    chosen.announce()
    warn(summary["caveats"])
    typer.echo(f"{out_dir or paths.selected}: selected {summary['selected']['id']}")


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
    given = _vllm_knobs(
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
    _no_collection_passes()
    cfg = load_study_config(config)
    n_set = _int_list("--n", n)
    axes = {
        key: value
        for key, value in (
            ("batch_sizes", _int_list("--batch-sizes", axes["batch_sizes"])),
            ("max_buckets", axes["max_buckets"]),
        )
        if value is not None
    }
    if axes and search_dir is not None:
        raise SearchError(
            "options --batch-sizes, --max-buckets shape the search advise runs now; with "
            "--search the pick is that search's: drop one of them"
        )
    chosen = _profile(cfg, profile)
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
    _no_collection_passes()
    options["n"] = _int_list("--n", options["n"])
    try:
        search_vllm.advise(load_study_config(config), **options)
    except TraceError as exc:
        typer.echo(f"rearrival: error: {exc}", err=True)
        raise typer.Exit(2) from None


def search_app(stage: bool = False) -> typer.Typer:
    """The ``search`` group: everything at once, or its plans, shard and merge stages
    (also ``rearrival study search``, which the search rules call: ``stage``)."""
    group = typer.Typer(
        cls=PanelledGroup, invoke_without_command=True, context_settings={"obj": {STAGE: stage}}
    )
    group.callback()(search)
    group.command("plans")(plans)
    group.command("shard")(shard)
    group.command("merge")(merge)
    return group


def register(app: typer.Typer) -> None:
    """Add this area's verbs to the top-level app."""
    app.add_typer(search_app(), name="search")
    app.command("advise")(advise)
