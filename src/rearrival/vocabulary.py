"""The study's shared vocabulary, defined once: names written into plans, configs, run
records and predictions, and the arrival tolerance of the scheduler rules.

docs/DESIGN.md §2 (variants), §4 (release and dummy-block rules, arrival tolerance),
§5-6 (backends and what the workflow runs for each, eviction causes in the emulated
server log). Plain tuples of ``str``, not enums, so every value written into Parquet,
JSON, CSV and logs stays the string it always was; the order of a tuple shows only in
error messages ("use one of ...").
"""

from __future__ import annotations

from dataclasses import dataclass

# Measurement backends (docs/DESIGN.md §5): the in-process twin, the twin behind HTTP, RBLN
# hardware, and a real vLLM server (§15; its CPU build runs anywhere).
EMULATED, EMULATED_HTTP, RBLN, VLLM = "emulated", "emulated-http", "rbln", "vllm"
BACKENDS = (EMULATED, EMULATED_HTTP, RBLN, VLLM)


@dataclass(frozen=True)
class BackendStages:
    """What the workflow runs for one backend, so a rule asks the backend's entry, never
    ``backend == ...``: a new substrate is one entry here (docs/DESIGN.md §5, §15)."""

    device: bool  # its jobs hold the real device (`device` resource, the Slurm gres)
    compiles: bool  # every configuration is compiled before it runs (compile stages)
    injection: bool  # it has a prefill-injection driver (paper III-C)
    # the substrate whose configurations it runs (rearrival.model.configuration.SUBSTRATES)
    # and the predictor's rule set its registered predictions use
    substrate: str = "rbln"
    prediction: str = "base"
    # on Slurm a real-device job must name the generic resource it holds (RBLN's NPUs);
    # vLLM's CPU build holds none, a GPU host gives one in REARRIVAL_SLURM_DEVICE_GRES
    gres_required: bool = False


BACKEND_STAGES = {
    EMULATED: BackendStages(device=False, compiles=False, injection=True),
    EMULATED_HTTP: BackendStages(device=False, compiles=False, injection=False),
    RBLN: BackendStages(device=True, compiles=True, injection=False, gres_required=True),
    # a real vLLM server per run; nothing to compile ahead (no RBLN artifacts). It holds
    # the device: two servers on the same cores (or GPU) measure each other's load
    # (issue 38: channel B measured the contention of two replicates at once)
    VLLM: BackendStages(
        device=True, compiles=False, injection=False, substrate="vllm", prediction="vllm"
    ),
}
# The only backend with a prefill-injection driver (paper III-C); `all` leaves the
# injection out on the others.
(INJECTION_BACKEND,) = (name for name, stages in BACKEND_STAGES.items() if stages.injection)

# Workload variants of a plan (docs/DESIGN.md §2): the measured tool wait, no wait, one equal wait.
VARIANTS = ("wait", "control", "equal")

# When a finished request's KV slot becomes evictable (docs/DESIGN.md §4): after the next step
# (the predictor's base rule) or at once (the measured stack).
RELEASES = ("deferred", "immediate")

# The dummy padding block: absent; taken by evicting the oldest evictable slot before a
# partly filled decode step (the measured stack); or one slot counted as held at every
# admission while 0 < running < batch_size (the paper's Supplementary S9 simulator).
DUMMY_BLOCKS = ("off", "pre-evict", "reserved")

# Why a KV slot's cached prefix was dropped: an admission securing its slot, or the
# dummy padding block. "dummy-block" is the spelling the emulated server log writes
# (``reason=dummy-block``); the dummy-block *mode* that causes it is "pre-evict".
EVICTED_BY_ADMISSION = "admission"
EVICTED_BY_DUMMY_BLOCK = "dummy-block"
EVICTION_CAUSES = (EVICTED_BY_ADMISSION, EVICTED_BY_DUMMY_BLOCK)

# An arrival at t counts at the first step boundary >= t - ARRIVAL_TOLERANCE_S, so float
# round-off in "completion + wait" never delays an admission by a step (docs/DESIGN.md §4).
ARRIVAL_TOLERANCE_S = 1e-12

# The predictor's rule sets for the paper's substrate, as (release, dummy_block): "base" is
# the paper's predictor (Section IV) and the one preregistered as the prediction; "dummy"
# adds the rule the paper's Supplementary S9 simulator added ("reserved"); "stack" is the
# measured stack (immediate release + the pre-evict padding block).
RULE_SETS: dict[str, tuple[str, str]] = {
    "base": ("deferred", "off"),
    "dummy": ("deferred", "reserved"),
    "stack": ("immediate", "pre-evict"),
}
# The rule set every registered prediction on the paper's substrate uses; the others are
# reported beside it. On vLLM the one rule set is ``VLLM_RULES`` (docs/DESIGN.md §15):
# each backend's registered rule set is its ``BackendStages.prediction``.
PREDICTION = "base"
VLLM_RULES = "vllm"
