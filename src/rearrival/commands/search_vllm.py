"""``rearrival search`` and ``rearrival advise`` with ``--substrate vllm`` (docs/DESIGN.md
§15 "Search and advice"): the vLLM options, which substrate reads which option, and
the two verbs' bodies for this substrate. The RBLN bodies stay in ``commands.search`` and
``commands.advise``; ``SUBSTRATES`` names both, and an option of one substrate given to
the other is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rearrival.commands.profile import announce_vllm_profile
from rearrival.errors import RearrivalError

if TYPE_CHECKING:
    from rearrival.model.cost.vllm_profile import VllmProfile
    from rearrival.search.outputs import OutputPaths
    from rearrival.search.vllm.space import VllmAxes

SUBSTRATES = ("rbln", "vllm")
SubstrateOption = Annotated[
    str,
    typer.Option(
        "--substrate",
        help="rbln (the paper's compile-time-static stack, the default) or vllm (paged KV "
        "with prefix caching: pools, max_num_seqs, token budgets; docs/DESIGN.md §15; "
        "scored in this process, --workers is for rbln).",
    ),
]
MaxNumSeqsOption = Annotated[
    str | None,
    typer.Option(
        "--max-num-seqs",
        help="vLLM: max_num_seqs values to search, e.g. 8,16,32 (default 8,16,32,64,128,256).",
    ),
]
NumBlocksOption = Annotated[
    str | None,
    typer.Option(
        "--num-blocks",
        help="vLLM: KV pools to search in blocks, null block included (default: derived "
        "from the profile's memory and the inputs, see --pool-sizes).",
    ),
]
PoolSizesOption = Annotated[
    int | None,
    typer.Option(
        "--pool-sizes",
        help="vLLM: pools derived from memory, from the smallest that holds the longest "
        "request to the most memory holds or that never evicts (default 8, at most 64).",
    ),
]
BudgetsOption = Annotated[
    str | None,
    typer.Option(
        "--max-num-batched-tokens",
        help="vLLM: token budgets per step to search (default 512,2048,8192).",
    ),
]
BlockSizesOption = Annotated[
    str | None,
    typer.Option(
        "--block-sizes",
        help="vLLM: block sizes to search (default: vLLM's own, 16 on a GPU, 128 on CPU).",
    ),
]
CaptureSizesOption = Annotated[
    str | None,
    typer.Option(
        "--capture-sizes",
        help="vLLM, GPU profiles only: CUDA-graph capture-size sets separated by ';', each "
        "none, default (vLLM's rule for the candidate's knobs) or sizes, e.g. "
        "'default;1,2,4,8' (default: default).",
    ),
]
BaselineOption = Annotated[
    str | None,
    typer.Option(
        "--baseline",
        help="vLLM: the configuration scores divide by, e.g. vllm:256:4096x16:2048 (your "
        "server today; default: vLLM's defaults with the pool all memory holds).",
    ),
]
MaxModelLenOption = Annotated[
    int | None,
    typer.Option(
        "--max-model-len",
        min=1,
        help="vLLM, with --trace: the server's max_model_len; longer sessions are truncated "
        "and counted (default: the shipped tiny-qwen3's max_position_embeddings).",
    ),
]
VLLM_ONLY = {
    "max_num_seqs": "--max-num-seqs",
    "num_blocks": "--num-blocks",
    "pool_sizes": "--pool-sizes",
    "token_budgets": "--max-num-batched-tokens",
    "block_sizes": "--block-sizes",
    "capture_sets": "--capture-sizes",
    "baseline": "--baseline",
}
RBLN_ONLY = {"batch_sizes": "--batch-sizes", "max_buckets": "--max-buckets"}


class SubstrateOptionError(RearrivalError, ValueError):
    """Options of one substrate given to the other; names them and the fix."""


def check_substrate(substrate: str, given: dict[str, Any]) -> None:
    """Refuse an unknown substrate, and options only the other substrate reads."""
    if substrate not in SUBSTRATES:
        raise SubstrateOptionError(f"--substrate {substrate!r}: use one of rbln, vllm")
    foreign = VLLM_ONLY if substrate == "rbln" else RBLN_ONLY
    named = [flag for name, flag in foreign.items() if given.get(name) is not None]
    if named:
        other = "vllm" if substrate == "rbln" else "rbln"
        raise SubstrateOptionError(
            f"{', '.join(named)}: only for --substrate {other}; drop them or pass "
            f"--substrate {other}"
        )


def given_options(
    int_list: Any,
    *,
    max_num_seqs: str | None,
    num_blocks: str | None,
    pool_sizes: int | None,
    token_budgets: str | None,
    block_sizes: str | None,
    capture_sets: str | None,
    baseline: str | None,
) -> dict[str, Any]:
    """The vLLM options as parsed values (None: not given); ``int_list`` parses a
    comma-separated option in the one way every search option is parsed (the vLLM
    space's module, and what it imports, only when capture sizes are given)."""
    if capture_sets is not None:
        from rearrival.search.vllm.space import parse_capture_sets

        capture_sets = parse_capture_sets(capture_sets)
    return {
        "max_num_seqs": int_list("--max-num-seqs", max_num_seqs),
        "num_blocks": int_list("--num-blocks", num_blocks),
        "pool_sizes": pool_sizes,
        "token_budgets": int_list("--max-num-batched-tokens", token_budgets),
        "block_sizes": int_list("--block-sizes", block_sizes),
        "capture_sets": capture_sets,
        "baseline": baseline,
    }


def _profile(path: Path | None) -> VllmProfile:
    from rearrival.model.cost.vllm_profile import choose_vllm_profile

    return choose_vllm_profile(path)


def _axes(profile: VllmProfile, given: dict[str, Any], memory_filter: bool | None) -> VllmAxes:
    from rearrival.search.vllm.space import VllmAxes

    knobs = {k: v for k, v in given.items() if k != "baseline"}
    return VllmAxes.for_profile(profile, **knobs, memory_filter=memory_filter)


def _settings(cfg: Any, study: str | None, n: tuple[int, ...] | None) -> Any:
    from rearrival.config.search import SearchSettings
    from rearrival.search.settings import override_settings

    settings = (
        SearchSettings.from_config(cfg) if study is None else SearchSettings.for_study(cfg, study)
    )
    return settings if n is None else override_settings(settings, n=n)


def _prepared(
    cfg: Any,
    profile_path: Path | None,
    given: dict[str, Any],
    memory_filter: bool | None,
    study: str | None,
    n: tuple[int, ...] | None,
) -> tuple[VllmProfile, VllmAxes, Any]:
    """What search and advise both start from: the profile, the bounded axes and the
    workload settings (``n`` None: the plans' own N)."""
    profile = _profile(profile_path)
    axes = _axes(profile, given, memory_filter)
    refuse_block_sizes(axes, profile)
    axes.check_bound()
    return profile, axes, _settings(cfg, study, n)


def refuse_block_sizes(axes: VllmAxes, profile: VllmProfile) -> None:
    """A block size vLLM's attention backend on the profile's device refuses is never
    searched or advised (rearrival.model.vllm_knobs, the run's own check)."""
    from rearrival.model.vllm_knobs import block_size_problem

    for size in axes.block_sizes:
        problem = block_size_problem(size, profile.device, "option --block-sizes")
        if problem is not None:
            raise RearrivalError(
                f"{problem} (the profile {profile.name} is a {profile.device} one)"
            )


def served_max_model_len(max_model_len: int | None) -> int:
    """``--max-model-len``: default the served model's max_position_embeddings; a value
    past what the model allows is refused as vLLM refuses it."""
    from rearrival.config.served_model import load_served_model
    from rearrival.model.vllm_knobs import max_model_len_problem

    model = load_served_model()
    if max_model_len is None:
        return model.max_position_embeddings
    problem = max_model_len_problem(
        max_model_len,
        model.max_position_embeddings,
        "option --max-model-len",
        model.model_max_length,
    )
    if problem is not None:
        raise RearrivalError(problem)
    return max_model_len


def search(
    cfg: Any,
    *,
    out: Path | None,
    paths: OutputPaths,
    plans_out: Path | None,
    plans_dir: Path | None,
    profile_path: Path | None,
    given: dict[str, Any],
    memory_filter: bool | None,
    n: tuple[int, ...] | None,
    study: str | None,
    warn: Any,
) -> None:
    """``rearrival search --substrate vllm``: every configuration scored, three files."""
    from rearrival.search.vllm.outputs import result_lines
    from rearrival.search.vllm.run import directory_inputs, generated_inputs, search_vllm

    profile, axes, settings = _prepared(
        cfg, profile_path, given, memory_filter, study, None if plans_dir is not None else n
    )
    if plans_dir is not None:
        overrides = {} if n is None else {"n": n}
        inputs = directory_inputs(plans_dir, settings, overrides)
    else:
        inputs = generated_inputs(cfg, settings, plans_out or out / "plans")
    summary = search_vllm(inputs, axes, profile, paths, given["baseline"])
    announce_vllm_profile(profile, profile_path)
    warn(summary["caveats"])
    typer.echo(result_lines(paths.summary.parent if out is None else out, summary))


def advise(
    cfg: Any,
    *,
    trace: Path | None,
    plans_dir: Path | None,
    profile_path: Path | None,
    given: dict[str, Any],
    memory_filter: bool | None,
    n: tuple[int, ...] | None,
    study: str | None,
    token_scale: float,
    max_model_len: int | None,
    seed: int,
    resamples: int,
    as_json: bool,
    workload: str = "trace",
    time_origin: str = "first",
) -> None:
    """``rearrival advise --substrate vllm``: how much KV, and which knobs."""
    from rearrival.search.vllm.advise import advise_vllm, to_markdown, trace_inputs
    from rearrival.search.vllm.run import directory_inputs, generated_inputs

    if trace is not None or max_model_len is not None:
        max_model_len = served_max_model_len(max_model_len)  # the model a vLLM run serves
    profile, axes, settings = _prepared(
        cfg, profile_path, given, memory_filter, study, None if plans_dir is not None else n
    )
    pool, notes = None, []
    if trace is not None:
        assert max_model_len is not None
        inputs, imported = trace_inputs(
            trace,
            settings,
            profile,
            axes,
            token_scale=token_scale,
            max_model_len=max_model_len,
            seed=seed,
            workload=workload,
            time_origin=time_origin,
        )
        notes = imported.summary_lines()
        where = f"{trace} ({imported.source}, sha256 {imported.trace_sha256[:12]})"
        if workload == "drawn":
            pool = imported.plan
            source = (
                f"{len(inputs.of('evaluation'))} workloads drawn from {pool.n} sessions of "
                f"{where}: N sessions each, with replacement, all starting at t = 0 "
                "(--workload drawn, a what-if: not the trace's own timing); never used to "
                "select"
            )
        else:
            origin = (
                "as its timestamps place them"
                if time_origin == "first"
                else "all at t = 0 (--time-origin zero, a what-if)"
            )
            source = (
                f"the {imported.plan.n} sessions of {where}, {origin}: the search inputs "
                "again, not held out"
            )
    elif plans_dir is not None:
        inputs = directory_inputs(plans_dir, settings, {} if n is None else {"n": n})
        held = "held out" if inputs.held_out else "the search inputs again, not held out"
        source = f"{len(inputs.of('evaluation'))} plan files under {plans_dir} ({held})"
    else:
        inputs = generated_inputs(cfg, settings, None)
        source = (
            f"{len(inputs.of('evaluation'))} evaluation plans of the config (seed block "
            f"{settings.evaluation_seed_block}, never used to select)"
        )
    advice = advise_vllm(
        inputs,
        axes,
        profile,
        baseline=given["baseline"],
        trace_pool=pool,
        seed=seed,
        resamples=resamples,
        notes=notes,
        source=source,
    )
    announce_vllm_profile(profile, profile_path)
    typer.echo(json.dumps(advice, indent=2, sort_keys=True) if as_json else to_markdown(advice))
