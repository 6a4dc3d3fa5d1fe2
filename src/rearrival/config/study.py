"""The study definition (docs/DESIGN.md §10): config/config.yaml as typed, checked objects.

The schema (config/schema.yaml) checks types; this module checks what a schema cannot
(bucket sets holding their batch_size, studies naming defined configurations) and expands
each study into its plans and conditions, so the Snakefile and every stage agree on one
list of files without repeating the rules.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

import jsonschema
import yaml
from snakemake.utils import validate

from rearrival.config.calibration import CalibrationConfig, calibration_config_from_mapping
from rearrival.errors import RearrivalError, StageError
from rearrival.model.plangen import (
    MultiRoundSpec,
    PlanGenError,
    derive_seed,
    generate_multi_round_plan,
)
from rearrival.model.plans import Plan
from rearrival.model.profile import bucket_set_problem
from rearrival.model.tools import ToolTable, default_tool_table, load_summary_json
from rearrival.model.trace_plans import TraceError, file_sha256
from rearrival.model.tracelab_import import plans_from_trace

SELECTED = "selected"  # the configuration chosen by the search stage


class StudyConfigError(RearrivalError):
    """The study definition is inconsistent; the message names the key and the fix."""


class SelectionMissingError(StageError):
    """A study compares the search's pick but no selected.json was given; its own type so
    the CLI can name its flag for it."""


@dataclass(frozen=True)
class Configuration:
    """A compile-time configuration: bucket set, batch size (max-num-seqs), KV slots."""

    name: str
    buckets: tuple[int, ...]
    batch_size: int
    slots: int

    def label(self) -> str:
        inner = ",".join(map(str, self.buckets))
        return f"{{{inner}}}/{self.batch_size}/{self.slots}"

    def as_dict(self) -> dict[str, Any]:
        return {"buckets": list(self.buckets), "batch_size": self.batch_size, "slots": self.slots}


def make_configuration(name: str, raw: dict[str, Any], where: str) -> Configuration:
    """Check the one rule every stage relies on: batch_size is the largest bucket."""
    buckets = tuple(sorted(int(b) for b in raw["buckets"]))
    batch_size = int(raw["batch_size"])
    problem = bucket_set_problem(buckets, batch_size)
    if problem is not None:
        raise StudyConfigError(f"{where}: {name}.buckets/{name}.batch_size: {problem}")
    slots = int(raw["slots"]) if "slots" in raw else batch_size  # docs/DESIGN.md §1
    return Configuration(name, buckets, batch_size, slots)


@dataclass(frozen=True)
class Condition:
    """One configuration under one workload variant; runs on every plan of a replicate."""

    configuration: str
    variant: str

    @property
    def label(self) -> str:
        return f"{self.configuration}-{self.variant}"


@dataclass(frozen=True)
class TraceSource:
    """A real agent trace a study samples its sessions from (TraceLab round trace)."""

    path: str
    sha256: str
    token_scale: float
    on_overflow: str
    max_context: int


@dataclass(frozen=True)
class Workload:
    """A study's input plans when they are not the paper's two-round sessions: seeded
    agent sessions (``kind`` multi_round, drawn by ``spec``) or sessions sampled from a
    real trace (``kind`` trace, ``trace``)."""

    kind: str
    spec: MultiRoundSpec | None = None
    trace: TraceSource | None = None

    def as_dict(self) -> dict[str, Any]:
        """What the study registers: the kind and every setting (for a trace, its sha256,
        so an edited trace file is a changed design)."""
        if self.trace is not None:
            t = self.trace
            return {
                "kind": self.kind,
                "path": t.path,
                "sha256": t.sha256,
                "token_scale": t.token_scale,
                "on_overflow": t.on_overflow,
            }
        return {"kind": self.kind, **self.spec.as_dict()}

    def plan(
        self, n: int, *, study_seed: int, replicate: int, block: int, tool_table: ToolTable
    ) -> Plan:
        """The plan of N sessions for one (replicate, block), seeded like every plan."""
        if self.spec is not None:
            return generate_multi_round_plan(
                n,
                study_seed=study_seed,
                replicate=replicate,
                block=block,
                tool_table=tool_table,
                spec=self.spec,
            )
        return _trace_plan(self.trace, n, study_seed, replicate, block)


def _trace_plan(source: TraceSource, n: int, study_seed: int, replicate: int, block: int) -> Plan:
    """N sessions sampled from the trace with a seed from (study seed, replicate, N,
    block); a trace that cannot give N whole sessions is refused, never shrunk."""
    seed = derive_seed(study_seed, replicate, n, block, "trace-sessions")
    try:
        result = plans_from_trace(
            source.path,
            sessions=n,
            seed=seed,
            max_context=source.max_context,
            on_overflow=source.on_overflow,
            token_scale=source.token_scale,
        )
    except TraceError as exc:
        raise StudyConfigError(f"workload.path {source.path}: {exc}") from None
    plan = result.plan
    if plan.n != n:
        raise StudyConfigError(
            f"workload.path {source.path}: {n - plan.n} of the {n} sampled sessions do not "
            f"fit the maximum sequence length {source.max_context} even in their first "
            "round; lower the study's n or set workload.token_scale"
        )
    meta = replace(plan.meta, study_seed=study_seed, replicate=replicate, block=block, n=n)
    return replace(plan, meta=meta)


@dataclass(frozen=True)
class Study:
    name: str
    kind: str
    description: str
    n: tuple[int, ...]
    configurations: tuple[str, ...]
    variants: tuple[str, ...]
    seed_block: int
    rule: str = "fixed"
    amends: str | None = None
    repeats: int = 1
    workload: Workload | None = None
    # the study's own configuration search (its pick is its 'selected'): the raw
    # ``search`` block over the top-level search's values, typed by SearchSettings; left
    # out of the hash (a mapping has none), so studies stay usable as dict keys
    search: Mapping[str, Any] | None = field(default=None, hash=False)

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


@dataclass(frozen=True)
class DecisionSettings:
    """The ``decision`` section: the criteria a study registers (paper II-D, IV, V-C)."""

    confirmatory_n: tuple[int, ...]
    exploratory_n: tuple[int, ...]
    tau_fixed: float
    error_tolerance: float
    equivalence_band: tuple[float, float]
    saturation_width: float
    bootstrap_resamples: int


@dataclass(frozen=True)
class InjectionSettings:
    """The ``injection`` section: the prefill-injection study (paper III-C)."""

    background_sessions: int
    background_gen_tokens: int
    injected_prompt_tokens: tuple[int, ...]
    inject_at_s: float
    configuration: str


@dataclass(frozen=True)
class EmulatedHttpSettings:
    """The ``emulated_http`` section: wall seconds per emulated second."""

    time_scale: float


@dataclass(frozen=True)
class RblnSettings:
    """The ``rbln`` section: what real hardware compiles and where artifacts go."""

    model: str
    max_seq_len: int
    num_devices: int
    artifacts: str
    site_packages: str | None


@dataclass(frozen=True)
class StudyConfig:
    """The whole validated study definition.

    Every section is typed; ``search`` stays the schema-filled mapping that
    :class:`rearrival.search.scoring.SearchSettings` types and checks (the search owns its keys).
    """

    source: str
    backend: str
    study_seed: int
    replicates: int
    tool_table: str
    configurations: dict[str, Configuration]
    studies: dict[str, Study]
    decision: DecisionSettings
    injection: InjectionSettings
    search: Mapping[str, Any]
    emulated_http: EmulatedHttpSettings
    rbln: RblnSettings
    # profile:, emulator_truth:, model: and calibration: (typed in rearrival.config.calibration)
    measurement: CalibrationConfig = field(default_factory=CalibrationConfig)
    # witness: remote and signing: key (docs/DESIGN.md §8); both absent by default
    witness: str | None = None
    signing_key: Path | None = None

    def study(self, name: str) -> Study:
        if name not in self.studies:
            raise StudyConfigError(
                f"{self.source}: no study '{name}' under studies; "
                f"defined: {', '.join(self.studies)}"
            )
        return self.studies[name]


@cache
def schema_defaults() -> dict[str, Any]:
    """Every documented default, read from config/schema.yaml: the one place defaults
    live. Top-level keys map to their default, sections to {key: default}, and
    ``studies`` to the per-study defaults."""
    schema = yaml.safe_load(config_schema_path().read_text())
    props = schema["properties"]
    out: dict[str, Any] = {key: spec["default"] for key, spec in props.items() if "default" in spec}
    for key, spec in props.items():
        if spec.get("type") == "object" and "properties" in spec:
            out[key] = {name: inner.get("default") for name, inner in spec["properties"].items()}
    study_props = props["studies"]["additionalProperties"]["properties"]
    out["studies"] = {
        name: inner["default"] for name, inner in study_props.items() if "default" in inner
    }
    return out


def _filled(raw: dict[str, Any], section: str) -> dict[str, Any]:
    """A section's values over the schema defaults (a key may be left out of the YAML)."""
    return schema_defaults()[section] | (raw.get(section) or {})


def _tuples(values: dict[str, Any]) -> dict[str, Any]:
    return {
        key: tuple(value) if isinstance(value, list) else value for key, value in values.items()
    }


TRACE_KEYS = ("path", "token_scale", "on_overflow")


def _workload(
    name: str, raw: dict[str, Any] | None, max_seq_len: int, where: str
) -> Workload | None:
    """The study's workload block: a generator spec checked against the slot length, or a
    trace file (hashed, so an edited trace is a changed design)."""
    if raw is None:
        return None
    settings = {
        key: tuple(value) if isinstance(value, list) else value for key, value in raw.items()
    }
    kind = settings.pop("kind")
    key_of = f"{where}: studies.{name}.workload"
    foreign = [k for k in settings if (k in TRACE_KEYS) != (kind == "trace")]
    if foreign:
        raise StudyConfigError(
            f"{key_of}.{foreign[0]}: not a key of kind {kind}; a multi_round workload takes "
            "rounds, first_prompt_tokens, new_tokens, gen_tokens, start_spread_s, a trace "
            f"workload {', '.join(TRACE_KEYS)}"
        )
    if kind == "trace":
        return Workload(kind, trace=_trace_source(settings, max_seq_len, key_of))
    try:
        spec = MultiRoundSpec(**settings, max_context_tokens=max_seq_len)
    except PlanGenError as exc:
        key = exc.argument or "workload"
        raise StudyConfigError(f"{where}: studies.{name}.workload.{key}: {exc}") from None
    return Workload(kind, spec=spec)


def _trace_source(settings: dict[str, Any], max_seq_len: int, key_of: str) -> TraceSource:
    if "path" not in settings:
        raise StudyConfigError(f"{key_of}.path: a trace workload names its trace file")
    path = Path(settings["path"])
    if not path.is_file():
        raise StudyConfigError(
            f"{key_of}.path: no such file {path}; give a TraceLab round trace (.jsonl[.gz])"
        )
    return TraceSource(
        path=str(path),
        sha256=file_sha256(path),
        token_scale=float(settings.get("token_scale", 1.0)),
        on_overflow=str(settings.get("on_overflow", "truncate")),
        max_context=max_seq_len,
    )


def _study_search(
    name: str, raw: dict[str, Any], top_search: Mapping[str, Any], where: str
) -> Mapping[str, Any] | None:
    """A study's own search block over the top-level search's values; a new N set keeps
    only the restricted N sets inside it (as ``rearrival search --n`` does)."""
    own = raw.get("search")
    if own is None:
        return None
    if SELECTED not in raw["configurations"]:
        raise StudyConfigError(
            f"{where}: studies.{name}.search is set but the study does not compare "
            f"'{SELECTED}'; add '{SELECTED}' to its configurations or drop its search"
        )
    merged = dict(top_search) | own
    if "n" in own and "restricted_n" not in own:
        merged["restricted_n"] = [s for s in top_search["restricted_n"] if set(s) <= set(own["n"])]
    return MappingProxyType(merged)


def _study(
    name: str,
    raw: dict[str, Any],
    configurations: dict[str, Configuration],
    where: str,
    context: tuple[Mapping[str, Any], int] = (MappingProxyType({}), 8192),
) -> Study:
    """One study; ``context`` is the top-level search values and the slot length its
    own search and workload build on."""
    for config_name in raw["configurations"]:
        if config_name != SELECTED and config_name not in configurations:
            raise StudyConfigError(
                f"{where}: studies.{name}.configurations names '{config_name}', which is not "
                f"under configurations; define it or use one of {', '.join(configurations)}"
            )
    values = schema_defaults()["studies"] | {"description": "", "amends": None} | raw
    kind = values["kind"]
    return Study(
        name=name,
        kind=kind,
        description=str(values["description"]),
        n=tuple(int(n) for n in values["n"]),
        configurations=tuple(values["configurations"]),
        variants=tuple(values["variants"]),
        seed_block=int(values["seed_block"]),
        rule=str(values["rule"]),
        amends=values["amends"],
        repeats=int(values["repeats"]) if kind == "repeats" else 1,
        workload=_workload(name, raw.get("workload"), context[1], where),
        search=_study_search(name, raw, context[0], where),
    )


def study_config_from_mapping(raw: dict[str, Any], source: str) -> StudyConfig:
    """Build the typed study definition from a schema-valid mapping."""
    configurations = {
        name: make_configuration(name, value, f"{source}: configurations")
        for name, value in raw["configurations"].items()
    }
    measurement = calibration_config_from_mapping(raw, source)
    context = (_filled(raw, "search"), measurement.model.max_seq_len)
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
    top = schema_defaults() | raw
    injection = InjectionSettings(**_tuples(_filled(raw, "injection")))
    if injection.configuration not in configurations:
        raise StudyConfigError(
            f"{source}: injection.configuration names "
            f"'{injection.configuration}', which is not under "
            f"configurations; use one of {', '.join(configurations)}"
        )
    return StudyConfig(
        source=source,
        backend=str(top["backend"]),
        study_seed=int(top["study_seed"]),
        replicates=int(top["replicates"]),
        tool_table=str(top["tool_table"]),
        configurations=configurations,
        studies=studies,
        decision=DecisionSettings(**_tuples(_filled(raw, "decision"))),
        injection=injection,
        search=MappingProxyType(_filled(raw, "search")),
        emulated_http=EmulatedHttpSettings(**_filled(raw, "emulated_http")),
        rbln=RblnSettings(**_filled(raw, "rbln")),
        measurement=measurement,
        witness=(raw.get("witness") or {}).get("remote"),
        signing_key=_signing_key(raw, source),
    )


def _signing_key(raw: dict[str, Any], source: str) -> Path | None:
    """``signing.key`` as a path, relative ones against the config file's directory."""
    key = (raw.get("signing") or {}).get("key")
    if key is None:
        return None
    path = Path(key).expanduser()
    return path if path.is_absolute() else Path(source).parent / path


def config_schema_path() -> Path:
    """The schema shipped beside the study definition (config/schema.yaml)."""
    return Path(__file__).resolve().parents[3] / "config" / "schema.yaml"


def validate_against_schema(raw: Any, source: str, schema_path: Path) -> None:
    """Schema check with the failing key path in the message, then fill defaults.

    jsonschema's best match names the key (e.g. ``$.studies.grid.n[0]``); snakemake's own
    validate then fills the documented defaults exactly as the Snakefile does.
    """
    schema = yaml.safe_load(schema_path.read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(raw))
    if error is not None:
        raise StudyConfigError(
            f"{source}: key {error.json_path}: {error.message}; "
            f"see {schema_path} for allowed values"
        )
    validate(raw, str(schema_path))


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


def load_study_config(path: str | Path, schema_path: Path | None = None) -> StudyConfig:
    """Read, schema-validate and cross-check a config file."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise StudyConfigError(
            f"{path}: cannot read the study definition ({exc.strerror}: looked for "
            f"{path.absolute()}); run from the repository root or pass --config PATH"
        ) from exc
    except yaml.YAMLError as exc:
        raise StudyConfigError(yaml_problem(path, exc)) from exc
    validate_against_schema(raw, str(path), schema_path or config_schema_path())
    return study_config_from_mapping(raw, str(path))


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


def read_selected(path: Path) -> Configuration:
    """The configuration the search picked (results/search/selected.json)."""
    if not path.exists():
        raise StageError(
            f"{path}: no search result; run the search stage first "
            "(snakemake results/search/selected.json)"
        )
    raw = json.loads(path.read_text())
    buckets = tuple(int(b) for b in raw["buckets"])
    batch = int(raw["batch_size"])
    return Configuration(SELECTED, buckets, batch, int(raw.get("slots", batch)))


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
            resolved[name] = read_selected(selected_path)
        else:
            resolved[name] = cfg.configurations[name]
    return resolved
