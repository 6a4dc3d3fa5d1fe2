"""Typed settings of calibration: ``profile:``, ``model:``, ``emulator_truth:`` and
``calibration:`` of the study definition (docs/DESIGN.md §3, "Calibration").

These frozen dataclasses are the one source of defaults and of what ``config/schema.yaml``
says of each key (rearrival.config.keys; the schema is generated from them). Cross-field rules the
schema cannot state (bucket sets, a readable config.json) are checked here and name the
config key and the fix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any

from rearrival.config.keys import key
from rearrival.errors import RearrivalError
from rearrival.model.configuration import ConfigurationError, RblnConfiguration
from rearrival.model.cost.fits import DTYPE_BYTES
from rearrival.model.cost.profile import Profile, load_profile_for_model

PUBLISHED = "published"
CALIBRATED = "calibrated"
# Where the workflow's calibration stage writes its profile (rules/calibrate.smk).
CALIBRATED_PROFILE = Path("results/calibration/profile.yaml")
ASSUMED_TRUTH = "emulator_truth_assumed.yaml"
# The paper's maximum sequence length (Qwen3-4B's rbln_max_seq_len on its artifacts): the
# tokens one KV slot holds on the eager path, the shipped profile's kv.slot_tokens.
MAX_SEQ_LEN = 8192


def exploratory_profile(profile: str) -> str:
    """The profile of the exploratory second evaluation (paper Sections II-B, IV): the
    published constants, or this run's calibrated profile when the study used them. Its
    predictions, channels and decisions go under results/exploratory/<name>/ and are
    never registered."""
    return CALIBRATED if profile == PUBLISHED else PUBLISHED


class CalibrationConfigError(RearrivalError, ValueError):
    """A calibration, model or profile setting that cannot be used; names key and fix."""


@dataclass(frozen=True)
class ModelSpec:
    """The served model's architecture: KV bytes per token and slot size (Table XV).

    Defaults are Qwen3-4B bf16 (the paper's model, its ``config.json``); with
    ``config_json`` set the architecture is read from the model's own file instead.
    """

    name: str = key(
        "Qwen/Qwen3-4B",
        description="Model id (a Hugging Face id; what backend rbln compiles and serves); must "
        "equal the profile's model_id.",
    )
    layers: int = key(36, description="num_hidden_layers.", minimum=1)
    kv_heads: int = key(8, description="num_key_value_heads.", minimum=1)
    head_dim: int = key(128, description="Attention head dimension.", minimum=1)
    dtype: str = key(
        "bfloat16",
        description="KV cache element type.",
        enum=["bfloat16", "float16", "float32", "float8", "int8"],
    )
    max_seq_len: int = key(
        MAX_SEQ_LEN,
        description="The maximum sequence length: tokens per KV slot (eager path: one block "
        "per sequence), rbln_max_seq_len on hardware, the longest transcript a workload may "
        "draw.",
        minimum=1,
    )
    num_devices: int = key(
        4, description="Devices the instance spans (rbln_num_devices on hardware).", minimum=1
    )
    config_json: str | None = key(
        None,
        description="Read layers/kv_heads/head_dim/dtype from this Hugging Face config.json "
        "instead.",
    )

    def __post_init__(self) -> None:
        if self.dtype not in DTYPE_BYTES:
            raise CalibrationConfigError(
                f"model.dtype '{self.dtype}': use one of {', '.join(DTYPE_BYTES)}"
            )
        for name in ("layers", "kv_heads", "head_dim", "max_seq_len", "num_devices"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise CalibrationConfigError(
                    f"model.{name} must be a positive integer, got {value!r}"
                )

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def architecture(self) -> dict[str, int]:
        """The profile's KV fields this model fixes (rearrival.model.cost.profile.MODEL_FIELDS)."""
        return {
            "kv.layers": self.layers,
            "kv.kv_heads": self.kv_heads,
            "kv.head_dim": self.head_dim,
            "kv.bytes_per_element": self.dtype_bytes,
            "kv.slot_tokens": self.max_seq_len,
            "kv.num_devices": self.num_devices,
        }


def model_from_config_json(path: Path, base: ModelSpec) -> ModelSpec:
    """Architecture from a Hugging Face ``config.json`` (num_hidden_layers,
    num_key_value_heads, head_dim or hidden_size/num_attention_heads, torch_dtype)."""
    try:
        raw = json.loads(path.read_text())
        heads = int(raw["num_attention_heads"])
        head_dim = int(raw.get("head_dim") or int(raw["hidden_size"]) // heads)
        values = dict(
            layers=int(raw["num_hidden_layers"]),
            kv_heads=int(raw.get("num_key_value_heads", heads)),
            head_dim=head_dim,
            dtype=str(raw.get("torch_dtype", base.dtype)),
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CalibrationConfigError(
            f"model.config_json {path}: cannot read the architecture "
            f"({exc!r}); give the model's config.json or set "
            "model.layers/kv_heads/head_dim/dtype instead"
        ) from exc
    fixed = {f.name: getattr(base, f.name) for f in fields(base)}
    return ModelSpec(**{**fixed, **values})


def calibration_artifact(buckets: tuple[int, ...], batch_size: int) -> RblnConfiguration:
    """One calibration artifact: a configuration compiled for calibration runs, named
    ``calib-<buckets>`` (its runs, samples and compile record carry the name)."""
    return RblnConfiguration(
        tuple(buckets), batch_size, name="calib-" + "-".join(map(str, buckets))
    )


# Four artifacts measure every bucket 1..16 (all the search can select) and 24, 32 (the
# saturation study); each leaves gaps so every bucket but 1 is seen at several n, which
# is what separates beta from g(b). Each compiles within the 1,800 s budget
# (42.3 + 61.33 x (buckets + 1) s: 410, 349, 533 and 226 s).
DEFAULT_ARTIFACTS = (
    calibration_artifact((1, 2, 4, 8, 16), 16),
    calibration_artifact((3, 6, 10, 12), 12),
    calibration_artifact((5, 7, 9, 11, 13, 14, 15), 15),
    calibration_artifact((24, 32), 32),
)


@dataclass(frozen=True)
class CalibrationSettings:
    """How the calibration stage measures (docs/DESIGN.md §3; paper II-B, III-C, IV)."""

    artifacts: tuple[RblnConfiguration, ...] = key(
        DEFAULT_ARTIFACTS,
        description="Bucket sets compiled for calibration; every bucket any study or the search "
        "can select should appear (others are interpolated and marked). Gaps let beta be told "
        "from g(b).",
        minItems=1,
        items={
            "type": "object",
            "additionalProperties": False,
            "required": ["buckets", "batch_size"],
            "properties": {
                "buckets": {
                    "type": "array",
                    "minItems": 1,
                    "items": {"type": "integer", "minimum": 1},
                },
                "batch_size": {"type": "integer", "minimum": 1},
            },
        },
    )
    decode_steps: int = key(
        200, description="Decode steps planned per n inside the steady window.", minimum=1
    )
    min_steps: int = key(
        50, description="Fewer usable steps at any (bucket, n) is an error.", minimum=2
    )
    warmup_steps: int = key(
        8, description="Steady steps dropped at the start of each window.", minimum=0
    )
    max_n_per_bucket: int = key(
        0,
        description="Measure at most this many running counts per bucket (evenly spaced, ends "
        "kept); 0 = every n.",
        minimum=0,
    )
    decode_prompt_tokens: int = key(
        128, description="Prompt length of the steady-decode sessions.", minimum=1
    )
    max_residual: float = key(
        0.02,
        description="Largest relative distance of a (bucket, n) median step time from "
        "g(b) + beta*n.",
        exclusiveMinimum=0,
    )
    prefill_tokens: tuple[int, ...] = key(
        (256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8000),
        description="Prompt lengths of the prefill probes.",
        items={"minimum": 1},
    )
    prefill_repeats: int = key(3, description="Probes per prompt length.", minimum=1)
    appended_tokens: tuple[int, ...] = key(
        (8, 120, 250, 380),
        description="Tokens appended by the probes' follow-ups (their computed remainder is "
        "below 500 tokens).",
        items={"minimum": 0},
    )
    max_prefill_error: float = key(
        0.05,
        description="Largest mean relative prefill fit error in any token range.",
        exclusiveMinimum=0,
    )
    bootstrap_resamples: int = key(400, description="Bootstrap resamples for every CI.", minimum=10)
    seed_block: int = key(
        900, description="Seed block of calibration runs (disjoint from studies).", minimum=0
    )

    def __post_init__(self) -> None:
        if not self.artifacts:
            raise CalibrationConfigError(
                "calibration.artifacts is empty; list at least one "
                "bucket set, e.g. {buckets: [1, 2, 4, 8], "
                "batch_size: 8}"
            )
        if self.min_steps < 2 or self.decode_steps < 1:
            raise CalibrationConfigError(
                "calibration.min_steps must be >= 2 and calibration.decode_steps >= 1"
            )
        if not (self.max_residual > 0 and self.max_prefill_error > 0):
            raise CalibrationConfigError(
                "calibration.max_residual and max_prefill_error must be > 0"
            )

    def as_dict(self) -> dict[str, Any]:
        """The settings in the config file's spelling (``calibration:``), as the profile
        records them and the workflow compares them: each artifact as the ``buckets`` and
        ``batch_size`` it is configured with (its slots are batch_size, its name derived)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values["artifacts"] = tuple(
            {"buckets": list(a.buckets), "batch_size": a.batch_size} for a in self.artifacts
        )
        return values

    @property
    def measured_buckets(self) -> tuple[int, ...]:
        return tuple(sorted({b for a in self.artifacts for b in a.buckets}))


@dataclass(frozen=True)
class MeasurementSettings:
    """What predictions are made with and measurements are checked against: the profile
    of cost constants, the served model, the emulator's truth and how calibration
    measures (``profile:``, ``model:``, ``emulator_truth:``, ``calibration:``)."""

    profile: str = key(
        PUBLISHED,
        description="Cost constants predictions, channel A, the search and advise use (paper "
        "Sections II-B, IV): 'calibrated' (this run's calibration stage, "
        "results/calibration/profile.yaml; what config/config.yaml uses, the paper's method of "
        "predicting with constants measured on the stack it predicts), 'published' (the "
        "paper's RBLN-CA25 constants; the default when the key is left out) or a path to a "
        "profile YAML in the shipped schema. Its sha256 and bytes are part of every "
        "preregistration.",
    )
    model: ModelSpec = key(
        ModelSpec(),
        description="The served model's architecture (KV bytes per token = 2 x layers x "
        "kv_heads x head_dim x dtype bytes; Table XV). A profile for another model is refused.",
    )
    emulator_truth: str = key(
        "default",
        description="Ground truth of the emulated backends: 'default' (twin of the measured "
        "stack), 'assumed' (a clearly hypothetical stack: decode x1.3, steeper above bucket 8, "
        "steeper prefill; shows calibration at work) or a path to a truth YAML.",
    )
    calibration: CalibrationSettings = key(
        CalibrationSettings(),
        description="The calibration stage (docs/DESIGN.md §3): steady decode at every n of "
        "each bucket of the calibration artifacts, single prefills, the reuse rule. Runs in "
        "every `make all`, so Table VII is always regenerated.",
    )
    source: str = "<config>"

    def profile_path(self) -> Path | None:
        """The profile file predictions use: None for the published constants."""
        if self.profile == PUBLISHED:
            return None
        if self.profile == CALIBRATED:
            return CALIBRATED_PROFILE
        return Path(self.profile)

    def prediction_profile(self) -> Profile:
        """The profile predictions, the search and advise use, checked against the
        model; a missing or foreign file is an error, never the published constants."""
        return load_profile_for_model(
            self.profile_path(), self.model.name, self.model.architecture()
        )

    def truth_path(self) -> Path | None:
        """The emulator truth file: None for the shipped twin of the measured stack."""
        if self.emulator_truth == "default":
            return None
        if self.emulator_truth == "assumed":
            return Path(str(resources.files("rearrival.data").joinpath(ASSUMED_TRUTH)))
        return Path(self.emulator_truth)


def _typed(cls: type, raw: Any, key: str) -> Any:
    if raw is None:
        return cls()
    if not isinstance(raw, dict):
        raise CalibrationConfigError(f"{key} must be a mapping")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise CalibrationConfigError(
            f"{key}.{unknown[0]} is not a setting; use {', '.join(sorted(known))}"
        )
    values = {}
    for name, value in raw.items():
        if isinstance(value, list):
            value = tuple(value)
        values[name] = value
    return cls(**values)


def _artifact(index: int, raw: dict[str, Any]) -> RblnConfiguration:
    """``calibration.artifacts[index]``; a knob the configuration refuses names the entry."""
    try:
        return calibration_artifact(tuple(raw["buckets"]), int(raw["batch_size"]))
    except ConfigurationError as exc:
        raise CalibrationConfigError(f"calibration.artifacts[{index}]: {exc}") from None


def measurement_settings_from_mapping(raw: dict[str, Any], source: str) -> MeasurementSettings:
    """Typed calibration settings from a (schema-valid) study definition mapping."""
    try:
        model = _typed(ModelSpec, raw.get("model"), "model")
        if model.config_json:
            model = model_from_config_json(Path(model.config_json), model)
        section = dict(raw.get("calibration") or {})
        if "artifacts" in section:
            section["artifacts"] = [
                _artifact(index, raw) for index, raw in enumerate(section["artifacts"])
            ]
        settings = _typed(CalibrationSettings, section, "calibration")
        return MeasurementSettings(
            profile=str(raw.get("profile", PUBLISHED)),
            model=model,
            emulator_truth=str(raw.get("emulator_truth", "default")),
            calibration=settings,
            source=source,
        )
    except CalibrationConfigError as exc:
        raise CalibrationConfigError(f"{source}: {exc}") from exc
    except (TypeError, KeyError) as exc:
        raise CalibrationConfigError(
            f"{source}: calibration settings: {exc}; see config/schema.yaml"
        ) from exc
