"""The configuration search and the Section V-D advice (paper Section V).

One concern per module, in the order the search runs: ``settings`` (command-line
overrides of ``rearrival.config.search.SearchSettings``), ``candidates`` (the
compile-time space, its filters and the baseline), ``inputs`` (search and evaluation
plans), ``evaluate`` (every candidate on every plan), ``merge`` (shard files), ``rank``
(scores and ranking), ``outputs`` (the files written) and ``run`` (all of it in one
process); ``advise``, ``plan_dir`` and ``trace_advice`` build on them. The same on the
vLLM substrate's knobs is the subpackage ``vllm`` (docs/DESIGN.md §15), which shares the
inputs, plan directories, ranking, caveats and the bootstrap with these.
"""
