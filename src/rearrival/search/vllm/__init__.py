"""The search and the advice on the vLLM substrate (docs/DESIGN.md §15 "Search and
advice"): ``rearrival search --substrate vllm`` and ``rearrival advise --substrate vllm``.

One concern per module, in the order a search runs: ``defaults`` (what vLLM 0.32.0
chooses when its operator gives nothing: the default axes and the baseline), ``space``
(the configurations, counted before they are enumerated, their KV pools and filters),
``prefix_bound`` (the structural upper bound of the hit rate, without simulation),
``evaluate`` (every configuration on every plan, exactly), ``outputs`` (scores, summary,
result lines), ``run`` (the search in one process) and ``advise`` (how much KV, which
knobs). The inputs, plan directories, ranking, caveats and the bootstrap are the RBLN
search's own (``rearrival.search``).
"""
