"""CLI verbs of the rbln area (registered by rearrival.cli): rbln patch apply|revert|check,
rbln compile. See rearrival.measure.patch and rearrival.measure.rbln (docs/DESIGN.md §5 "rbln")."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rearrival.commands.panels import PanelledGroup

SitePackages = Annotated[
    Path | None,
    typer.Option(
        "--site-packages", help="Directory holding vllm_rbln/; default: where Python imports it."
    ),
]


def register(app: typer.Typer) -> None:
    """Add this area's verbs to the top-level app."""
    rbln_app = typer.Typer(
        cls=PanelledGroup,
        help="Real RBLN hardware: observation patch and compile job.",
        no_args_is_help=True,
    )
    patch_app = typer.Typer(
        cls=PanelledGroup,
        help="The observation-only [BUCKET] log patch of vllm-rbln 0.11.1.",
        no_args_is_help=True,
    )
    patch_app.command("apply")(patch_apply)
    patch_app.command("revert")(patch_revert)
    patch_app.command("check")(patch_check)
    rbln_app.add_typer(patch_app, name="patch")
    rbln_app.command("compile")(compile_model)
    app.add_typer(rbln_app, name="rbln")


def patch_apply(site_packages: SitePackages = None) -> None:
    """Insert the [BUCKET] DEBUG log line after select_bucket_size (paper II-D).

    Refuses unless vllm-rbln is 0.11.1 and the file has the published SHA256; prints the
    new state and the sha256 every rbln run records as patch_sha256.
    """
    from rearrival.measure.patch import apply_patch

    typer.echo(apply_patch(site_packages).line())


def patch_revert(site_packages: SitePackages = None) -> None:
    """Remove the log line, restoring the original file byte for byte (hash checked)."""
    from rearrival.measure.patch import revert_patch

    typer.echo(revert_patch(site_packages).line())


def patch_check(site_packages: SitePackages = None) -> None:
    """Print the state of vllm-rbln's patched file and its sha256: original, patched,
    modified (unknown hash) or missing (vllm-rbln without that file); exit 0.

    When vllm-rbln is not installed (in this Python, or in --site-packages) there is no
    state to print: the line is 'absent' with where it looked, and the exit code is 1.
    """
    from rearrival.measure.patch import VllmRblnAbsent, patch_status

    try:
        status = patch_status(site_packages)
    except VllmRblnAbsent as exc:
        typer.echo(f"absent: {exc}")
        raise typer.Exit(1) from None
    typer.echo(status.line())


def compile_model(
    model: Annotated[str, typer.Option("--model", help="Hugging Face id or local path.")],
    batch_size: Annotated[int, typer.Option("--batch-size", help="rbln_batch_size.")],
    buckets: Annotated[
        str, typer.Option("--buckets", help="Decoder bucket sizes, ascending, e.g. 1,2,4,8.")
    ],
    artifacts: Annotated[
        Path, typer.Option("--artifacts", help="Directory of content-addressed compiled artifacts.")
    ],
    max_seq_len: Annotated[
        int | None,
        typer.Option("--max-seq-len", help="rbln_max_seq_len (default: model.max_seq_len's)."),
    ] = None,
    num_devices: Annotated[
        int | None,
        typer.Option("--num-devices", help="rbln_num_devices (default: model.num_devices's)."),
    ] = None,
) -> None:
    """Compile Qwen3 with optimum-rbln for one configuration (or reuse the artifact).

    Prints the artifact directory, compile seconds and bytes; fails fast with what to
    install when optimum-rbln or an RBLN device is missing.
    """
    from rearrival.commands.configuration import configuration_option
    from rearrival.config.calibration import ModelSpec
    from rearrival.measure.rbln import CompileConfig, compile_artifact

    config = CompileConfig(
        model=model,
        configuration=configuration_option(buckets, batch_size),
        max_seq_len=max_seq_len or ModelSpec.max_seq_len,
        num_devices=num_devices or ModelSpec.num_devices,
    )
    result = compile_artifact(config, artifacts)
    cost = "reused" if result.skipped else f"compiled in {result.compile_s:.1f} s"
    typer.echo(f"{result.artifact} {cost}, {result.artifact_bytes} bytes (record {result.record})")
