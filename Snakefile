# rearrival: the preregistered study of tool waiting and re-arrival (SPEC section 11).
# `snakemake --cores 8 all` regenerates every table and figure on the configured backend.
from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config/config.yaml"


validate(config, schema="config/schema.yaml")


report: "rules/report/workflow.rst"


wildcard_constraints:
    study="[a-z0-9_]+",
    n="[0-9]+",
    rep="[0-9]+",
    shard="[0-9]+",


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
include: "rules/report.smk"


rule all:
    default_target: True
    input:
        final_targets(),
