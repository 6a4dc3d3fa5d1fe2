# Helpers shared by the workflow files. The study definition as typed objects and the file
# lists derived from it. No science here: rearrival.studies expands the config.
import os

from rearrival.cluster import check_slurm_site, device_gres
from rearrival.studies import study_config_from_mapping

STUDY = study_config_from_mapping(config, workflow.configfiles[0])
STUDY_NAMES = list(STUDY.studies)
CONFIG_FILE = workflow.configfiles[0]
# Site settings for profiles/slurm come from the environment (rearrival.cluster): the
# generic resource a real-device job holds on the cluster, '' for emulated backends.
REAL_DEVICE = config["backend"] == "rbln"
DEVICE_GRES = device_gres(os.environ, real_device=REAL_DEVICE)


onstart:
    # Before the first sbatch: no Slurm, controller down or a missing partition is one
    # clear line, not one failed submission per job.
    if workflow.executor_plugin.cli_prefix == "slurm":
        check_slurm_site(os.environ, real_device=REAL_DEVICE)


def plan_files(study):
    """Every plan of a study: one per N and replicate."""
    s = STUDY.study(study)
    return [
        f"results/plans/{study}/n{n}_r{rep}.parquet"
        for n in s.n
        for rep in range(STUDY.replicates)
    ]


def replicate_run_dirs(wildcards):
    """The run directories (one per N and replicate) a study's channels stage reads."""
    s = STUDY.study(wildcards.study)
    return [
        f"results/runs/{wildcards.study}/n{n}_r{rep}"
        for n in s.n
        for rep in range(STUDY.replicates)
    ]


def study_plans(wildcards):
    return plan_files(wildcards.study)


def prereg_inputs(wildcards):
    """A study whose configurations include the search's pick, or that amends another
    study, is registered only after that result exists (amendments apply to later runs)."""
    s = STUDY.study(wildcards.study)
    inputs = {"predictions": f"results/predictions/{wildcards.study}.parquet"}
    if s.amends:
        inputs["amended"] = f"results/decisions/{s.amends}.csv"
    return inputs


def selected_input(wildcards):
    """Studies that compare the search's pick need its result before predicting."""
    if STUDY.study(wildcards.study).uses_selected:
        return "results/search/selected.json"
    return []


def compile_inputs(wildcards):
    """On real hardware every configuration of the study is compiled first."""
    if config["backend"] != "rbln":
        return []
    return [f"results/compile/{wildcards.study}.json"]


def compiled_option(wildcards):
    """The compile record a hardware run reads its artifacts from (rbln only)."""
    if config["backend"] != "rbln":
        return ""
    return f"--compiled results/compile/{wildcards.study}.json"


def final_targets():
    return [
        *[f"results/decisions/{name}.csv" for name in STUDY_NAMES],
        "results/search/summary.json",
        "results/injection/gaps.parquet",
        "reports/report.html",
    ]
