"""The two groups ``rearrival --help`` lists verbs in: the verbs a user runs, and the
pipeline's own stages, which the Snakemake rules call (each a verb's ``rich_help_panel``)."""

USER_PANEL = "Commands"
PIPELINE_PANEL = "Pipeline stages (called by the Snakemake rules; rarely typed by hand)"
