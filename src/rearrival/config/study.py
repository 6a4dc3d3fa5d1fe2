"""The study definition (docs/DESIGN.md §10): config/config.yaml as typed, checked objects.

The section models under rearrival.config are the one source of every key: its default,
type, range and description (rearrival.config.keys). The JSON schema is drawn from them
(:func:`study_definition_schema`; ``rearrival study schema`` prints it and
config/schema.yaml is that output) and checks a file when it is read, once
(:func:`read_study_definition`, the one reader); this module then checks what a schema
cannot (bucket sets holding their batch_size, studies naming defined configurations) and
expands each study into its plans and conditions, so the Snakefile and every stage agree
on one list of files without repeating the rules.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from rearrival import yamltext
from rearrival.config.backends import EmulatedHttpSettings, RblnSettings, VllmStudySettings
from rearrival.config.calibration import (
    CALIBRATED,
    PUBLISHED,
    MeasurementSettings,
    measurement_settings_from_mapping,
)
from rearrival.config.capacity import CapacitySettings
from rearrival.config.decision import DecisionCriteria, DecisionError
from rearrival.config.errors import StudyConfigError
from rearrival.config.fleet import FleetStudySettings
from rearrival.config.injection import InjectionSettings
from rearrival.config.keys import key, object_of, object_schema
from rearrival.config.schema import (
    check_schema,
    config_schema_path,
    configuration_schema,
    document_schema,
    schema_validator,
    schema_yaml,
)
from rearrival.config.search import SearchError, SearchSettings, study_search_schema
from rearrival.config.workload import Workload, workload_from_mapping, workload_schema
from rearrival.errors import StageError
from rearrival.limits import MAX_SESSIONS
from rearrival.model.configuration import (
    Configuration,
    ConfigurationError,
    configuration_from_mapping,
    configuration_in_record,
)
from rearrival.model.plans.tools import ToolTable, default_tool_table, load_summary_json
from rearrival.vocabulary import BACKEND_STAGES, BACKENDS, EMULATED, VARIANTS

SELECTED = "selected"  # the configuration chosen by the search stage


class SelectionMissingError(StageError):
    """A study compares the search's pick but no selected.json was given; its own type so
    the CLI can name its flag for it."""


def configuration_from_config(
    name: str, raw: dict[str, Any], where: str, substrate: str = "rbln"
) -> Configuration:
    """One entry under ``configurations``, checked once by the configuration type of the
    backend's substrate (RBLN: the largest bucket is batch_size, slots default to
    batch_size, docs/DESIGN.md §1; vLLM: num_blocks, block_size, max_num_batched_tokens,
    §15); a knob it refuses is one line naming the file and the keys."""
    try:
        return configuration_from_mapping(raw, substrate, name)
    except ConfigurationError as exc:
        keys = "/".join(f"{name}.{field}" for field in exc.fields) or name
        raise StudyConfigError(f"{where}: {keys}: {exc}") from None


@dataclass(frozen=True)
class Condition:
    """One configuration under one workload variant; runs on every plan of a replicate."""

    configuration: str
    variant: str

    @property
    def label(self) -> str:
        return f"{self.configuration}-{self.variant}"


STUDY_KINDS = ("comparison", "validation", "saturation", "repeats")


@dataclass(frozen=True)
class Study:
    """One entry under ``studies`` (its ``name`` is the entry's key)."""

    name: str
    kind: str = key(
        description="comparison (mechanism studies), validation (preregistered cost "
        "validation), saturation (bootstrap classification), repeats (no-treatment repeats).",
        enum=list(STUDY_KINDS),
    )
    description: str = key(description="One line shown in reports.", mandatory=False)
    n: tuple[int, ...] = key(
        description="Concurrent sessions N (one plan per N and replicate). At most 1024: a run "
        "takes about its simulated makespan in wall time on rbln (times time_scale on "
        "emulated-http), and the makespan grows about 0.95 s per session once N exceeds the "
        "slots (baseline {1,2,4,8}/8, base simulator: N=256 -> 245 s, N=1024 -> 973 s per "
        "run), so N=100000 would be about a day per run; the paper's largest N is 16. Raise "
        "the bound here deliberately for a larger study.",
        minItems=1,
        items={"minimum": 1, "maximum": MAX_SESSIONS},
    )
    configurations: tuple[str, ...] = key(
        description="Names from configurations, or 'selected' for the search's pick; the first "
        "is the baseline of every configuration ratio.",
        minItems=1,
    )
    variants: tuple[str, ...] = key(
        description="Workload variants: wait (planned tool waits), control (no wait), equal "
        "(every wait = plan mean); the first is the reference of workload comparisons.",
        minItems=1,
        items={"enum": list(VARIANTS)},
    )
    seed_block: int = key(
        description="Seed block of this study's plans; distinct blocks give disjoint seeds "
        "(validation plans use seeds never used before).",
        minimum=0,
    )
    rule: str = key(
        "fixed",
        description="Channel-agreement rule for validation: fixed (tau = tau_fixed) or tau "
        "(amended: max(tau_fixed, r_BASE/B_BASE)).",
        enum=["fixed", "tau"],
    )
    amends: str | None = key(
        None,
        description="Study whose decision must exist before this study is preregistered (an "
        "amendment applies only to later runs).",
    )
    repeats: int = key(
        1,
        description="For kind repeats: how many times each condition is run on the same plan.",
        minimum=2,
    )
    workload: Workload | None = key(None, **workload_schema())
    # the study's own configuration search (its pick is its 'selected'): its ``search``
    # block over the top-level search's values, searching the study's workload
    search: SearchSettings | None = key(
        None,
        **study_search_schema(
            "A configuration search over this study's own workload; its pick is the study's "
            "'selected' configuration. Keys left out take the top-level search's values; the "
            "two seed blocks are required and must be new."
        ),
    )

    @property
    def multi_round(self) -> bool:
        """True when the study runs agent sessions rather than the paper's two rounds."""
        return self.workload is not None

    @property
    def baseline(self) -> str:
        """The first configuration is the denominator of every ratio in the study."""
        return self.configurations[0]

    @property
    def uses_selected(self) -> bool:
        return SELECTED in self.configurations

    def conditions(self) -> tuple[Condition, ...]:
        return tuple(Condition(c, v) for c in self.configurations for v in self.variants)


# A repeats study runs each condition this many times unless it sets ``repeats``; every
# other kind runs each condition once.
DEFAULT_REPEATS = 2


@dataclass(frozen=True)
class StudyConfig:
    """The whole validated study definition: one typed section per schema section, each
    section's keys (defaults, types, ranges) in its own model; the top-level keys are
    fields here and in :class:`MeasurementSettings`, placed by ``DOCUMENT_KEYS``."""

    source: str
    configurations: dict[str, Configuration] = key(
        description="Named compile-time configurations: decode bucket set and batch_size (KV "
        "slots default to batch_size). On backend vllm each is a vLLM configuration: buckets "
        "(CUDA-graph capture sizes, [] on the CPU build), batch_size (max_num_seqs), "
        "num_blocks, block_size, max_num_batched_tokens.",
        type="object",
        minProperties=1,
        additionalProperties=configuration_schema(),
    )
    studies: dict[str, Study] = key(
        description="The experiments (docs/DESIGN.md §10); each runs every configuration x "
        "variant on the same plans per replicate.",
        type="object",
        additionalProperties=object_schema(Study),
    )
    backend: str = key(
        EMULATED,
        description="Measurement backend for every run: emulated (virtual-time twin, "
        "default), emulated-http (the same engine behind a loopback HTTP server, driven by the "
        "real client), rbln (real RBLN NPU with vllm-rbln), vllm (a real vLLM server per run, "
        "its settings under vllm:; configurations are then vLLM configurations, "
        "docs/DESIGN.md §15).",
        mandatory=True,
        enum=list(BACKENDS),
    )
    study_seed: int = key(
        20260601,
        description="Root seed; every plan and run seed is derived from it with a stable hash.",
        mandatory=True,
        minimum=0,
    )
    replicates: int = key(
        3,
        description="Replicates (input plans) per study and N; the paper uses 3.",
        mandatory=True,
        minimum=1,
    )
    tool_table: str = key(
        "default",
        description="Tool-latency table: 'default' (TraceLab v0.0.2 published aggregate) or a "
        "path to a TraceLab summary.json (a relative path resolves against the directory the "
        "workflow runs in, the repository root, not against this file's directory).",
    )
    decision: DecisionCriteria = key(
        DecisionCriteria(),
        description="Preregistered decision criteria (paper II-D, IV, V-C).",
    )
    injection: InjectionSettings = key(
        InjectionSettings(),
        description="Prefill-injection study (paper III-C): background streaming sessions and "
        "injected prefills.",
    )
    search: SearchSettings = key(
        SearchSettings(), description="Configuration search (paper V-A; docs/DESIGN.md §12)."
    )
    emulated_http: EmulatedHttpSettings = key(
        EmulatedHttpSettings(), description="Settings of the emulated-http backend."
    )
    rbln: RblnSettings = key(
        RblnSettings(),
        description="Real-hardware settings (backend rbln). What is compiled is the model: "
        "section's (name, max_seq_len as rbln_max_seq_len, num_devices as rbln_num_devices).",
    )
    vllm: VllmStudySettings = key(
        VllmStudySettings(),
        description="Settings of the vllm backend (docs/DESIGN.md §15): what every run's server "
        "serves besides its configuration's knobs, and the knobs a study's own search tries "
        "beside its batch_sizes (max_num_seqs).",
    )
    # profile:, emulator_truth:, model: and calibration: (rearrival.config.calibration)
    measurement: MeasurementSettings = field(default_factory=MeasurementSettings)
    # witness: remote and signing: key (docs/DESIGN.md §8); both absent by default
    witness: str | None = key(
        None,
        description="A git remote the researcher does not rewrite (a hosting service, a "
        "registry, a shared bare repository) that holds every registration and ledger commit "
        "under refs/rearrival/. When set, the pipeline publishes each registration before its "
        "runs, a run refuses to start until the witness holds its registration commit, and "
        "the manifest records the witness and the ref. Absent by default: nothing is "
        "published.",
        **object_of(
            {
                "remote": {
                    "description": "A remote name of this repository or a git URL (any "
                    "transport git speaks).",
                    "type": "string",
                    "minLength": 1,
                }
            },
            required=["remote"],
        ),
    )
    signing_key: Path | None = key(
        None,
        description="SSH-sign registration and ledger commits (git's gpg.format ssh), so "
        "`rearrival audit --allowed-signers FILE` can tell who made them. Absent by default: "
        "commits are unsigned.",
        **object_of(
            {
                "key": {
                    "description": "git's user.signingkey: an SSH private key file, or a public "
                    "key whose private half is in ssh-agent; a relative path resolves against "
                    "the directory the workflow runs in (the repository root), like every path "
                    "of this file.",
                    "type": "string",
                    "minLength": 1,
                }
            },
            required=["key"],
        ),
    )
    # capacity: the `rearrival capacity` stage (docs/DESIGN.md §17); absent: not run
    capacity: CapacitySettings | None = key(
        None,
        description="The capacity stage (docs/DESIGN.md §17; rules/capacity.smk): `rearrival "
        "capacity` on a pool with these options, each key the option of the same name with "
        "its value as the command line takes it; keys left out take the command's defaults. "
        "Exploratory: absent, the stage is not run.",
    )
    # fleet: the preregistered study on a real fleet (docs/DESIGN.md §18); absent: not run
    fleet: FleetStudySettings | None = key(
        None,
        description="The preregistered open-traffic study on a real fleet (docs/DESIGN.md §18; "
        "rules/fleet.smk): vLLM servers behind vllm-router, every policy x the two KV pools, "
        "one fresh fleet per run. With a fleet section studies may be empty.",
    )

    def study(self, name: str) -> Study:
        if name not in self.studies:
            raise StudyConfigError(
                f"{self.source}: no study '{name}' under studies; "
                f"defined: {', '.join(self.studies)}"
            )
        return self.studies[name]


# The keys of the study definition in the order the schema lists them: (key, the model
# whose field it is, the field's name).
DOCUMENT_KEYS: tuple[tuple[str, type, str], ...] = (
    *((k, StudyConfig, k) for k in ("backend", "study_seed", "replicates", "tool_table")),
    *((k, StudyConfig, k) for k in ("configurations", "studies", "decision", "injection")),
    ("search", StudyConfig, "search"),
    ("fleet", StudyConfig, "fleet"),
    ("capacity", StudyConfig, "capacity"),
    ("witness", StudyConfig, "witness"),
    ("signing", StudyConfig, "signing_key"),
    *((k, StudyConfig, k) for k in ("emulated_http", "rbln", "vllm")),
    *((k, MeasurementSettings, k) for k in ("profile", "emulator_truth", "model", "calibration")),
)


def study_definition_schema() -> dict[str, Any]:
    """The JSON schema of config/config.yaml, drawn from the section models
    (rearrival.config.schema; ``rearrival study schema`` prints it and config/schema.yaml
    is that output)."""
    return document_schema(DOCUMENT_KEYS, (StudyConfig, MeasurementSettings))


@functools.cache
def _schema_validator() -> Any:
    return schema_validator(study_definition_schema())


def validate_against_schema(raw: Any, source: str, schema_path: Path | None = None) -> None:
    """Schema check only: types, ranges and key names, one line naming the first bad key.

    The schema is the one drawn from the section models (``schema_path``: a schema file
    instead). Nothing is filled in: a key left out takes its section model's default when
    the mapping is typed (:func:`study_config_from_mapping`)."""
    if schema_path is None:
        check_schema(_schema_validator(), raw, source, config_schema_path())
    else:
        schema = yamltext.safe_load(schema_path.read_text())
        check_schema(schema_validator(schema), raw, source, schema_path)


def schema_text() -> str:
    """What ``rearrival study schema`` prints and config/schema.yaml holds."""
    return schema_yaml(study_definition_schema())


def _study_search(
    name: str, raw: dict[str, Any], top_search: SearchSettings, workload: Workload | None
) -> SearchSettings | None:
    """A study's own search block over the top-level search's values, over its workload."""
    own = raw.get("search")
    if own is None:
        return None
    if SELECTED not in raw["configurations"]:
        raise StudyConfigError(
            f"studies.{name}.search is set but the study does not compare "
            f"'{SELECTED}'; add '{SELECTED}' to its configurations or drop its search"
        )
    return top_search.with_study_block(own, workload)


def _study(
    name: str,
    raw: dict[str, Any],
    configurations: dict[str, Configuration],
    where: str,
    context: tuple[SearchSettings, int],
) -> Study:
    """One study; ``context`` is the top-level search and the slot length its own search
    and workload build on."""
    for config_name in raw["configurations"]:
        if config_name != SELECTED and config_name not in configurations:
            raise StudyConfigError(
                f"{where}: studies.{name}.configurations names '{config_name}', which is not "
                f"under configurations; define it or use one of {', '.join(configurations)}"
            )
    kind = raw["kind"]
    workload = workload_from_mapping(name, raw.get("workload"), context[1], where)
    try:
        search = _study_search(name, raw, context[0], workload)
    except (StudyConfigError, SearchError) as exc:
        raise StudyConfigError(f"{where}: {exc}") from None
    return Study(
        name=name,
        kind=kind,
        description=str(raw.get("description", "")),
        n=tuple(int(n) for n in raw["n"]),
        configurations=tuple(raw["configurations"]),
        variants=tuple(raw["variants"]),
        seed_block=int(raw["seed_block"]),
        rule=str(raw.get("rule", Study.rule)),
        amends=raw.get("amends"),
        repeats=int(raw.get("repeats", DEFAULT_REPEATS)) if kind == "repeats" else 1,
        workload=workload,
        search=search,
    )


TOP_LEVEL = ("backend", "study_seed", "replicates", "tool_table")


def _sections(raw: dict[str, Any], source: str) -> dict[str, Any]:
    """The typed sections (keys left out take the models' defaults); a value the model
    refuses is one line naming the file and the key."""
    try:
        sections = {
            "decision": DecisionCriteria.from_mapping(raw.get("decision")),
            "injection": InjectionSettings(**_tuples(raw.get("injection") or {})),
            "search": SearchSettings.from_mapping(raw.get("search") or {}),
            "emulated_http": EmulatedHttpSettings(**(raw.get("emulated_http") or {})),
            "rbln": RblnSettings(**(raw.get("rbln") or {})),
            "vllm": VllmStudySettings(**_tuples(raw.get("vllm") or {})),
        }
    except (DecisionError, SearchError) as exc:
        raise StudyConfigError(f"{source}: {exc}") from None
    problem = sections["vllm"].problem()
    if problem is not None:
        raise StudyConfigError(f"{source}: {problem}")
    return sections


def vllm_start_problems(
    configurations: dict[str, Any], served: VllmStudySettings, profile: str
) -> list[str]:
    """What vLLM would refuse at its first server start (rearrival.model.vllm_knobs), found
    when the study is read, so before anything is registered (issue 38): the model's
    config.json (vllm.model), vllm.max_model_len against the model, every configuration's
    block size on the device (vllm.device, else the profile's) and pool against one
    sequence of the model length."""
    from rearrival.config.served_model import ServedModelError, load_served_model
    from rearrival.model.vllm_knobs import knob_problems, max_model_len_problem

    try:
        model = load_served_model(Path(served.model) if served.model else None)
    except ServedModelError as exc:
        return [f"vllm.model: {exc}"]
    longest = served.max_model_len or model.max_position_embeddings
    problem = max_model_len_problem(
        longest, model.max_position_embeddings, "vllm.max_model_len", model.model_max_length
    )
    if problem is not None:
        return [problem]
    device = served.device or _profile_device(profile)
    return [
        found
        for name, configuration in configurations.items()
        for found in knob_problems(
            num_blocks=configuration.num_blocks,
            block_size=configuration.block_size,
            max_model_len=longest,
            device=device,
            key=f"configurations.{name}",
        )
    ]


def _profile_device(profile: str) -> str | None:
    """The device a vLLM profile file was calibrated on (None: not readable here; the
    stages that read it say why)."""
    from rearrival.model.cost.vllm_profile import VllmProfileError, load_vllm_profile

    try:
        return load_vllm_profile(profile).device
    except (VllmProfileError, OSError):
        return None


def _tuples(values: dict[str, Any]) -> dict[str, Any]:
    return {
        key: tuple(value) if isinstance(value, list) else value for key, value in values.items()
    }


def study_config_from_mapping(raw: dict[str, Any], source: str) -> StudyConfig:
    """Build the typed study definition from a schema-valid mapping."""
    substrate = BACKEND_STAGES[raw.get("backend", StudyConfig.backend)].substrate
    configurations = {
        name: configuration_from_config(name, value, f"{source}: configurations", substrate)
        for name, value in raw["configurations"].items()
    }
    measurement = measurement_settings_from_mapping(raw, source)
    if substrate == "vllm" and measurement.profile in (CALIBRATED, PUBLISHED):
        raise StudyConfigError(
            f"{source}: profile: {measurement.profile}: backend vllm predicts with a vLLM "
            "profile file (no published vLLM constants exist, and the calibrate stage "
            "measures the RBLN model); give its path, e.g. profile: "
            "src/rearrival/data/profile_vllm_tiny_qwen3_cpu.yaml"
        )
    sections = _sections(raw, source)
    if substrate == "vllm":
        problems = vllm_start_problems(configurations, sections["vllm"], measurement.profile)
        if problems:
            raise StudyConfigError(f"{source}: {problems[0]}")
    # the longest session a workload may draw: the served model length on vLLM
    longest = sections["vllm"].max_model_len if substrate == "vllm" else None
    context = (sections["search"], longest or measurement.model.max_seq_len)
    studies = {
        name: _study(name, value, configurations, source, context)
        for name, value in raw["studies"].items()
    }
    blocks: dict[int, str] = {}
    for study in studies.values():
        if study.seed_block in blocks:
            raise StudyConfigError(
                f"{source}: studies.{study.name}.seed_block {study.seed_block} is also used by "
                f"{blocks[study.seed_block]}; give every study its own block so seeds differ"
            )
        blocks[study.seed_block] = study.name
        if study.amends is not None and study.amends not in studies:
            raise StudyConfigError(
                f"{source}: studies.{study.name}.amends names unknown study '{study.amends}'"
            )
    fleet = FleetStudySettings.from_mapping(raw.get("fleet"), source, configurations)
    if not studies and fleet is None:
        raise StudyConfigError(
            f"{source}: studies is empty and there is no fleet section, so nothing would "
            "run; define a study under studies or a fleet: section"
        )
    injection = sections["injection"]
    if injection.configuration not in configurations:
        raise StudyConfigError(
            f"{source}: injection.configuration names "
            f"'{injection.configuration}', which is not under "
            f"configurations; use one of {', '.join(configurations)}"
        )
    top = {key: raw[key] for key in TOP_LEVEL if key in raw}
    return StudyConfig(
        source=source,
        configurations=configurations,
        studies=studies,
        **top,
        **sections,
        measurement=measurement,
        witness=(raw.get("witness") or {}).get("remote"),
        signing_key=_signing_key(raw),
        capacity=CapacitySettings.from_mapping(raw.get("capacity"), source),
        fleet=fleet,
    )


def _signing_key(raw: dict[str, Any]) -> Path | None:
    """``signing.key`` as an absolute path; a relative one resolves against the current
    directory, as every path of the study definition does (the workflow runs from the
    repository root), so git, which commits from the repository, finds the same file."""
    key = (raw.get("signing") or {}).get("key")
    return None if key is None else Path(key).expanduser().absolute()


def yaml_problem(path: Path, exc: yaml.YAMLError) -> str:
    """A parser error as one line with the position to fix: PyYAML's own message spans
    several lines (a quoted excerpt and a caret), where every other error is one line."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if mark is None or problem is None:
        return f"{path}: not valid YAML ({' '.join(str(exc).split())}); fix its syntax"
    context = getattr(exc, "context", None)
    opened = getattr(exc, "context_mark", None)
    if context and opened is not None and opened.line != mark.line:
        problem += f", {context} that starts at line {opened.line + 1}"
    return (
        f"{path}: line {mark.line + 1}, column {mark.column + 1}: not valid YAML ({problem}); "
        "fix the syntax there"
    )


def read_study_definition(path: Path, schema_path: Path | None = None) -> dict[str, Any]:
    """The study definition file as a schema-valid mapping: the one reader, so every verb
    refuses an unreadable file, bad YAML or a bad key with the same line."""
    try:
        raw = yamltext.safe_load(path.read_text())
    except OSError as exc:
        raise StudyConfigError(
            f"{path}: cannot read the study definition ({exc.strerror}: looked for "
            f"{path.absolute()}); run from the repository root or pass --config PATH"
        ) from exc
    except yaml.YAMLError as exc:
        raise StudyConfigError(yaml_problem(path, exc)) from exc
    validate_against_schema(raw, str(path), schema_path)
    return raw


def load_study_config(path: str | Path, schema_path: Path | None = None) -> StudyConfig:
    """Read, schema-validate and cross-check a config file."""
    path = Path(path)
    return study_config_from_mapping(read_study_definition(path, schema_path), str(path))


# --- what a study's stages read besides the config ----------------------------------------


def tool_table_for(cfg: StudyConfig) -> ToolTable:
    """The configured tool-latency table; 'default' is the published TraceLab aggregate.

    A relative path resolves against the current directory, as every other path of the
    study definition and snakemake's own do (the workflow runs from the repository root),
    so ``rearrival tools build ... --out summary.json`` then ``tool_table: summary.json``
    works; a missing file is named with the directory it was looked for in.
    """
    if cfg.tool_table == "default":
        return default_tool_table()
    path = Path(cfg.tool_table)
    if not path.is_file():
        raise StudyConfigError(
            f"{cfg.source}: tool_table {cfg.tool_table!r} is not a file (looked for "
            f"{path.absolute()}; relative paths resolve against the current directory); "
            "give an existing summary.json (`rearrival tools build`), an absolute path or default"
        )
    return load_summary_json(path)


def read_selected(path: Path, substrate: str = "rbln") -> Configuration:
    """The configuration the search picked (results/search/selected.json, which carries
    the pick's ``id`` beside its knobs), named ``selected``: a configuration of the
    backend's ``substrate`` (the vLLM search's pick on backend vllm)."""
    if not path.exists():
        raise StageError(
            f"{path}: no search result; run the search stage first "
            "(snakemake results/search/selected.json)"
        )
    raw = json.loads(path.read_text())
    try:
        return configuration_in_record(raw, substrate, SELECTED)
    except ConfigurationError as exc:
        raise StageError(f"{path}: {exc}; re-run the search stage") from None


def resolve_configurations(
    cfg: StudyConfig, study: Study, selected_path: Path | None
) -> dict[str, Configuration]:
    """Every configuration a study compares, by name, the search's pick read from
    ``selected_path`` (predict, preregister, run and compile all resolve them here)."""
    resolved = {}
    for name in study.configurations:
        if name == SELECTED:
            if selected_path is None:
                raise SelectionMissingError(
                    f"study {study.name} compares the search's pick; give "
                    "the search's selected.json (results/search/selected.json)"
                )
            resolved[name] = read_selected(selected_path, BACKEND_STAGES[cfg.backend].substrate)
        else:
            resolved[name] = cfg.configurations[name]
    return resolved


# --- the definition as the workflow reads it --------------------------------------------


def _plain(value: Any) -> Any:
    """YAML-ready: tuples as lists, paths as text."""
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return str(value) if isinstance(value, Path) else value


def _section(model: Any, leave_out: tuple[str, ...] = ()) -> dict[str, Any]:
    """A section model's keys and values, the unset optional ones left out."""
    return {
        f.name: _plain(getattr(model, f.name))
        for f in fields(model)
        if f.name not in leave_out and getattr(model, f.name) is not None
    }


def _workload(workload: Workload) -> dict[str, Any]:
    if workload.trace is not None:
        t = workload.trace
        return {"kind": workload.kind, "path": t.path} | _section(
            t, ("path", "sha256", "max_seq_len")
        )
    return {"kind": workload.kind} | _section(workload.spec, ("tool_cap_s", "max_seq_len"))


def _study_definition(study: Study) -> dict[str, Any]:
    out = _section(study, ("name", "workload", "search"))
    if study.amends is None:
        out.pop("amends", None)
    if study.kind != "repeats":
        out.pop("repeats")
    if study.workload is not None:
        out["workload"] = _workload(study.workload)
    if study.search is not None:
        out["search"] = _plain(study.search.as_dict())
    return out


def effective_definition(cfg: StudyConfig) -> dict[str, Any]:
    """Every key of the study definition with the value it has, the defaults of the keys
    the file leaves out filled in (``rearrival study config`` prints it; loading it gives
    the same definition)."""
    measurement = cfg.measurement
    out: dict[str, Any] = {
        "backend": cfg.backend,
        "study_seed": cfg.study_seed,
        "replicates": cfg.replicates,
        "tool_table": cfg.tool_table,
        "profile": measurement.profile,
        "emulator_truth": measurement.emulator_truth,
        "configurations": {name: c.as_dict() for name, c in cfg.configurations.items()},
        "studies": {name: _study_definition(s) for name, s in cfg.studies.items()},
        "decision": _section(cfg.decision),
        "injection": _section(cfg.injection),
        "search": _plain(cfg.search.as_dict()),
        "emulated_http": _section(cfg.emulated_http),
        "rbln": _section(cfg.rbln),
        "vllm": _section(cfg.vllm),
        "model": _section(measurement.model),
        "calibration": _plain(measurement.calibration.as_dict()),
    }
    if cfg.witness is not None:
        out["witness"] = {"remote": cfg.witness}
    if cfg.signing_key is not None:
        out["signing"] = {"key": str(cfg.signing_key)}
    if cfg.capacity is not None:
        out["capacity"] = _section(cfg.capacity)
    if cfg.fleet is not None:
        out["fleet"] = cfg.fleet.as_dict()
    return out
