"""The stage functions the Snakemake rules call (``rules/X.smk`` calls ``workflow/X.py``)
and the cluster site settings (docs/DESIGN.md §10)."""
