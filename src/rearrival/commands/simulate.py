"""CLI verbs of the simulate area (registered by rearrival.cli)."""

from __future__ import annotations

from pathlib import Path

import typer

from rearrival.commands.profile import PROFILE_HELP

DEFAULT_CONFIG = Path("config/config.yaml")

def parse_buckets(text: str) -> tuple[int, ...]:
    """``"1,2,4,8"`` -> (1, 2, 4, 8); anything else is a one-line error naming --buckets."""
    from rearrival.model.simulator.sim import SimConfigError

    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError as exc:
        raise SimConfigError(
            f"--buckets {text!r}: give comma-separated integers such as 1,2,4,8"
        ) from exc


def register(app: typer.Typer) -> None:
    """Add this area's verbs to the top-level app."""

    @app.command("simulate")
    def simulate_cmd(
        plans: list[Path] = typer.Argument(..., help="Plan files (Parquet or JSON)."),  # noqa: B008
        buckets: str = typer.Option("1,2,4,8", "--buckets", help="Compiled decode buckets."),
        batch_size: int = typer.Option(
            8, "--batch-size", help="Largest bucket and execution limit."
        ),
        slots: int | None = typer.Option(None, "--slots", help="KV slots (default: batch size)."),
        release: str = typer.Option(
            "deferred",
            "--release",
            help="Slot release timing: deferred (paper's base) or immediate (measured stack).",
        ),
        dummy_block: str = typer.Option(
            "off",
            "--dummy-block",
            help="Padding-block rule: off (paper's base), pre-evict (measured stack) or "
            "reserved (paper's Supplementary S9 simulator, with deferred release).",
        ),
        variant: str = typer.Option(
            "wait",
            "--variant",
            help="Workload variant of the plan: wait, control (no tool wait) or equal (mean wait).",
        ),
        profile_path: Path | None = typer.Option(  # noqa: B008
            None, "--profile", help=PROFILE_HELP
        ),
        config_file: Path = typer.Option(  # noqa: B008
            DEFAULT_CONFIG,
            "--config",
            help="Study definition whose profile: and model: choose the constants "
            "(none in this directory: the published constants).",
        ),
        as_json: bool = typer.Option(
            False, "--json", help="One summary JSON object per plan per line, sorted keys."
        ),
    ) -> None:
        """Predict decode steps, reuse and device time of plans on one configuration.

        Runs the predictor simulator of paper Section IV (docs/DESIGN.md §4) on each plan.
        A plan whose transcript outgrows the profile's maximum sequence length is refused:
        its costs were never measured there.
        """
        import json

        from rearrival.commands.profile import profile_for_config
        from rearrival.model.plans.plan import check_context, load_plan
        from rearrival.model.simulator.sim import SimConfig, SimConfigError, simulate

        try:
            config = SimConfig(
                buckets=parse_buckets(buckets),
                batch_size=batch_size,
                slots=slots,
                release=release,
                dummy_block=dummy_block,
            )
        except SimConfigError as exc:  # the library names fields; name their options
            flags = ", ".join("--" + name.replace("_", "-") for name in exc.fields)
            raise SimConfigError(f"{flags}: {exc}" if flags else str(exc)) from None
        given = None if profile_path is None else str(profile_path)
        chosen = profile_for_config(config_file, given, config_file != DEFAULT_CONFIG)
        profile = chosen.announce()
        loaded = [load_plan(path).variant(variant) for path in plans]
        for path, plan in zip(plans, loaded, strict=True):
            where = f"{path} (profile measured at {profile.slot_tokens:,} tokens)"
            check_context(plan, profile.slot_tokens, where)
        for path, plan in zip(plans, loaded, strict=True):
            summary = simulate(plan, config, profile).summary()
            if as_json:
                typer.echo(json.dumps(summary, sort_keys=True))
            else:
                typer.echo(
                    f"{path}: N={plan.n} D={summary['device_s']:.4f}s "
                    f"(decode {summary['decode_s']:.4f}s, prefill {summary['prefill_s']:.4f}s) "
                    f"W={summary['interference_s']:.4f} session-s "
                    f"steps={summary['decode_steps']} padding={summary['padding_ratio']:.4f} "
                    f"reuse={summary['reuse_hits']}/{summary['re_arrivals']} "
                    f"makespan={summary['makespan_s']:.3f}s"
                )
