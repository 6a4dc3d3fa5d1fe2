"""CLI verbs of the search area (registered by rearrival.cli): search (plans, shard, merge,
or everything at once) and advise, whose body is ``rearrival.commands.advise``
(docs/DESIGN.md §12, paper Sections V-A and V-D)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from rearrival.commands import search_vllm
from rearrival.commands.advise import advise
from rearrival.commands.panels import PanelledGroup
from rearrival.commands.search_common import (
    STAGE,
    chosen_profile,
    int_list,
    no_collection_passes,
    vllm_knobs,
)
from rearrival.commands.search_options import (
    DEFAULT_CONFIG,
    ConfigOption,
    ProfileOption,
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
    MaxNumSeqsOption,
    NumBlocksOption,
    PoolSizesOption,
    SubstrateOption,
)
from rearrival.commands.values import Values, checked_config

if TYPE_CHECKING:
    from rearrival.search.outputs import OutputPaths


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
        if ctx.invoked_subcommand is not None:
            raise search_vllm.SubstrateOptionError(
                f"--substrate vllm runs the whole search in one process; drop "
                f"`{ctx.invoked_subcommand}` (plans, shard and merge split the RBLN search)"
            )
        no_collection_passes()
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
            n=int_list("--n", n),
            study=study,
            warn=warn,
        )
        return
    overrides = {
        key: value
        for key, value in (
            ("n", int_list("--n", n)),
            ("batch_sizes", int_list("--batch-sizes", batch_sizes)),
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
    no_collection_passes()
    paths = _output_paths(
        "--out", out, scores, selected, summary_file, plans_out, plans_dir is None
    )
    cfg = checked_config(config, "search", study, values)
    chosen = chosen_profile(cfg, profile, ctx)
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
    chosen = chosen_profile(cfg, profile, ctx)
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
    chosen = chosen_profile(cfg, profile, ctx)
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
