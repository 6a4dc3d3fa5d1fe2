# rearrival: the preregistered study of tool waiting and re-arrival (docs/DESIGN.md §10).
# `snakemake --cores 8 all` regenerates every table and figure on the configured backend.
from snakemake.utils import min_version, validate

min_version("9.0")


# The study definition every job reads; rules/common.smk loads and checks it (the
# schema's key names and types, the section models' defaults).
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


# snakemake's own schema check of the loaded file, after rules/common.smk has refused a
# bad one in one line (the schema states no defaults, so this fills nothing).
validate(config, schema="config/schema.yaml")


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
include: "rules/capacity.smk"


if STUDY.fleet is not None:

    include: "rules/fleet.smk"


rule all:
    default_target: True
    input:
        final_targets(),
