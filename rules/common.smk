# Helpers shared by the workflow files. The study definition as typed objects and the file
# lists derived from it. No science here: rearrival.studies expands the config.
from rearrival.studies import study_config_from_mapping

STUDY = study_config_from_mapping(config, workflow.configfiles[0])
STUDY_NAMES = list(STUDY.studies)
CONFIG_FILE = workflow.configfiles[0]


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


def profile_input(wildcards):
    """The profile file predictions, channel A, the prereg and the search read when the
    config says `profile: calibrated` or names a file (none for `published`)."""
    choice = config.get("profile", "published")
    if choice == "published":
        return []
    if choice == "calibrated":
        return "results/calibration/profile.yaml"
    return choice


def calibration_compile_input(wildcards):
    """On real hardware the calibration artifacts are compiled first."""
    if config["backend"] != "rbln":
        return []
    return "results/calibration/compile.json"


def calibration_compiled_option(wildcards):
    if config["backend"] != "rbln":
        return ""
    return "--compiled results/calibration/compile.json"


def final_targets():
    return [
        "results/calibration/profile.yaml",
        *[f"results/decisions/{name}.csv" for name in STUDY_NAMES],
        "results/search/summary.json",
        "results/injection/gaps.parquet",
        "reports/report.html",
    ]
