"""The real-hardware path (docs/DESIGN.md §5 "rbln"): compile job and server launcher.

Compile: optimum-rbln exports Qwen3 for a given (batch_size, bucket set) once; the
artifact lives in a content-addressed directory (hash of model id, configuration and
compiler versions), so a configuration is compiled at most once and every run can name
the exact artifact it served. Compile seconds and artifact bytes are recorded beside it
because the search's compile-cost model (docs/DESIGN.md §3) is checked against them.

Serve: one fresh ``vllm serve`` per run (paper Section II-D: the server was restarted
for every condition so no cache state carries over), DEBUG logging so the observation
patch's ``[BUCKET]`` lines reach the captured log, readiness by polling, and a clean
stop. Commands are argument lists, never shell strings, so no configuration value is
ever interpreted by a shell (docs/DESIGN.md §14).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rearrival.atomic import atomic_write_json
from rearrival.errors import RearrivalError, StageError
from rearrival.measure import patch
from rearrival.measure.client import ReplayOptions
from rearrival.measure.client_records import RunOutcome
from rearrival.measure.serve import free_port, run_with_server
from rearrival.model.configuration import RblnConfiguration
from rearrival.model.cost.profile import measured_profile

if TYPE_CHECKING:
    from rearrival.model.plans.plan import Plan

STACK_VERSION = "0.11.1"
INSTALL_HINT = (
    f"install the RBLN stack (optimum-rbln=={STACK_VERSION}, "
    f"vllm-rbln=={STACK_VERSION}, rebel-compiler from Rebellions' package index) "
    "on a host with an RBLN NPU"
)
# Distributions that decide what a compiled artifact contains.
COMPILE_SOFTWARE = ("optimum-rbln", "rebel-compiler", "torch", "transformers")
# What a measured run records beyond records.software_versions() (the compiler matters).
SERVE_SOFTWARE = ("vllm", "vllm-rbln", "optimum-rbln", "rebel-compiler")


class RblnError(RearrivalError):
    """The RBLN path cannot run here or was misconfigured; the message says what to do."""


# --- environment checks ------------------------------------------------------------------


def versions(names: Sequence[str]) -> dict[str, str | None]:
    """Installed versions by distribution name; None when absent."""
    found: dict[str, str | None] = {}
    for name in names:
        try:
            found[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            found[name] = None
    return found


def rbln_devices(dev_dir: Path = Path("/dev")) -> list[Path]:
    """RBLN device nodes (``/dev/rbln0``...), which the RBLN kernel driver creates."""
    return sorted(dev_dir.glob("rbln[0-9]*"))


def _module_available(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def require_stack(modules: Sequence[str], *, dev_dir: Path = Path("/dev")) -> None:
    """Fail fast, in one line, when a module of the RBLN stack or the device is missing.

    Checked before any heavy import so a machine without the stack gets advice, never a
    traceback from deep inside a compiler.
    """
    for module in modules:
        if not _module_available(module):
            raise RblnError(f"python module '{module}' is not importable; {INSTALL_HINT}")
    if not rbln_devices(dev_dir):
        raise RblnError(
            f"no RBLN device under {dev_dir} (expected {dev_dir}/rbln0...); run "
            "on a host with an RBLN NPU and its kernel driver loaded (check "
            "`rbln-stat`)"
        )


# --- compile -----------------------------------------------------------------------------


@dataclass(frozen=True)
class CompileConfig:
    """One artifact's compile parameters (paper Section II-A; docs/DESIGN.md §5): a
    configuration (checked where it was built) compiled for a model. Its slots are not
    compiled: the eager path allocates batch_size KV slots (``run_rbln`` refuses others)."""

    model: str
    configuration: RblnConfiguration
    max_seq_len: int  # the study definition's model.max_seq_len (rbln_max_seq_len)
    num_devices: int  # model.num_devices (rbln_num_devices)

    def __post_init__(self) -> None:
        if not self.model.strip():
            raise RblnError("model is empty; give a Hugging Face id or a local model path")
        if self.max_seq_len < 1 or self.num_devices < 1:
            raise RblnError("max_seq_len and num_devices must be >= 1")

    def as_dict(self) -> dict[str, Any]:
        """The compile record's ``config`` (and the artifact's content address): model,
        batch_size, buckets, max_seq_len, num_devices."""
        return {
            "model": self.model,
            "batch_size": self.configuration.batch_size,
            "buckets": list(self.configuration.buckets),
            "max_seq_len": self.max_seq_len,
            "num_devices": self.num_devices,
        }

    def from_pretrained_kwargs(self) -> dict[str, object]:
        """The optimum-rbln export arguments of one configuration (paper Section II-A)."""
        return {
            "export": True,
            "rbln_batch_size": self.configuration.batch_size,
            "rbln_max_seq_len": self.max_seq_len,
            "rbln_num_devices": self.num_devices,
            "rbln_decoder_batch_sizes": list(self.configuration.buckets),
        }


def artifact_name(config: CompileConfig, software: Mapping[str, str | None]) -> str:
    """Content address: readable prefix plus a hash of model, configuration and compiler.

    Two configurations or compiler versions never share a directory; the same ones always
    find the artifact compiled before.
    """
    canonical = json.dumps(
        {"config": config.as_dict(), "software": dict(software)},
        sort_keys=True,
        separators=(",", ":"),
    )
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:16]
    slug = "".join(c if c.isalnum() or c in "._-" else "-" for c in config.model).strip("-")
    buckets = "-".join(map(str, config.configuration.buckets))
    return f"{slug}.b{config.configuration.batch_size}.k{buckets}.{digest}"


@dataclass(frozen=True)
class CompileResult:
    """Where the artifact is, and what compiling it cost (None when it was reused)."""

    artifact: Path
    record: Path
    skipped: bool
    compile_s: float | None
    artifact_bytes: int


def _tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def compile_artifact(
    config: CompileConfig, artifacts_dir: Path, *, dev_dir: Path = Path("/dev")
) -> CompileResult:
    """Compile (or reuse) the artifact for ``config`` under ``artifacts_dir``.

    The record JSON is written last, so its presence means the artifact is whole; the
    compiled model is saved into a temporary directory and renamed into place.
    """
    require_stack(["optimum.rbln"], dev_dir=dev_dir)
    software = versions(COMPILE_SOFTWARE)
    name = artifact_name(config, software)
    artifact, record = artifacts_dir / name, artifacts_dir / f"{name}.json"
    if record.is_file() and artifact.is_dir():
        stored = json.loads(record.read_text())
        return CompileResult(artifact, record, True, None, int(stored["artifact_bytes"]))

    # Lazy: the device stack exists only on an RBLN host (require_stack checked it above).
    from optimum.rbln import RBLNQwen3ForCausalLM

    artifacts_dir.mkdir(parents=True, exist_ok=True)
    tmp = artifacts_dir / f".{name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    start = time.perf_counter()
    model = RBLNQwen3ForCausalLM.from_pretrained(config.model, **config.from_pretrained_kwargs())
    compile_s = time.perf_counter() - start
    try:
        model.save_pretrained(tmp)
        # A directory without its record is a leftover of a killed job: replace it.
        shutil.rmtree(artifact, ignore_errors=True)
        os.replace(tmp, artifact)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    size = _tree_bytes(artifact)
    atomic_write_json(
        record,
        {
            "artifact": name,
            "config": config.as_dict(),
            "compile_s": compile_s,
            "artifact_bytes": size,
            "software": software,
            "from_pretrained_kwargs": config.from_pretrained_kwargs(),
        },
    )
    return CompileResult(artifact, record, False, compile_s, size)


def compiled_artifact(compile_record: Path, configuration: str) -> Path:
    """The artifact directory the compile stage recorded for a configuration."""
    if not compile_record.exists():
        raise StageError(
            f"{compile_record}: no compile record; run the compile stage (backend rbln)"
        )
    entries = json.loads(compile_record.read_text())["configurations"]
    if configuration not in entries:
        raise StageError(
            f"{compile_record}: configuration {configuration} was not compiled; "
            "re-run the compile stage"
        )
    return Path(entries[configuration]["artifact"])


# --- serve -------------------------------------------------------------------------------


def vllm_executable() -> str:
    """The ``vllm`` entry point of this interpreter's environment, else the one on PATH."""
    beside = Path(sys.executable).with_name("vllm")
    return str(beside) if beside.is_file() else "vllm"


def vllm_serve_argv(
    artifact: Path,
    *,
    batch_size: int,
    port: int,
    max_seq_len: int,
    host: str = "127.0.0.1",
    seed: int = 0,
) -> list[str]:
    """``vllm serve`` for one run (docs/DESIGN.md §5).

    Block size = max_seq_len is the eager path's one-slot-per-sequence layout (paper
    II-A); prompt-token details make vLLM report per-request cached tokens.
    """
    return [
        vllm_executable(),
        "serve",
        str(artifact),
        "--max-num-seqs",
        str(batch_size),
        "--block-size",
        str(max_seq_len),
        "--max-model-len",
        str(max_seq_len),
        "--enable-prefix-caching",
        "--enable-prompt-tokens-details",
        "--seed",
        str(seed),
        "--host",
        host,
        "--port",
        str(port),
    ]


def serve_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's environment: DEBUG logging so the ``[BUCKET]`` lines are written, and
    unbuffered output so a killed server still leaves every line in the captured log."""
    return {**os.environ, "VLLM_LOGGING_LEVEL": "DEBUG", "PYTHONUNBUFFERED": "1", **(extra or {})}


def run_rbln(
    plan: Plan,
    out: Path,
    *,
    artifact: Path | None,
    configuration: RblnConfiguration,
    variant: str,
    options: ReplayOptions,
    manifest: dict[str, Any],
    site_packages: Path | None = None,
    dev_dir: Path = Path("/dev"),
    ready_timeout_s: float = 900.0,
) -> RunOutcome:
    """One run on real hardware: checks the stack, the patch and the artifact first.

    Everything that can be wrong before the device is touched fails fast in one line,
    so no run directory is written for a run that never started.
    """
    require_stack(["vllm", "vllm_rbln"], dev_dir=dev_dir)
    status = patch.patch_status(site_packages)  # via the module: tests replace it
    if status.state != "patched":
        raise RblnError(
            f"{status.path}: observation patch is not applied (state "
            f"{status.state}); run `rearrival rbln patch apply` first"
        )
    buckets, batch_size = list(configuration.buckets), configuration.batch_size
    if configuration.slots != batch_size:
        raise RblnError(
            f"slots {configuration.slots}: on the eager path the artifact has exactly "
            f"batch_size={batch_size} KV slots; compile another batch size instead"
        )
    if artifact is None or not artifact.is_dir():
        raise RblnError(
            f"artifact {artifact}: no compiled model there; build it with `rearrival rbln compile`"
        )
    record = artifact.with_name(f"{artifact.name}.json")
    # served at the length it was compiled for; an artifact without its record at the
    # length every profile's slot holds (the measured one's)
    max_seq_len = measured_profile().slot_tokens
    if record.is_file():
        compiled = json.loads(record.read_text())["config"]
        if compiled["buckets"] != buckets or compiled["batch_size"] != batch_size:
            raise RblnError(
                f"artifact {artifact}: compiled for buckets {compiled['buckets']} "
                f"batch {compiled['batch_size']}, not {buckets} batch "
                f"{batch_size}; pass the matching artifact"
            )
        max_seq_len = int(compiled["max_seq_len"])
    port = free_port()
    argv = vllm_serve_argv(
        artifact, batch_size=batch_size, port=port, max_seq_len=max_seq_len, seed=options.seed
    )
    served = {name: version or "absent" for name, version in versions(SERVE_SOFTWARE).items()}
    manifest = manifest | {
        "patch_sha256": status.sha256,
        "software": {**manifest.get("software", {}), **served},
    }
    return run_with_server(
        plan,
        out,
        argv=argv,
        url=f"http://127.0.0.1:{port}",
        variant=variant,
        options=options,
        manifest=manifest,
        log_path=out.with_name(f"{out.name}.server.log"),
        env=serve_env(),
        ready_timeout_s=ready_timeout_s,
        install_hint=INSTALL_HINT,
    )
