"""What a vLLM engine step costs (docs/DESIGN.md §15 rule 7) and the profile file that
holds the coefficients with their provenance.

One engine step of vLLM's synchronous scheduler computes a mix of tokens: decode tokens
D (tokens of requests that already hold an output token: vLLM's iteration log calls them
*generation* tokens), prefill tokens P (tokens of requests that have produced no output
yet: the log's *context* tokens, first admissions and their later chunks) and reads the
context C its requests computed before the step. The predictor prices it as

    step_s = base_s + per_decode_token_s * D_pad + per_prefill_token_s * P
             + per_kv_token_s * C

with D_pad the decode tokens padded up to the next CUDA-graph capture size (D itself with
no capture sizes or above the largest, 0 with no decode). The split is the one of vLLM's
``vllm/v1/utils.py:compute_iteration_details`` (the ``--enable-logging-iteration-details``
line), so a calibration fits the four coefficients on the logged counts of a real server.
A preempted request recomputes its tokens when it is admitted again; the log counts them
as context while it has no output token and as generation afterwards, and so does D/P.

The profile file (YAML, the layout of ``profile_rbln_ca25.yaml``: every number a mapping
with ``value``, ``ci`` and ``provenance``)::

    profile_version: "vllm-tiny-qwen3-cpu/1"
    substrate: vllm
    model_id: "rearrival/tiny-qwen3"
    vllm_version: "0.32.0"
    device: cpu            # cpu | gpu
    model_config_sha256: "bb48..."  # optional: the served config.json's (checked by compare)
    step_cost:
      base_s:              {value: 0.0042, ci: [0.0040, 0.0044], provenance: "..."}
      per_decode_token_s:  {value: 1.1e-4, ci: [...], provenance: "..."}
      per_prefill_token_s: {value: 2.3e-5, ci: [...], provenance: "..."}
      per_kv_token_s:      {value: 1.0e-8, ci: [...], provenance: "..."}
    kv:
      bytes_per_token:     {value: 1024, provenance: "2 x layers x kv_heads x head_dim x 4 B"}
    memory:                # optional: what sizes the KV pool (rearrival search/advise)
      device_gib:          {value: 72.0, provenance: "80 GiB H100 x gpu_memory_utilization 0.9"}
      weights_gib:         {value: 15.3, provenance: "vLLM's 'Model loading took 15.3 GiB'"}
      overhead_gib:        {value: 2.1, provenance: "activation peak + CUDA graphs, startup log"}
      num_devices:         {value: 1, provenance: "tensor_parallel_size"}

``ci`` is the 95 % interval of the fit (omit it for a number that was not fitted, e.g. an
assumed one, and say so in ``provenance``). Optional top-level keys (``fit``, ``runs``,
notes) are kept by the file and ignored here.

The ``memory`` block is what the search needs to derive KV pool sizes from memory and to
filter pools that do not fit (docs/DESIGN.md §15 "Search and advice"): ``device_gib`` is
the memory vLLM may use on one device (the device's memory times
``gpu_memory_utilization``, or a CPU server's ``--kv-cache-memory-bytes`` plus what its
weights take), ``weights_gib`` the model's weights over all devices, ``overhead_gib``
what else the engine holds besides the KV cache (activation peak, CUDA graphs; 0 when
included in the weights figure, said in its provenance) and ``num_devices`` the tensor
parallel size, over which weights and KV split evenly. Without it a search needs
explicit pool sizes (``--num-blocks``) and checks no memory.
"""

from __future__ import annotations

import difflib
import hashlib
import math
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from rearrival import yamltext
from rearrival.errors import RearrivalError
from rearrival.model.cost.memory import DeviceMemory
from rearrival.model.cost.profile import GIB
from rearrival.provenance import field_value, read_mapping

REFERENCE = "the vLLM profile layout in docs/DESIGN.md §15"
DEVICES = ("cpu", "gpu")
COEFFICIENTS = ("base_s", "per_decode_token_s", "per_prefill_token_s", "per_kv_token_s")
# The vLLM profile a verb uses when none is given (a file in rearrival/data), or None
# when none ships (then --substrate vllm needs --profile): the CPU calibration of the
# shipped tiny model (random weights) by `rearrival calibrate --backend vllm` on a 2-core
# machine; its seconds are CPU seconds, never GPU ones. A GPU operator passes their own.
DEFAULT_VLLM_PROFILE: str | None = "profile_vllm_tiny_qwen3_cpu.yaml"
# ``--profile gpu-template``: a GPU profile whose every number is a placeholder marked
# "fill in from a calibration" (``template: true``), so the vLLM verbs can be tried on
# a GPU's knobs and memory before a calibration exists; outputs say TEMPLATE (issue 36).
GPU_TEMPLATE = "gpu-template"
GPU_TEMPLATE_FILE = "profile_vllm_gpu_template.yaml"
MEMORY_FIELDS = ("device_gib", "weights_gib", "num_devices")
OPTIONAL_MEMORY_FIELDS = ("overhead_gib",)  # absent: counted as 0, and outputs say so


class VllmProfileError(RearrivalError, ValueError):
    """A vLLM step cost or profile that cannot be used; the message names the field and
    the fix."""


@dataclass(frozen=True)
class VllmStepCost:
    """The four coefficients of a vLLM engine step, in seconds (per token where named)."""

    base_s: float
    per_decode_token_s: float
    per_prefill_token_s: float
    per_kv_token_s: float = 0.0

    def __post_init__(self) -> None:
        for name in COEFFICIENTS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise VllmProfileError(f"step cost '{name}' {value!r} must be a number of seconds")
            if not (math.isfinite(value) and value >= 0):
                raise VllmProfileError(
                    f"step cost '{name}' {value!r} must be a finite number of seconds >= 0"
                )
            object.__setattr__(self, name, float(value))
        if self.base_s + self.per_decode_token_s + self.per_prefill_token_s <= 0:
            raise VllmProfileError(
                "step cost: base_s, per_decode_token_s and per_prefill_token_s are all 0, "
                "so virtual time would never advance; give at least one a positive value"
            )

    def step_s(self, decode_padded: int, prefill: int, context: int) -> float:
        """One step's time. The predictor's cores and the oracle harness evaluate this
        same expression in this order, so their clocks agree bit for bit."""
        return (
            self.base_s
            + self.per_decode_token_s * decode_padded
            + self.per_prefill_token_s * prefill
            + self.per_kv_token_s * context
        )

    def as_tuple(self) -> tuple[float, float, float, float]:
        return (self.base_s, self.per_decode_token_s, self.per_prefill_token_s, self.per_kv_token_s)


def parse_step_cost(text: str) -> VllmStepCost:
    """``"BASE,DEC,PRE[,KV]"`` in seconds (the CLI's ``--step-cost``)."""
    parts = [part.strip() for part in text.split(",")]
    if len(parts) not in (3, 4):
        raise VllmProfileError(
            f"--step-cost {text!r}: give BASE,DEC,PRE[,KV] in seconds, e.g. 0.004,1e-4,2e-5"
        )
    try:
        values = [float(part) for part in parts]
    except ValueError:
        raise VllmProfileError(
            f"--step-cost {text!r}: every part must be a number of seconds, e.g. 0.004,1e-4,2e-5"
        ) from None
    try:
        return VllmStepCost(*values)
    except VllmProfileError as exc:
        raise VllmProfileError(f"--step-cost {text!r}: {exc}") from None


@dataclass(frozen=True)
class VllmMemory:
    """What a vLLM server's devices hold besides the KV pool, and how much they hold: the
    profile's ``memory`` block (module docstring)."""

    device_gib: float  # what vLLM may use on one device
    weights_gib: float  # over all devices
    num_devices: int
    overhead_gib: float | None = None  # activation peak, CUDA graphs (all devices); None: not given

    def budget(self, bytes_per_block: int) -> DeviceMemory:
        """The devices' budget in blocks of ``bytes_per_block`` (one KV block of the pool
        across all devices): the RBLN memory check with a block in place of a slot."""
        return DeviceMemory(
            self.device_gib,
            self.weights_gib + (self.overhead_gib or 0.0),
            self.num_devices,
            bytes_per_block / GIB,
        )


@dataclass(frozen=True)
class VllmProfile:
    """A vLLM profile file: the step cost and what it was measured on.

    ``name`` is where it came from (the shipped file's name or the path given) and
    ``sha256`` the hash of its bytes, so every answer priced with it names it."""

    version: str
    model_id: str
    vllm_version: str
    device: str
    step_cost: VllmStepCost
    kv_bytes_per_token: int
    source: str
    memory: VllmMemory | None = None
    name: str = ""
    sha256: str = ""
    model_config_sha256: str = ""  # the served config.json's, when the profile records it
    template: bool = False  # every number a placeholder (``template: true``), not measured

    def kv_bytes_per_block(self, block_size: int) -> int:
        return self.kv_bytes_per_token * block_size

    def identity(self) -> dict[str, Any]:
        """What search and advise outputs record of the profile they priced with."""
        return {
            **({"template": True} if self.template else {}),
            "name": self.name or self.source,
            "version": self.version,
            "sha256": self.sha256,
            "device": self.device,
            "model_id": self.model_id,
            "vllm_version": self.vllm_version,
        }

    def seconds_note(self) -> str:
        """What its seconds are: a CPU profile's are never GPU seconds (docs/DESIGN.md §15)."""
        if self.template:
            return (
                f"TEMPLATE profile ({self.name or self.source}): every time is a placeholder "
                f"for {self.model_id} on a {self.device.upper()}, not a measurement; fill in "
                "its fields from a calibration (`rearrival calibrate --backend vllm`) before "
                "sizing a server"
            )
        if self.device == "cpu":
            return (
                f"CPU profile: every time is CPU seconds of the machine that calibrated it, "
                f"serving {self.model_id} on vLLM {self.vllm_version}'s CPU build, not GPU "
                "seconds; give a GPU calibration (--profile) to size a GPU server"
            )
        return (
            f"GPU profile of {self.model_id} on vLLM {self.vllm_version}; asynchronous "
            "scheduling (vLLM's GPU default) is not modelled"
        )

    def description(self) -> str:
        """One phrase naming the profile, for the line a verb prints about it."""
        return (
            f"vLLM profile {self.name or self.source} ({self.version}, device {self.device}, "
            f"sha256 {self.sha256[:12]})"
        )


def seconds_unit(identity: dict[str, Any]) -> str:
    """The unit times priced with the profile of ``identity`` (``VllmProfile.identity``)
    are shown in: CPU seconds are never GPU ones, and a template's are placeholders
    (every table that shows a time says so in its header)."""
    if identity.get("template"):
        return "TEMPLATE s"
    return "CPU s" if identity["device"] == "cpu" else "s"


def _value(tree: dict[str, Any], dotted: str, source: str) -> Any:
    return field_value(
        tree, dotted, source, error=VllmProfileError, reference=REFERENCE, require_value=True
    )


def _text(tree: dict[str, Any], name: str, source: str) -> str:
    value = tree.get(name)
    if not isinstance(value, str) or not value:
        raise VllmProfileError(
            f"{source}: field '{name}' must be a non-empty string; see {REFERENCE}"
        )
    return value


def vllm_profile_from_mapping(tree: dict[str, Any], source: str = "<profile>") -> VllmProfile:
    """A profile from its parsed YAML, naming the file and the field in every error."""
    if tree.get("substrate") != "vllm":
        raise VllmProfileError(
            f"{source}: field 'substrate' is {tree.get('substrate')!r}; a vLLM profile says "
            f"substrate: vllm (an RBLN profile goes to --profile without --substrate vllm)"
        )
    device = _text(tree, "device", source)
    if device not in DEVICES:
        raise VllmProfileError(f"{source}: field 'device' {device!r}: use one of cpu, gpu")
    values = [_value(tree, f"step_cost.{name}", source) for name in COEFFICIENTS]
    for name in COEFFICIENTS:
        if "provenance" not in tree["step_cost"][name]:
            raise VllmProfileError(
                f"{source}: field 'step_cost.{name}' needs 'provenance' (what was measured, "
                f"where, how it was fitted); see {REFERENCE}"
            )
    try:
        cost = VllmStepCost(*values)
    except VllmProfileError as exc:
        raise VllmProfileError(f"{source}: {exc}") from None
    kv_bytes = _value(tree, "kv.bytes_per_token", source)
    if isinstance(kv_bytes, bool) or not isinstance(kv_bytes, int) or kv_bytes < 1:
        raise VllmProfileError(
            f"{source}: field 'kv.bytes_per_token' {kv_bytes!r} must be a positive integer "
            "(2 x layers x kv_heads x head_dim x bytes per element of the served model)"
        )
    return VllmProfile(
        version=str(tree.get("profile_version", "unversioned")),
        model_id=_text(tree, "model_id", source),
        vllm_version=_text(tree, "vllm_version", source),
        device=device,
        step_cost=cost,
        kv_bytes_per_token=kv_bytes,
        source=source,
        memory=_memory(tree, source),
        model_config_sha256=str(tree.get("model_config_sha256") or ""),
        template=tree.get("template") is True,
    )


def _memory(tree: dict[str, Any], source: str) -> VllmMemory | None:
    """The optional ``memory`` block, every field with a value and its provenance."""
    if "memory" not in tree:
        return None
    if not isinstance(tree["memory"], dict):
        raise VllmProfileError(f"{source}: field 'memory' must be a mapping; see {REFERENCE}")
    optional = [name for name in OPTIONAL_MEMORY_FIELDS if name in tree["memory"]]
    values: dict[str, Any] = {}
    for name in (*MEMORY_FIELDS, *optional):
        dotted = f"memory.{name}"
        value = _value(tree, dotted, source)
        if "provenance" not in tree["memory"][name]:
            raise VllmProfileError(
                f"{source}: field '{dotted}' needs 'provenance' (the device, how it was "
                f"read); see {REFERENCE}"
            )
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if name == "num_devices" and not (isinstance(value, int) and number and value >= 1):
            raise VllmProfileError(
                f"{source}: field '{dotted}' {value!r} must be an integer >= 1 (the tensor "
                "parallel size)"
            )
        if not number or not math.isfinite(value) or value < 0:
            raise VllmProfileError(
                f"{source}: field '{dotted}' {value!r} must be a number of GiB >= 0"
            )
        values[name] = value
    return VllmMemory(
        float(values["device_gib"]),
        float(values["weights_gib"]),
        int(values["num_devices"]),
        float(values["overhead_gib"]) if "overhead_gib" in values else None,
    )


def load_vllm_profile(path: str | Path) -> VllmProfile:
    """Read a vLLM profile file (layout in this module's docstring)."""
    path = Path(path)
    tree = read_mapping(path, error=VllmProfileError, reference=REFERENCE)
    profile = vllm_profile_from_mapping(tree, str(path))
    return _named(profile, str(path), path.read_bytes())


def _named(profile: VllmProfile, name: str, data: bytes) -> VllmProfile:
    return replace(profile, name=name, sha256=hashlib.sha256(data).hexdigest())


def shipped_vllm_profile() -> VllmProfile:
    """The default vLLM profile (``DEFAULT_VLLM_PROFILE``); refused while none ships."""
    if DEFAULT_VLLM_PROFILE is None:
        raise VllmProfileError(
            "no vLLM profile ships yet: pass --profile VLLM_PROFILE.yaml (a calibration of "
            "your engine on your device; layout in docs/DESIGN.md §15)"
        )
    data = resources.files("rearrival.data").joinpath(DEFAULT_VLLM_PROFILE).read_bytes()
    tree = yamltext.safe_load(data)
    profile = vllm_profile_from_mapping(tree, DEFAULT_VLLM_PROFILE)
    return _named(profile, DEFAULT_VLLM_PROFILE, data)


def gpu_template_profile() -> VllmProfile:
    """The shipped GPU profile template (``GPU_TEMPLATE``)."""
    data = resources.files("rearrival.data").joinpath(GPU_TEMPLATE_FILE).read_bytes()
    profile = vllm_profile_from_mapping(yamltext.safe_load(data), GPU_TEMPLATE_FILE)
    return _named(profile, GPU_TEMPLATE_FILE, data)


def choose_vllm_profile(path: str | Path | None) -> VllmProfile:
    """``--profile PATH`` when given (``gpu-template``: the shipped GPU template, unless a
    file of that name exists here), else the shipped default."""
    if path is None:
        return shipped_vllm_profile()
    if str(path) == GPU_TEMPLATE and not Path(path).exists():
        return gpu_template_profile()
    if not Path(path).exists():
        _refuse_misspelled_name(str(path))
    return load_vllm_profile(path)


def _refuse_misspelled_name(given: str) -> None:
    """A missing file close to a profile name is a misspelled name, told as the RBLN
    verbs tell ``--profile publshed`` (issue 36 item 7): "did you mean", not "cannot read
    it" and a layout to copy."""
    close = difflib.get_close_matches(given, (GPU_TEMPLATE,), n=1, cutoff=0.6)
    if close:
        raise VllmProfileError(
            f"profile {given!r} is neither a profile name nor a file; did you mean "
            f"{close[0]}? (names: {GPU_TEMPLATE}; or a path to a vLLM profile YAML)"
        )
