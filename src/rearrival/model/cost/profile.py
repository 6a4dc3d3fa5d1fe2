"""The measured substrate profile (docs/DESIGN.md §3): step, prefill, reuse, KV and compile models.

Every cost the predictor, channel A and the search use comes from here, so a reader can
check one file against the paper. The numbers live in a versioned data file with their
provenance (``data/profile_rbln_ca25.yaml``); this module only applies them.
"""

from __future__ import annotations

import difflib
import hashlib
import math
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from rearrival import yamltext
from rearrival.errors import RearrivalError
from rearrival.provenance import field_value, read_mapping, shipped_mapping

DEFAULT_PROFILE = "profile_rbln_ca25.yaml"
# The name a profile loaded from the shipped file goes by (config ``profile: published``).
PUBLISHED_NAME = "published"
GIB = 1024**3


class ProfileError(RearrivalError, ValueError):
    """A profile file is missing a field or holds a value that cannot be used."""


@dataclass(frozen=True)
class Profile:
    """Cost coefficients of one compile-time-static stack (all times in seconds)."""

    version: str
    measured_bucket_s: tuple[tuple[int, float], ...]
    alpha_s: float
    beta_s: float
    prefill_chunk_tokens: int
    prefill_per_chunk_s: float
    prefill_per_token_s: float
    prefill_fit_range: tuple[int, int]
    reuse_block_tokens: int
    layers: int
    kv_heads: int
    head_dim: int
    bytes_per_element: int
    slot_tokens: int
    num_devices: int
    compile_intercept_s: float
    compile_per_graph_s: float
    artifact_intercept_gib: float
    artifact_per_bucket_gib: float
    compile_budget_s: float
    # Where the constants came from: "published" or the file's path, and the sha256 of
    # its bytes, so every answer priced with them can name them (search and advise
    # outputs). Not part of equality: two files with the same constants price the same.
    name: str = field(default="", compare=False)
    sha256: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        points = [b for b, _ in self.measured_bucket_s]
        if len(points) < 2 or points != sorted(set(points)):
            raise ProfileError("decode.bucket_cost_ms needs at least two distinct buckets")

    def bucket_cost_s(self, bucket: int) -> float:
        """f(b): measured where measured, else linear between neighbours (V-A).

        Above the largest measured bucket the line through the two largest measured
        points is extended; interpolated values are never used as reference points.
        """
        points = self.measured_bucket_s
        for b, cost in points:
            if b == bucket:
                return cost
        if bucket < points[0][0]:
            (b0, f0), (b1, f1) = points[0], points[1]
        elif bucket > points[-1][0]:
            (b0, f0), (b1, f1) = points[-2], points[-1]
        else:
            upper = next(i for i, (b, _) in enumerate(points) if b > bucket)
            (b0, f0), (b1, f1) = points[upper - 1], points[upper]
        return f0 + (f1 - f0) * (bucket - b0) / (b1 - b0)

    def decode_step_s(self, n: int, bucket: int) -> float:
        """t_step = f(b) + alpha + beta * n (paper Section IV)."""
        return self.bucket_cost_s(bucket) + self.alpha_s + self.beta_s * n

    def prefill_s(self, computed_tokens: int) -> float:
        """Server-side prefill time T(q); T(0) = 0 (paper Section III-C)."""
        if computed_tokens <= 0:
            return 0.0
        chunks = math.ceil(computed_tokens / self.prefill_chunk_tokens)
        return chunks * (self.prefill_per_chunk_s + self.prefill_per_token_s * computed_tokens)

    def reusable_tokens(self, previous_prompt_tokens: int, prompt_tokens: int) -> int:
        """C = floor(min(P, L - 1) / 128) * 128: the cached prefix a surviving slot gives.

        Only the previous prompt was written by prefill (generated tokens are never
        cached), and at least one token must be computed to produce logits.
        """
        usable = min(previous_prompt_tokens, prompt_tokens - 1)
        block = self.reuse_block_tokens
        return max(0, usable // block * block)

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V for every layer and KV head: 2 x 36 x 8 x 128 x 2 B = 144 KiB."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.bytes_per_element

    @property
    def slot_bytes(self) -> int:
        """One KV slot reserves a full max_seq_len sequence (eager path, Table XV)."""
        return self.kv_bytes_per_token * self.slot_tokens

    @property
    def slot_gib_per_device(self) -> float:
        return self.slot_bytes / GIB / self.num_devices

    def kv_gib(self, slots: int) -> float:
        """KV reservation of ``slots`` slots over the whole instance, in GiB."""
        return slots * self.slot_bytes / GIB

    def compile_seconds(self, n_buckets: int) -> float:
        """Authors' compile-time fit: one graph per decode bucket plus the prefill graph."""
        return self.compile_intercept_s + self.compile_per_graph_s * (n_buckets + 1)

    def artifact_gib(self, n_buckets: int) -> float:
        return self.artifact_intercept_gib + self.artifact_per_bucket_gib * n_buckets

    def identity(self) -> dict[str, str]:
        """What the search and advise outputs record of the constants they used."""
        return {"name": self.name, "version": self.version, "sha256": self.sha256}

    def description(self) -> str:
        """One phrase naming the constants, e.g. for the line a verb prints about them."""
        what = "the published constants" if self.name == PUBLISHED_NAME else self.name
        note = calibration_note(self.version)
        return f"{what} ({self.version}, sha256 {self.sha256[:12]})" + (f": {note}" if note else "")


# Backends a calibration can run on that are not RBLN hardware (rearrival.vocabulary).
TWIN_BACKENDS = ("emulated", "emulated-http")


def calibration_note(version: str) -> str | None:
    """What a calibrated profile was measured on, when that is the emulated twin (its
    ``profile_version`` is ``calibrated/<backend>/<digest>``): issue 36, "calibrated"
    read as a hardware calibration when it was one of the virtual twin."""
    parts = version.split("/")
    if len(parts) >= 3 and parts[0] == "calibrated" and parts[1] in TWIN_BACKENDS:
        return (
            f"calibrated on the {parts[1]} backend (the virtual twin of the paper's stack), "
            "not on RBLN hardware"
        )
    return None


def _value(tree: dict[str, Any], dotted: str, source: str) -> Any:
    return field_value(tree, dotted, source, error=ProfileError, reference=DEFAULT_PROFILE)


def profile_from_mapping(tree: dict[str, Any], source: str = "<profile>") -> Profile:
    """Build a Profile from the parsed YAML tree, naming the file in every error; a vLLM
    profile is named as one (issue 36: it failed on its first missing RBLN field)."""
    if tree.get("substrate") == "vllm":
        raise ProfileError(
            f"{source}: a vLLM profile (substrate: vllm), not an RBLN one; pass it with "
            "--substrate vllm, or give an RBLN profile (published, calibrated or a file laid "
            f"out as {DEFAULT_PROFILE})"
        )
    costs = _value(tree, "decode.bucket_cost_ms", source)
    try:
        measured = tuple(
            sorted(
                (int(b), float(v["value"] if isinstance(v, dict) else v) / 1000)
                for b, v in costs.items()
            )
        )
        low, high = _value(tree, "prefill.fit_range_tokens", source)
        return Profile(
            version=str(tree.get("profile_version", "unversioned")),
            measured_bucket_s=measured,
            alpha_s=float(_value(tree, "decode.alpha_ms", source)) / 1000,
            beta_s=float(_value(tree, "decode.beta_ms_per_request", source)) / 1000,
            prefill_chunk_tokens=int(_value(tree, "prefill.chunk_tokens", source)),
            prefill_per_chunk_s=float(_value(tree, "prefill.per_chunk_s", source)),
            prefill_per_token_s=float(_value(tree, "prefill.per_token_s", source)),
            prefill_fit_range=(int(low), int(high)),
            reuse_block_tokens=int(_value(tree, "reuse.block_tokens", source)),
            layers=int(_value(tree, "kv.layers", source)),
            kv_heads=int(_value(tree, "kv.kv_heads", source)),
            head_dim=int(_value(tree, "kv.head_dim", source)),
            bytes_per_element=int(_value(tree, "kv.bytes_per_element", source)),
            slot_tokens=int(_value(tree, "kv.slot_tokens", source)),
            num_devices=int(_value(tree, "kv.num_devices", source)),
            compile_intercept_s=float(_value(tree, "compile.seconds_intercept", source)),
            compile_per_graph_s=float(_value(tree, "compile.seconds_per_graph", source)),
            artifact_intercept_gib=float(_value(tree, "compile.artifact_gib_intercept", source)),
            artifact_per_bucket_gib=float(_value(tree, "compile.artifact_gib_per_bucket", source)),
            compile_budget_s=float(_value(tree, "compile.budget_s", source)),
        )
    except (TypeError, ValueError) as exc:
        raise ProfileError(f"{source}: {exc}") from exc


def load_profile(path: str | Path | None = None) -> Profile:
    """Load a profile file; ``None`` gives the measured RBLN-CA25 profile shipped here."""
    if path is None:
        return measured_profile()
    tree = read_mapping(Path(path), error=ProfileError, reference=DEFAULT_PROFILE)
    return _named(profile_from_mapping(tree, str(path)), path)


def _named(profile: Profile, path: str | Path | None) -> Profile:
    """The profile with the name and sha256 of the file it was read from."""
    name = PUBLISHED_NAME if path is None else str(path)
    return replace(profile, name=name, sha256=profile_sha256(path))


# The architecture fields a profile shares with the served model (docs/DESIGN.md §3, Table XV).
MODEL_FIELDS = (
    "kv.layers",
    "kv.kv_heads",
    "kv.head_dim",
    "kv.bytes_per_element",
    "kv.slot_tokens",
    "kv.num_devices",
)


# The names a profile: key or --profile takes besides a path
# (rearrival.config.calibration.PUBLISHED and CALIBRATED).
PROFILE_NAMES = ("published", "calibrated")


def profile_bytes(path: str | Path | None) -> bytes:
    """The exact bytes of a profile file (the shipped one for ``None``): what a
    preregistration commits and hashes, so a run's predictions name their constants."""
    if path is None:
        return resources.files("rearrival.data").joinpath(DEFAULT_PROFILE).read_bytes()
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ProfileError(_unreadable(Path(path), exc.strerror)) from exc


def _unreadable(path: Path, reason: str | None) -> str:
    """One line for a profile that cannot be read: a misspelled profile name gets "did
    you mean" (issue 36: ``--profile publshed`` was told to calibrate into that file);
    only a YAML path is offered ``rearrival calibrate --out``."""
    close = difflib.get_close_matches(str(path), PROFILE_NAMES, n=1, cutoff=0.6)
    if close:
        return (
            f"profile {str(path)!r} is neither a profile name nor a file; did you mean "
            f"{close[0]}? (names: {', '.join(PROFILE_NAMES)}; or a path to a profile YAML)"
        )
    if path.suffix not in (".yaml", ".yml"):
        return (
            f"{path}: cannot read the profile ({reason}); give {' or '.join(PROFILE_NAMES)}, "
            "or the path of a profile YAML"
        )
    return (
        f"{path}: cannot read the profile ({reason}); write one with `rearrival calibrate "
        f"--out {path}` (or the workflow's calibration stage) or use profile: published"
    )


def profile_sha256(path: str | Path | None) -> str:
    return hashlib.sha256(profile_bytes(path)).hexdigest()


def load_profile_for_model(
    path: str | Path | None, model_id: str, architecture: dict[str, int]
) -> Profile:
    """Load a profile and refuse one made for another model (docs/DESIGN.md §3).

    ``architecture`` maps the dotted :data:`MODEL_FIELDS` to the configured model's
    values. A profile naming another ``model_id``, or whose KV fields differ, is one
    error naming the field and the fix; there is no fallback to the published constants.
    """
    source = DEFAULT_PROFILE if path is None else str(path)
    tree = yamltext.safe_load(profile_bytes(path))
    if not isinstance(tree, dict):
        raise ProfileError(f"{source}: must be a YAML mapping; see {DEFAULT_PROFILE}")
    profile = profile_from_mapping(tree, source)
    fix = (
        f"calibrate on {model_id} (`rearrival calibrate`) or point profile: at a "
        "profile measured for it"
    )
    named = tree.get("model_id")
    if named is None:
        raise ProfileError(f"{source}: missing field 'model_id'; {fix}")
    if str(named) != model_id:
        raise ProfileError(
            f"{source}: field 'model_id' is {named!r} but the study serves {model_id!r}; {fix}"
        )
    for dotted in MODEL_FIELDS:
        value = int(_value(tree, dotted, source))
        if value != architecture[dotted]:
            raise ProfileError(
                f"{source}: field '{dotted}' is {value} but model "
                f"{model_id} has {architecture[dotted]}; {fix}"
            )
    return _named(profile, path)


@cache
def measured_profile() -> Profile:
    """The authors' published constants (docs/DESIGN.md §3), parsed once per process."""
    return _named(profile_from_mapping(shipped_mapping(DEFAULT_PROFILE), DEFAULT_PROFILE), None)
