"""A fleet of real vLLM servers behind vllm-router (README "A study on a real fleet"): the
router's command line (``router``), which replica served each request (``placement``), the
job's signals (``signals``) and one run (``backend``)."""
