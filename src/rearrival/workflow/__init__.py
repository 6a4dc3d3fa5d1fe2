"""The stage functions the Snakemake rules call (``rules/X.smk`` calls ``workflow/X.py``)
and the cluster site settings (SPEC 11)."""
