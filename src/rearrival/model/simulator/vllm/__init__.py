"""The predictor's ``vllm`` rule set (docs/DESIGN.md §15): vLLM 0.32.0's synchronous
scheduler with its paged, prefix-cached KV pool. ``sim.simulate_vllm`` is the entry;
``inputs`` (a plan as arrays, the pool check), ``blockpool`` (the pool), ``engine`` (one
scheduler step), ``reference`` (step by step, tests only), ``event`` (the Python event
core), ``core`` (the compiled core), ``result`` (records and summary), and vLLM's own
scheduler as the oracle (``oracle_driver``, run by ``oracle``).

Import from the modules; this package re-exports nothing."""
