# Helpers shared by the workflow files. The study definition as typed objects, one helper
# per path pattern and the file lists derived from them, the options that pass declared
# files to commands, and the config values each rule depends on (as params, so an edit
# reruns exactly the jobs it affects). No science here: rearrival.config.study expands
# the config and rearrival.workflow.params says which values each stage uses.
import os
from pathlib import Path

from rearrival.workflow.cluster import check_slurm_site, device_gres
from rearrival.workflow.configfile import study_config_file
from rearrival.workflow.params import workflow_params
from rearrival.workflow.preregister import refuse_changed_designs
from rearrival.workflow.run import INJECTION_BACKEND
from rearrival.config.calibration import CALIBRATED, PUBLISHED
from rearrival.config.study import study_config_from_mapping
from rearrival.vocabulary import RBLN

CONFIG_FILE = study_config_file(
    workflow.configfiles,
    workflow.overwrite_configfiles,
    workflow.config_settings.replace_workflow_config,
)
STUDY = study_config_from_mapping(config, CONFIG_FILE)
STUDY_NAMES = list(STUDY.studies)
RESULTS = "results"

# A registered study's design and criteria never change: refused here, before any job.
refuse_changed_designs(STUDY, Path("."), Path(RESULTS) / "runs")

PARAMS = workflow_params(STUDY, config)

# Site settings for profiles/slurm come from the environment (rearrival.workflow.cluster): the
# generic resource a real-device job holds on the cluster, '' for emulated backends.
REAL_DEVICE = STUDY.backend == RBLN
DEVICE_GRES = device_gres(os.environ, real_device=REAL_DEVICE)


onstart:
    # Before the first sbatch: no Slurm, controller down or a missing partition is one
    # clear line, not one failed submission per job.
    if workflow.executor_plugin.cli_prefix == "slurm":
        check_slurm_site(os.environ, real_device=REAL_DEVICE)


def values(stage):
    """Params function: the canonical JSON of the config values ``stage`` depends on.
    A function, so Snakemake never reads braces in the values as wildcards."""
    return lambda wildcards: PARAMS[f"{stage}:{wildcards.study}"]


def stage_values(stage):
    """The same for a stage without a study wildcard (search, injection, report)."""
    return lambda wildcards: PARAMS[stage]


# One helper per path pattern. Rules declare their outputs with these and chain through
# `rules.<rule>.output.<name>`; the helpers fill a study in for the lists below. Called
# without arguments they return the wildcard pattern.


def plans_path(study="{study}"):
    return f"{RESULTS}/plans/{study}"


def predictions_path(study="{study}"):
    return f"{RESULTS}/predictions/{study}.parquet"


def prereg_path(study="{study}"):
    return f"{RESULTS}/prereg/{study}.json"


def compile_path(study="{study}"):
    return f"{RESULTS}/compile/{study}.json"


def run_path(study="{study}", n="{n}", rep="{rep}"):
    return f"{RESULTS}/runs/{study}/n{n}_r{rep}"


def ledger_path(study="{study}"):
    return f"{RESULTS}/ledger/{study}.json"


def channels_path(study="{study}"):
    return f"{RESULTS}/channels/{study}.parquet"


def decisions_path(study="{study}"):
    return f"{RESULTS}/decisions/{study}.csv"


def calibration_path(name):
    return f"{RESULTS}/calibration/{name}"


def injection_path():
    return f"{RESULTS}/injection/gaps.parquet"


def search_path(name):
    return f"{RESULTS}/search/{name}"


def study_search_path(name, study="{study}"):
    return f"{RESULTS}/study_search/{study}/{name}"


def shard_name(shard="{shard}"):
    return f"shards/shard_{shard}.parquet"


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


def selected_input(wildcards):
    """Studies that compare the search's pick need its result before predicting: their
    own search's (a study with a search block, e.g. over agent sessions), else the
    top-level search's."""
    study = STUDY.study(wildcards.study)
    if study.search is not None:
        return rules.study_search_merge.output.selected.format(study=study.name)
    if study.uses_selected:
        return rules.search_merge.output.selected
    return []


def study_search_shards(wildcards):
    """The shard files of a study's own search."""
    shards = STUDY.study(wildcards.study).search.shards
    return [study_search_path(shard_name(k), wildcards.study) for k in range(shards)]


def study_search_count(wildcards):
    """The shard count of a study's own search."""
    return STUDY.study(wildcards.study).search.shards


def amended_option(wildcards, input):
    """The CLI option naming the decision table an amending study waits for."""
    return f"--amended '{input.amended}'" if "amended" in input.keys() else ""


def selected_option(wildcards, input):
    """The CLI option naming the declared search result (empty when not used)."""
    return f"--selected '{input.selected}'" if input.selected else ""


def profile_option(wildcards, input):
    """The CLI option naming the declared profile file (empty for `profile: published`)."""
    return f"--profile '{input.profile}'" if input.profile else ""


def compile_inputs(wildcards):
    """On real hardware every configuration of the study is compiled first."""
    if STUDY.backend != RBLN:
        return []
    return [rules.compile.output.record]


def compiled_option(wildcards, input):
    """The compile record a hardware run or the calibration reads its artifacts from
    (rbln only)."""
    return f"--compiled '{input.compiled}'" if input.compiled else ""


def report_inputs(wildcards):
    """Every result the report renders from, so Snakemake (and a storage plugin) can
    track and stage them."""
    inputs = {
        "decisions": [decisions_path(name) for name in STUDY_NAMES],
        "channels": [channels_path(name) for name in STUDY_NAMES],
        "predictions": [predictions_path(name) for name in STUDY_NAMES],
        "plans": [plans_path(name) for name in STUDY_NAMES],
        "runs": [d for name in STUDY_NAMES for d in run_dirs(name)],
        "search": rules.search_merge.output.summary,
        "scores": rules.search_merge.output.scores,
        "selected": rules.search_merge.output.selected,
        "calibration": rules.calibrate.output.profile,
    }
    searched = [name for name in STUDY_NAMES if STUDY.study(name).search is not None]
    if searched:
        inputs["study_search"] = [
            rules.study_search_merge.output.summary.format(study=name) for name in searched
        ]
    if STUDY.backend == INJECTION_BACKEND:
        inputs["injection"] = rules.injection.output.gaps
    if STUDY.backend == RBLN:
        inputs["compile"] = [compile_path(name) for name in STUDY_NAMES]
    return inputs


def results_root(wildcards, input):
    """The results tree the report reads, derived from its declared inputs."""
    return str(Path(input.search).parents[1])


def profile_input(wildcards):
    """The profile file predictions, channel A, the prereg and the search read: the
    calibrate stage's profile for `profile: calibrated`, the named file for a path, none
    for `published` (passed to the command by profile_option)."""
    chosen = STUDY.measurement.profile
    if chosen == PUBLISHED:
        return []
    if chosen == CALIBRATED:
        return rules.calibrate.output.profile
    return chosen


def calibration_compile_input(wildcards):
    """On real hardware the calibration artifacts are compiled first."""
    if STUDY.backend != RBLN:
        return []
    return rules.calibrate_compile.output.record


def final_targets():
    """Every decision, the search, the report, and the injection where its backend has a
    driver (elsewhere it is left out, never run on another backend)."""
    return [
        rules.calibrate.output.profile,
        *[decisions_path(name) for name in STUDY_NAMES],
        rules.search_merge.output.summary,
        *([rules.injection.output.gaps] if STUDY.backend == INJECTION_BACKEND else []),
        rules.report.output.html,
    ]
