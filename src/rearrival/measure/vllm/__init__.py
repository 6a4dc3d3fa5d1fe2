"""The ``vllm`` backend (docs/DESIGN.md §15): a real vLLM server per run, driven by the same
replay client as every HTTP backend. One concern per module: ``model`` (the served model
directory), ``server`` (the command line and vLLM's own failure reasons), ``iterations``
(vLLM's per-iteration step log as steps.parquet) and ``backend`` (one run, start to record).
"""
