# rearrival: the preregistered study of tool waiting and re-arrival (docs/DESIGN.md §10).
# `snakemake --cores 8 all` regenerates every table and figure on the configured backend.
from snakemake.utils import min_version

min_version("9.0")


# The study definition every job reads; rules/common.smk loads and checks it, once (the
# schema drawn from the section models, their defaults; docs/DESIGN.md §10).
configfile: "config/config.yaml"


report: "rules/report/workflow.rst"


wildcard_constraints:
    study="[a-z0-9_]+",
    n="[0-9]+",
    rep="[0-9]+",
    shard="[0-9]+",
    search="search|study_search/[a-z0-9_]+",
    condition="[a-z0-9_]+-[a-z0-9_]+",
    profile="published|calibrated",


include: "rules/common.smk"
include: "rules/calibrate.smk"
include: "rules/plans.smk"
include: "rules/predict.smk"
include: "rules/search.smk"
include: "rules/preregister.smk"
include: "rules/compile.smk"
include: "rules/run.smk"
include: "rules/seal.smk"
include: "rules/channels.smk"
include: "rules/decide.smk"
include: "rules/fixed_arrivals.smk"
include: "rules/report.smk"
include: "rules/vllm_report.smk"
include: "rules/engine_report.smk"
include: "rules/capacity.smk"


# reports/report.html is the paper's report (rules/report.smk), or on a real engine the
# report composed of its studies' sections (rules/engine_report.smk): one rule per backend.
if ON_VLLM:

    ruleorder: engine_report > report

else:

    ruleorder: report > engine_report


if STUDY.fleet is not None:

    include: "rules/fleet.smk"


rule all:
    default_target: True
    input:
        final_targets(),
