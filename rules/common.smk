# Helpers shared by the workflow files. The study definition as typed objects, one helper
# per path pattern and the file lists derived from them, the options that pass declared
# files to commands, and the digest of the config values each job depends on (a param,
# so an edit reruns exactly the jobs it affects; the job's verb checks it). No science
# here: rearrival.config.study reads and expands the definition, rearrival.workflow.params
# says which values each stage uses, rearrival.vocabulary.BACKEND_STAGES what runs on
# the configured backend.
import os
import shlex
from pathlib import Path

from rearrival.config.calibration import CALIBRATED, PUBLISHED, exploratory_profile
from rearrival.config.study import load_study_config
from rearrival.vocabulary import BACKEND_STAGES, VLLM
from rearrival.workflow.cluster import check_slurm_site, device_gres
from rearrival.workflow.configfile import (
    refuse_command_line_values,
    refusing_in_one_line,
    study_config_file,
)
from rearrival.workflow.params import stage_key, workflow_params
from rearrival.workflow.preregister import refuse_changed_designs

RESULTS = "results"

# The DAG is built from the one file every job reads, loaded as the verbs load it (one
# schema check, the models' defaults); a bad key or value is one line and exit code 2.
with refusing_in_one_line():
    CONFIG_FILE = study_config_file(
        workflow.configfiles,
        workflow.overwrite_configfiles,
        workflow.config_settings.replace_workflow_config,
    )
    refuse_command_line_values(workflow.config_settings.config, CONFIG_FILE)
    STUDY = load_study_config(CONFIG_FILE)
    # A registered study's design and criteria never change: refused here, before any job.
    refuse_changed_designs(STUDY, Path("."), Path(RESULTS) / "runs")
    PARAMS = workflow_params(STUDY)

STUDY_NAMES = list(STUDY.studies)
# What the configured backend runs: the real device, compile stages, the injection.
BACKEND = BACKEND_STAGES[STUDY.backend]
# The profile of the exploratory second evaluation (the {profile} wildcard's one value).
EXPLORATORY_PROFILE = exploratory_profile(STUDY.measurement.profile)
# On vLLM (docs/DESIGN.md §15) the studies are judged by the vllm rule set with the vLLM
# profile their profile: names; the paper's RBLN stages (calibration, Table XI's fixed
# arrivals, the exploratory evaluation, the top-level search, the paper's report) are not
# run there, the vLLM report section (rules/vllm_report.smk) is.
ON_VLLM = BACKEND.substrate == VLLM
# Two-round validation studies: Table XI's fixed-arrival simulator runs on their runs.
FIXED_ARRIVAL_STUDIES = [
    name
    for name, s in STUDY.studies.items()
    if s.kind == "validation" and not s.multi_round and not ON_VLLM
]

# Site settings for profiles/slurm come from the environment (rearrival.workflow.cluster): the
# generic resource a real-device job holds on the cluster, '' for emulated backends.
DEVICE_GRES = device_gres(os.environ, real_device=BACKEND.device)


onstart:
    # Before the first sbatch: no Slurm, controller down or a missing partition is one
    # clear line, not one failed submission per job.
    if workflow.executor_plugin.cli_prefix == "slurm":
        check_slurm_site(os.environ, real_device=BACKEND.gres_required)


def values(stage):
    """Params function: the digest of the config values ``stage`` depends on, for the
    job's study (or the whole study definition when the job has no study)."""
    return lambda wildcards: PARAMS[stage_key(stage, wildcards.get("study"))]


def search_values(wildcards):
    """The values a search job depends on: the top-level search's or its study's."""
    return PARAMS[stage_key("search", search_study(wildcards.search))]


# One helper per path pattern. Rules declare their outputs with these and chain through
# `rules.<rule>.output.<name>`; the helpers fill a study in for the lists below. Called
# without arguments they return the wildcard pattern. The exploratory evaluation's
# tables have the same layout under results/exploratory/<profile>/ (``root``).


def exploratory_root(profile="{profile}"):
    return f"{RESULTS}/exploratory/{profile}"


def plans_path(study="{study}"):
    return f"{RESULTS}/plans/{study}"


def predictions_path(study="{study}", root=RESULTS, table=""):
    return f"{root}/predictions/{study}{table}.parquet"


def prereg_path(study="{study}"):
    return f"{RESULTS}/prereg/{study}.json"


def compile_path(study="{study}"):
    return f"{RESULTS}/compile/{study}.json"


def run_path(study="{study}", n="{n}", rep="{rep}"):
    return f"{RESULTS}/runs/{study}/n{n}_r{rep}"


def ledger_path(study="{study}"):
    return f"{RESULTS}/ledger/{study}.json"


def channels_path(study="{study}", root=RESULTS):
    return f"{root}/channels/{study}.parquet"


def decisions_path(study="{study}", root=RESULTS):
    return f"{root}/decisions/{study}.csv"


def fixed_arrivals_path(study="{study}", root=RESULTS):
    return f"{root}/fixed_arrivals/{study}.parquet"


def calibration_path(name):
    return f"{RESULTS}/calibration/{name}"


def injection_path():
    return f"{RESULTS}/injection/gaps.parquet"


# A search's results: the top-level one under results/search/, a study's own (its
# studies.<study>.search block) under results/study_search/<study>/.
TOP_SEARCH = "search"


def search_name(study=None):
    """The {search} wildcard's value of the top-level search or a study's own."""
    return TOP_SEARCH if study is None else f"study_search/{study}"


def search_study(search):
    """The study whose own search ``search`` is (None: the top-level search)."""
    return None if search == TOP_SEARCH else search.removeprefix("study_search/")


def search_path(name, search="{search}"):
    return f"{RESULTS}/{search}/{name}"


def shard_name(shard="{shard}"):
    return f"shards/shard_{shard}.parquet"


SEARCHES = [search_name()] + [
    search_name(name) for name, s in STUDY.studies.items() if s.search is not None
]


def search_settings(search):
    study = search_study(search)
    return STUDY.search if study is None else STUDY.study(study).search


def search_shards(wildcards):
    """The shard files of one search."""
    shards = search_settings(wildcards.search).shards
    return [search_path(shard_name(k), wildcards.search) for k in range(shards)]


def search_count(wildcards):
    """The shard count of one search."""
    return search_settings(wildcards.search).shards


def search_option(wildcards):
    """`--study NAME` for a study's own search, nothing for the top-level one."""
    study = search_study(wildcards.search)
    return "" if study is None else f"--study '{study}'"


def run_dirs(study):
    """The run directories (one per N and replicate) of a study."""
    s = STUDY.study(study)
    return [run_path(study, n, rep) for n in s.n for rep in range(STUDY.replicates)]


def replicate_run_dirs(wildcards):
    """The run directories a study's channels stage reads."""
    return run_dirs(wildcards.study)


def prereg_inputs(wildcards):
    """A study whose configurations include the search's pick, or that amends another
    study, is registered only after that result exists (amendments apply to later runs)."""
    s = STUDY.study(wildcards.study)
    inputs = {"predictions": rules.predict.output.predictions}
    if s.amends:
        inputs["amended"] = decisions_path(s.amends)
    return inputs


def selected_path(study):
    """The search pick a study compares as 'selected': its own search's (a study with a
    search block, e.g. over agent sessions), else the top-level search's."""
    own = STUDY.study(study).search is not None
    return search_path("selected.json", search_name(study if own else None))


def selected_input(wildcards):
    """Studies that compare the search's pick need its result before predicting."""
    study = STUDY.study(wildcards.study)
    return selected_path(study.name) if study.uses_selected else []


def amended_option(wildcards, input):
    """The CLI option naming the decision table an amending study waits for."""
    return f"--amended '{input.amended}'" if "amended" in input.keys() else ""


def selected_option(wildcards, input):
    """The CLI option naming the declared search result (empty when not used)."""
    return f"--selected '{input.selected}'" if input.selected else ""


def profile_option(wildcards, input):
    """The CLI option naming the declared profile file (empty for the published one)."""
    return f"--profile '{input.profile}'" if input.profile else ""


def prereg_option(wildcards, input):
    """The registered decision reads the prereg record; the exploratory one does not."""
    return f"--prereg '{input.prereg}'" if "prereg" in input.keys() else "--exploratory"


def compile_inputs(wildcards):
    """On a backend that compiles, every configuration of the study is compiled first."""
    return [rules.compile.output.record] if BACKEND.compiles else []


def compiled_option(wildcards, input):
    """The compile record a hardware run or the calibration reads its artifacts from."""
    return f"--compiled '{input.compiled}'" if input.compiled else ""


def profile_file(name):
    """The file a ``profile:`` value names: the calibrate stage's profile for
    `calibrated`, the named file for a path, none for `published`."""
    if name == PUBLISHED:
        return []
    if name == CALIBRATED:
        return rules.calibrate.output.profile
    return name


def profile_input(wildcards):
    """The profile file predictions, channel A, the prereg and the search read."""
    return profile_file(STUDY.measurement.profile)


def exploratory_profile_input(wildcards):
    """The profile file of the exploratory evaluation's stages."""
    return profile_file(EXPLORATORY_PROFILE)


def calibration_compile_input(wildcards):
    """On a backend that compiles, the calibration artifacts are compiled first."""
    return rules.calibrate_compile.output.record if BACKEND.compiles else []


def exploratory_tables(name):
    """The exploratory evaluation's tables of one study, as the report reads them."""
    root = exploratory_root(EXPLORATORY_PROFILE)
    tables = [
        predictions_path(name, root),
        channels_path(name, root),
        decisions_path(name, root),
    ]
    if name in FIXED_ARRIVAL_STUDIES:
        tables.append(fixed_arrivals_path(name, root))
    return tables


def report_inputs(wildcards):
    """Every file the report reads, so Snakemake (and a storage plugin) can track and
    stage them; the report reads nothing else (rearrival.report.results)."""
    inputs = {
        "decisions": [decisions_path(name) for name in STUDY_NAMES],
        "channels": [channels_path(name) for name in STUDY_NAMES],
        "predictions": [predictions_path(name) for name in STUDY_NAMES],
        "requests": [predictions_path(name, table=".requests") for name in STUDY_NAMES],
        "evictions": [predictions_path(name, table=".evictions") for name in STUDY_NAMES],
        "fixed_arrivals": [fixed_arrivals_path(name) for name in FIXED_ARRIVAL_STUDIES],
        "prereg": [prereg_path(name) for name in STUDY_NAMES],
        "runs": [d for name in STUDY_NAMES for d in run_dirs(name)],
        "exploratory": [path for name in STUDY_NAMES for path in exploratory_tables(name)],
        "search": [
            search_path(name, search)
            for search in SEARCHES
            for name in ("summary.json", "scores.parquet", "selected.json")
        ],
        "calibration": [
            rules.calibrate.output.profile,
            rules.calibrate.output.decode,
            rules.calibrate.output.prefill,
        ],
        "profile": profile_input(wildcards),
        "capacity": capacity_targets(),
    }
    if BACKEND.injection:
        inputs["injection"] = [rules.injection.output.gaps]
    if BACKEND.compiles:
        inputs["compile"] = [compile_path(name) for name in STUDY_NAMES]
    return inputs


def report_files(wildcards, input):
    """The report command's arguments: every declared results file (the profile file,
    which may lie outside results/, is its --profile)."""
    named = [path for name, paths in input.items() if name != "profile" for path in paths]
    return " ".join(f"'{path}'" for path in named)


def vllm_tables_path(study="{study}", table="{table}"):
    return f"{RESULTS}/vllm/{study}.{table}.parquet"


def vllm_agreement_path(study="{study}"):
    return f"{RESULTS}/vllm/agreement/{study}"


def vllm_report_path():
    return "reports/vllm.md"


def vllm_section_path():
    """The vLLM studies' section of the HTML report (rearrival.report.sections)."""
    return "reports/vllm/section.json"


def vllm_figures_path():
    return "reports/vllm/figures"


def engine_section_files(wildcards=None):
    """The section files reports/report.html shows on a real engine, in order: one per
    kind of study the definition holds (a further kind adds its section file here)."""
    return [
        *([vllm_section_path()] if STUDY_NAMES else []),
        *([fleet_section_path()] if FLEET is not None else []),
    ]


def engine_report_path():
    return "reports/report.html"


def capacity_path():
    """The capacity stage's folder (rules/capacity.smk)."""
    return f"{RESULTS}/capacity"


def capacity_targets():
    """The capacity folder when the study definition has a capacity: section, else none."""
    return [] if STUDY.capacity is None else [capacity_path()]


def vllm_search_axes(wildcards):
    """The vLLM search's options from the vllm section: the configurations' block size,
    the study's batch sizes as max_num_seqs, the section's pools and budgets, and the
    study's baseline as the baseline every score divides by."""
    study = STUDY.study(search_study(wildcards.search))
    baseline = STUDY.configurations[study.baseline]
    axes = {
        "--block-sizes": [baseline.block_size],
        "--max-num-seqs": study.search.batch_sizes,
        "--num-blocks": STUDY.vllm.search_num_blocks,
        "--max-num-batched-tokens": STUDY.vllm.search_max_num_batched_tokens,
    }
    given = [f"{flag} {','.join(map(str, v))}" for flag, v in axes.items() if v]
    return " ".join([*given, f"--baseline {baseline.id}"])


def vllm_report_files(wildcards, input):
    """The vllm-report options: each study with its declared files, in the same order."""
    options = []
    for k, name in enumerate(STUDY_NAMES):
        options += [f"--study '{name}'"]
        for key in ("decisions", "prereg", "runs", "rounds", "requests", "agreement"):
            options.append(f"--{key} '{getattr(input, key)[k]}'")
    return " ".join(options)


def final_targets():
    """Every decision, the search, the report, and the injection where its backend has a
    driver (elsewhere it is left out, never run on another backend); on vLLM every
    decision, the vLLM report section, the fleet study's report when the definition has a
    fleet: section, and the HTML report composed of their sections (when there is one)."""
    if ON_VLLM:
        return [
            *[decisions_path(name) for name in STUDY_NAMES],
            *([vllm_report_path()] if STUDY_NAMES else []),
            *([engine_report_path()] if engine_section_files() else []),
            *capacity_targets(),
            *fleet_targets(),
        ]
    return [
        rules.calibrate.output.profile,
        *[decisions_path(name) for name in STUDY_NAMES],
        search_path("summary.json", search_name()),
        *([rules.injection.output.gaps] if BACKEND.injection else []),
        rules.report.output.html,
        *capacity_targets(),
    ]


# --- capacity (rules/capacity.smk) ---


def capacity_pool(wildcards):
    return STUDY.capacity.pool


def capacity_profile(wildcards):
    return [] if STUDY.capacity.profile is None else [STUDY.capacity.profile]


def capacity_profile_option(wildcards, input):
    return f"--profile {shlex.quote(input.profile[0])}" if input.profile else ""


# --- the study on a real fleet (rules/fleet.smk) ---

FLEET = STUDY.fleet
FLEET_ROOT = f"{RESULTS}/fleet"


def fleet_plans_path():
    return f"{FLEET_ROOT}/plans"


def fleet_prereg_path():
    """The registration record (results/fleet/prereg/<study>.json: register's own name)."""
    return f"{FLEET_ROOT}/prereg/{FLEET.study}.json"


def fleet_run_path(condition="{condition}", rep="{rep}"):
    """One run's replicate folder; the run itself is its <condition> subfolder."""
    return f"{RESULTS}/runs/{FLEET.study}/{condition}_r{rep}"


def fleet_ledger_path():
    return f"{FLEET_ROOT}/ledger.json"


def fleet_compare_path(condition="{condition}", rep="{rep}"):
    return f"{FLEET_ROOT}/compare/{condition}_r{rep}"


def fleet_decisions_path():
    return f"{FLEET_ROOT}/decisions"


def fleet_report_path():
    return "reports/fleet.md"


def fleet_section_path():
    """The fleet study's section of the HTML report (rearrival.report.sections)."""
    return "reports/fleet/section.json"


def fleet_figures_path():
    return "reports/fleet/figures"


def fleet_keys():
    """(r<rep>/<condition>, condition, rep) of every run of the fleet study."""
    return [
        (f"r{rep}/{c.label}", c.label, rep)
        for rep in range(FLEET.replicates)
        for c in FLEET.conditions()
    ]


def fleet_run_dirs(wildcards=None):
    return [fleet_run_path(label, rep) for _, label, rep in fleet_keys()]


def fleet_compare_dirs(wildcards=None):
    return [fleet_compare_path(label, rep) for _, label, rep in fleet_keys()]


def fleet_run_options(wildcards, input):
    """--run FOLDER for every run of the fleet study (the report names what served it)."""
    return " ".join(f"--run {shlex.quote(path)}" for path in input.runs)


def fleet_targets():
    """The fleet report and decisions when the definition has a fleet: section."""
    return [] if FLEET is None else [fleet_decisions_path(), fleet_report_path()]
