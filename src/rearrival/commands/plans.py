"""CLI verbs of the plans area (registered by rearrival.cli): plan, plans from-trace,
plans from-otel, tools build, tools show; plans open and plans closed live in
rearrival.commands.workloads."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rearrival.commands.panels import PanelledGroup
from rearrival.errors import RearrivalError

PLAN_SUFFIXES = (".parquet", ".json")


class PlanOutputError(RearrivalError, ValueError):
    """An output path the plan verb cannot write."""


def _tool_table(path: Path | None):
    from rearrival.model.plans.tools import default_tool_table, load_summary_json

    return default_tool_table() if path is None else load_summary_json(path)


def _range_option(option: str, text: str | None) -> tuple[int, int] | None:
    """``LO-HI`` (or one integer) as inclusive bounds; None when the option is absent."""
    from rearrival.model.plans.plangen import PlanGenError

    if text is None:
        return None
    parts = text.split("-")
    try:
        bounds = [int(part) for part in parts]
    except ValueError:
        bounds = []
    if len(bounds) not in (1, 2):
        raise PlanGenError(f"option {option} {text!r}: give LO-HI integers, e.g. 4-8")
    return (bounds[0], bounds[-1])


def _multi_round_spec(rounds: str | None, new_tokens: str | None, spread: float | None):
    """The multi-round spec the options ask for, or None for the paper's two-round plan."""
    from rearrival.model.plans.plangen import MultiRoundSpec

    chosen = {
        "rounds": _range_option("--rounds", rounds),
        "new_tokens": _range_option("--new-tokens", new_tokens),
        "start_spread_s": spread,
    }
    chosen = {key: value for key, value in chosen.items() if value is not None}
    return MultiRoundSpec(**chosen) if chosen else None


def plan(
    n: Annotated[
        int, typer.Option("--n", help="Sessions in the plan (concurrency N), at most 1,024.")
    ],
    study_seed: Annotated[int, typer.Option("--study-seed", help="The study's seed.")],
    replicate: Annotated[int, typer.Option("--replicate", help="Replicate index (0..).")],
    out: Annotated[Path, typer.Option("--out", help="Plan file to write (.parquet|.json).")],
    block: Annotated[int, typer.Option("--block", help="Input block (0..).")] = 0,
    variant: Annotated[
        str,
        typer.Option("--variant", help="wait (as drawn), control (no wait) or equal (mean wait)."),
    ] = "wait",
    tool_table: Annotated[
        Path | None,
        typer.Option("--tool-table", help="TraceLab summary.json; default: published aggregate."),
    ] = None,
    rounds: Annotated[
        str | None,
        typer.Option(
            "--rounds",
            help="Agent sessions: rounds per session LO-HI (e.g. 4-8), one tool call "
            "between rounds; default: the paper's two-round sessions.",
        ),
    ] = None,
    new_tokens: Annotated[
        str | None,
        typer.Option(
            "--new-tokens", help="Agent sessions: tokens each tool result appends, LO-HI."
        ),
    ] = None,
    start_spread_s: Annotated[
        float | None,
        typer.Option(
            "--start-spread-s", help="Agent sessions: starts uniform in [0, this] seconds."
        ),
    ] = None,
) -> None:
    """Write one replicate's input plan (paper II-C) and print path, sha256 and cap
    fraction. Any of --rounds, --new-tokens, --start-spread-s makes agent sessions with
    several tool calls (docs/DESIGN.md "Plans")."""
    if out.suffix not in PLAN_SUFFIXES:
        raise PlanOutputError(f"option --out '{out}': a plan file ends in .parquet or .json")
    from rearrival.limits import MAX_SESSIONS, SESSIONS_WHY, check_at_most

    check_at_most("--n", n, MAX_SESSIONS, SESSIONS_WHY)
    from rearrival.model.plans.plan import write_plan
    from rearrival.model.plans.plangen import PlanGenError, generate_multi_round_plan, generate_plan

    try:
        spec = _multi_round_spec(rounds, new_tokens, start_spread_s)
        generate = generate_plan if spec is None else generate_multi_round_plan
        drawn = generate(
            n,
            study_seed=study_seed,
            replicate=replicate,
            block=block,
            tool_table=_tool_table(tool_table),
            **({} if spec is None else {"spec": spec}),
        )
    except PlanGenError as exc:  # the library names the argument; name its option
        if exc.argument is None:
            raise
        raise PlanGenError(f"option --{exc.argument.replace('_', '-')}: {exc}") from None
    result = drawn.variant(variant)
    write_plan(result, out)
    typer.echo(f"{out} sha256={result.sha256()} cap_fraction={drawn.meta.cap_fraction:.4f}")


def _shown_table(source: Path | None):
    """The table ``tools show`` prints: a summary.json as given, a trace summarised as
    ``tools build`` would write it, or the published aggregate."""
    if source is None or source.suffix == ".json":
        return _tool_table(source)
    from rearrival.model.plans.tools import build_summary_from_trace, table_from_summary

    return table_from_summary(build_summary_from_trace(source), str(source), str(source))


def tools_build(
    trace: Annotated[Path, typer.Argument(help="TraceLab normalized JSONL (.jsonl or .gz).")],
    out: Annotated[Path, typer.Option("--out", help="summary.json to write.")],
) -> None:
    """Summarise a TraceLab round trace into summary.json (per-tool n, p50/p90/p99 in ms)."""
    from rearrival.atomic import atomic_write_json
    from rearrival.model.plans.tools import build_summary_from_trace, table_from_summary

    summary = build_summary_from_trace(trace)
    table_from_summary(summary, str(trace), str(out))  # refuse to write an unusable table
    atomic_write_json(out, summary)
    typer.echo(
        f"{out}: {len(summary['tool_by_name'])} tools, {summary['provenance']['calls']} calls"
    )


def tools_show(
    source: Annotated[
        Path | None,
        typer.Argument(
            help="What `tools build` takes (TraceLab normalized JSONL, .jsonl or .gz) or "
            "writes (summary.json); default: the published aggregate.",
            show_default=False,
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the sampling check.")] = 0,
    draws: Annotated[
        int, typer.Option("--draws", min=1, help="Draws for the check (at most 1,000,000).")
    ] = 100_000,
) -> None:
    """Print the tool table and a sampled share under 1 s and share capped at 60 s."""
    import random

    from rearrival.limits import DRAWS_WHY, MAX_DRAWS, check_at_most

    check_at_most("--draws", draws, MAX_DRAWS, DRAWS_WHY)

    table = _shown_table(source)
    typer.echo(f"source: {table.source}")
    if table.excluded:
        typer.echo(f"excluded (human-waiting): {', '.join(table.excluded)}")
    typer.echo(f"{'tool':<24} {'calls':>10} {'p50_s':>10} {'p90_s':>10} {'p99_s':>10}")
    for row in table.rows:
        typer.echo(
            f"{row.tool:<24} {row.calls:>10} {row.p50_s:>10.4g} {row.p90_s:>10.4g} "
            f"{row.p99_s:>10.4g}"
        )
    sample = table.sample(random.Random(seed), draws)
    typer.echo(
        f"sampled {draws} (seed {seed}): share < 1 s {sample.share_below(1.0):.4f}, "
        f"capped at 60 s {sample.cap_fraction:.4f}"
    )


SessionsOption = Annotated[
    int | None,
    typer.Option("--sessions", min=1, help="Sample this many sessions (seeded); default: all."),
]
SeedOption = Annotated[int, typer.Option("--seed", help="Seed of the session sample.")]
MaxSeqLenOption = Annotated[
    int | None,
    typer.Option(
        "--max-seq-len",
        min=2,
        help="Maximum sequence length a slot holds (default: the shipped profile's, the "
        "paper's); longer rounds are truncated or refused.",
    ),
]
OverflowOption = Annotated[
    str,
    typer.Option(
        "--on-overflow",
        help="truncate: end a session before its first round that does "
        "not fit; refuse: stop the import.",
    ),
]
OriginOption = Annotated[
    str,
    typer.Option(
        "--time-origin",
        help="first: sessions start as the trace's timestamps say, from the earliest; "
        "zero: all start at t = 0.",
    ),
]
ScaleOption = Annotated[
    float,
    typer.Option(
        "--token-scale",
        help="What-if: multiply every token count by this factor (recorded in the plan).",
    ),
]


def _import(kind: str, out: Path, **options) -> None:
    """Run an importer, print what it did, write DIR/plan.parquet; a malformed trace is
    one error line and exit code 2 (a user error) with nothing written."""
    from rearrival.model.plans.otel_import import plans_from_otel
    from rearrival.model.plans.plan import IMPORTED_PLAN_FILE, write_plan
    from rearrival.model.plans.trace_plans import TraceError
    from rearrival.model.plans.tracelab_import import plans_from_trace

    importer = plans_from_trace if kind == "tracelab" else plans_from_otel
    try:
        result = importer(**options)
    except TraceError as exc:
        typer.echo(f"rearrival: error: {exc}", err=True)
        raise typer.Exit(2) from None
    path = write_plan(result.plan, out / IMPORTED_PLAN_FILE)
    for line in result.summary_lines():
        typer.echo(line)
    typer.echo(f"wrote {path}")


def from_trace(
    trace: Annotated[Path, typer.Argument(help="TraceLab normalized round trace (.jsonl[.gz]).")],
    out: Annotated[Path, typer.Option("--out", help="Directory for plan.parquet.")],
    sessions: SessionsOption = None,
    seed: SeedOption = 0,
    max_seq_len: MaxSeqLenOption = None,
    on_overflow: OverflowOption = "truncate",
    time_origin: OriginOption = "first",
    token_scale: ScaleOption = 1.0,
    prefixes: Annotated[
        bool,
        typer.Option(
            "--prefixes/--no-prefixes",
            help="Shared prefixes: one per agent (provider) from round 0's cached prefix "
            "(TraceLab prefix_tokens, token-scaled); prompts are unchanged "
            '(docs/DESIGN.md §2 "Open traffic, shared prefixes and renewal").',
        ),
    ] = True,
) -> None:
    """Multi-round plan from a TraceLab round trace (paper Section II-C): per round the
    new tokens (input growth beyond the previous transcript), the generated tokens and the
    tool gap (parallel calls: the longest; sequential: the sum; human-waiting tools and
    the user's turns: gap 0), and each agent's shared prefix. Writes DIR/plan.parquet with
    the trace's sha256 and flags."""
    _import(
        "tracelab",
        out,
        path=trace,
        sessions=sessions,
        seed=seed,
        max_seq_len=max_seq_len,
        on_overflow=on_overflow,
        time_origin=time_origin,
        token_scale=token_scale,
        prefixes=prefixes,
    )


def from_otel(
    spans: Annotated[
        Path, typer.Argument(help="OTLP JSON from the Collector's file exporter (.json[l]).")
    ],
    out: Annotated[Path, typer.Option("--out", help="Directory for plan.parquet.")],
    sessions: SessionsOption = None,
    seed: SeedOption = 0,
    max_seq_len: MaxSeqLenOption = None,
    on_overflow: OverflowOption = "truncate",
    time_origin: OriginOption = "first",
    token_scale: ScaleOption = 1.0,
) -> None:
    """Multi-round plan from OpenTelemetry GenAI spans (gen_ai.* semantic conventions):
    inference spans are rounds, execute_tool spans between two of them the tool gap; a
    span's session is its gen_ai.conversation.id, else the one its trace carries, else its
    traceId. Failed calls (error.type or status ERROR) are skipped and counted. Same rules
    and output as `plans from-trace`."""
    _import(
        "otel",
        out,
        path=spans,
        sessions=sessions,
        seed=seed,
        max_seq_len=max_seq_len,
        on_overflow=on_overflow,
        time_origin=time_origin,
        token_scale=token_scale,
    )


def register(app: typer.Typer) -> None:
    """Add this area's verbs to the top-level app."""
    app.command("plan")(plan)
    plans_app = typer.Typer(
        cls=PanelledGroup,
        help="Multi-round plans from real agent traces (TraceLab, OpenTelemetry), and open "
        'or closed agent traffic drawn from them (docs/DESIGN.md §2 "Open traffic, shared '
        'prefixes and renewal").',
        no_args_is_help=True,
    )
    plans_app.command("from-trace")(from_trace)
    plans_app.command("from-otel")(from_otel)
    from rearrival.commands.workloads import register as register_workloads

    register_workloads(plans_app)
    app.add_typer(plans_app, name="plans")
    tools_app = typer.Typer(
        cls=PanelledGroup,
        help="Tool-latency tables (docs/DESIGN.md §2): build from a trace, show.",
        no_args_is_help=True,
    )
    tools_app.command("build")(tools_build)
    tools_app.command("show")(tools_show)
    app.add_typer(tools_app, name="tools")
