"""The vLLM calibration's measurement plans (docs/DESIGN.md §15, "Calibration"): which
steps to make a real server run so that every coefficient of the step cost

    step_s = base_s + per_decode_token_s * D_pad + per_prefill_token_s * P
             + per_kv_token_s * C

is identified. One calibration plan holds every design cell as a *segment* of sessions
sent together; segments are sent ``segment_gap_s`` apart and the whole set repeats
``cycles`` times in a rotated order, so a slow drift of the machine's speed (other load
on a shared host) falls on every cell alike instead of on one coefficient:

- ``decode-n{n}``: n sessions with one-block prompts decoding together (D = n, P = 0, C
  small and growing by n per step), for n = 1, max_num_seqs / 2 and max_num_seqs;
- ``long-n{n}``: n sessions with long prompts (chunked by the token budget, each chunk
  reading the context computed before it), then decoding with a large C (the KV-read
  term apart from the per-token terms), for n = 1 and max_num_seqs / 2, each segment
  at most ``LONG_POOL_SHARE`` of the pool so two overlapping ones still fit;
- ``prefill``: single requests of a quarter, half, one and two token budgets, generating
  one token, sent ``PROBE_SPACING_S`` apart so each runs alone (P alone; the two-budget
  one in two chunks);
- ``mixed``: a one-block session decoding while a half-budget prompt arrives (steps with
  D and P together);
- ``rearrival``: a two-budget prompt that comes back at once with a few new tokens, so
  its second prefill computes a few tokens over a long cached prefix (small P, large C:
  an agent's re-arrival).

Every session's prompt is its own (the client's ids name the session), so nothing is
shared between sessions and one server serves the whole plan; the exact steps, whatever
the arrival timing, come from replaying the run (``rearrival.model.simulator.vllm.replay``).
The held-out validation plan is a small multi-round agent workload that shares no
segment with the calibration plan.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

from rearrival.errors import RearrivalError
from rearrival.model.configuration import VllmConfiguration
from rearrival.model.plans.plan import MultiRoundSession, Plan, PlanMeta, Round

GENERATOR_VERSION = "rearrival-calibrate-vllm/1"
# Each long-context segment holds at most this share of the pool, so that two of them
# overlapping (a late first token, a slow machine) still fit without preemption.
LONG_POOL_SHARE = 0.45
# Seconds between the mixed segment's decoding session and its prompt: inside the
# decode's run of steps on any machine this calibration was written for (1-20 ms a step).
MIXED_OFFSET_S = 0.05
# Seconds between the prefill probes: longer than a two-budget prefill on those machines,
# so no two probes share a step.
PROBE_SPACING_S = 0.25


class VllmDesignError(RearrivalError, ValueError):
    """Knobs the calibration cannot measure with; names the knob and the fix."""


@dataclass(frozen=True)
class VllmCalibrationDesign:
    """How much the calibration measures. ``cycles``: repetitions of the segment set;
    ``segment_gap_s``: seconds between segment sends; ``decode_tokens``: tokens each
    decoding session generates; ``warmup_steps``: the server's first steps, left out of
    the fit (its first prefill runs several times slower while caches warm)."""

    cycles: int = 8
    segment_gap_s: float = 1.0
    decode_tokens: int = 64
    warmup_steps: int = 16

    def __post_init__(self) -> None:
        for name, low in (("cycles", 1), ("decode_tokens", 2), ("warmup_steps", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise VllmDesignError(f"calibration {name} {value!r}: must be an integer >= {low}")
        if not self.segment_gap_s > 0:
            raise VllmDesignError(
                f"calibration segment_gap_s {self.segment_gap_s!r}: must be > 0 seconds"
            )

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Segment:
    """Sessions sent together: (offset s, rounds) each, the rounds as plan ``Round``s."""

    label: str
    sessions: tuple[tuple[float, tuple[Round, ...]], ...]


def _one(prompt: int, gen: int) -> tuple[Round, ...]:
    return (Round(prompt, gen),)


def decode_counts(configuration: VllmConfiguration) -> tuple[int, ...]:
    """The decode batch sizes measured: 1, half of max_num_seqs and max_num_seqs."""
    seqs = configuration.batch_size
    return tuple(sorted({1, max(1, seqs // 2), seqs}))


def probe_sizes(configuration: VllmConfiguration, max_model_len: int) -> tuple[int, ...]:
    """Prefill probe prompts: a quarter, half, one and two token budgets (those that fit)."""
    budget = configuration.max_num_batched_tokens
    sizes = {max(1, budget // 4), max(1, budget // 2), budget, 2 * budget}
    return tuple(q for q in sorted(sizes) if q + 1 <= max_model_len)


def _long_prompt(configuration: VllmConfiguration, max_model_len: int, n: int, gen: int) -> int:
    pool_tokens = configuration.usable_blocks * configuration.block_size
    share = int(LONG_POOL_SHARE * pool_tokens / n) - gen
    return min(max_model_len - gen, share)


def segments(
    configuration: VllmConfiguration, max_model_len: int, design: VllmCalibrationDesign
) -> tuple[Segment, ...]:
    """One cycle's segments (module docstring), checked to fit the knobs."""
    bs, budget = configuration.block_size, configuration.max_num_batched_tokens
    gen = design.decode_tokens
    if bs + gen > max_model_len:
        raise VllmDesignError(
            f"max_model_len {max_model_len}: a decode session needs {bs + gen} tokens; raise "
            "it or lower the calibration's decode_tokens"
        )
    out = [
        Segment(f"decode-n{n}", tuple((0.0, _one(bs, gen)) for _ in range(n)))
        for n in decode_counts(configuration)
    ]
    for n in sorted({1, max(1, configuration.batch_size // 2)}):
        prompt = _long_prompt(configuration, max_model_len, n, gen)
        if prompt <= budget:
            raise VllmDesignError(
                f"num_blocks {configuration.num_blocks} x block_size {bs}: {n} long-context "
                f"sessions get {prompt} tokens each, no more than one token budget "
                f"({budget}), so the KV-read term cannot be told from the prefill term; give "
                f"a pool of at least {int(2 * n * (budget + gen) / LONG_POOL_SHARE) // bs + 2} "
                "blocks"
            )
        out.append(Segment(f"long-n{n}", tuple((0.0, _one(prompt, gen)) for _ in range(n))))
    out.append(
        Segment(
            "prefill",
            tuple(
                (i * PROBE_SPACING_S, _one(q, 1))
                for i, q in enumerate(probe_sizes(configuration, max_model_len))
            ),
        )
    )
    out.append(
        Segment("mixed", ((0.0, _one(bs, gen)), (MIXED_OFFSET_S, _one(max(1, budget // 2), 1))))
    )
    prompt = min(2 * budget, max_model_len - 2 * bs - 4)
    out.append(Segment("rearrival", ((0.0, (Round(prompt, 2), Round(bs, 2))),)))
    return tuple(out)


def calibration_plan(
    configuration: VllmConfiguration,
    max_model_len: int,
    design: VllmCalibrationDesign,
    seed: int,
) -> Plan:
    """The calibration plan: ``cycles`` rotations of the segments, one segment every
    ``segment_gap_s``; ``meta.notes`` names each session's segment and cycle."""
    cycle = segments(configuration, max_model_len, design)
    sessions: list[MultiRoundSession] = []
    labels: list[str] = []
    slot = 0
    for c in range(design.cycles):
        shift = c % len(cycle)
        for segment in cycle[shift:] + cycle[:shift]:
            start = slot * design.segment_gap_s
            for offset, rounds in segment.sessions:
                sessions.append(MultiRoundSession(len(sessions), rounds, round(start + offset, 6)))
                labels.append(f"{segment.label}/c{c}")
            slot += 1
    meta = PlanMeta(
        seed=seed,
        n=len(sessions),
        variant="wait",
        generator_version=GENERATOR_VERSION,
        source="generator",
        notes={"purpose": "vllm calibration", "segments": labels, "design": design.as_dict()},
    )
    return Plan(tuple(sessions), meta)


def validation_plan(configuration: VllmConfiguration, max_model_len: int, seed: int) -> Plan:
    """The held-out plan: a small agent workload (four sessions of two to four rounds,
    first prompts of one to three token budgets, tool results of 16-256 tokens, 8-48
    generated tokens, tool gaps of 0.2-1.2 s, starts spread over 1 s), drawn from
    ``seed``; it shares no segment shape with the calibration plan."""
    rng = random.Random(f"vllm-validation:{seed}")
    budget = configuration.max_num_batched_tokens
    sessions = []
    for index in range(min(4, configuration.batch_size)):
        count = rng.randint(2, 4)
        rounds = []
        for k in range(count):
            new = rng.randint(budget, 3 * budget) if k == 0 else rng.randint(16, 256)
            gen = rng.randint(8, 48)
            gap = 0.0 if k == count - 1 else round(rng.uniform(0.2, 1.2), 3)
            rounds.append(Round(new, gen, gap))
        sessions.append(MultiRoundSession(index, tuple(rounds), round(rng.uniform(0.0, 1.0), 3)))
    plan = Plan(
        tuple(sessions),
        PlanMeta(
            seed=seed,
            n=len(sessions),
            generator_version=GENERATOR_VERSION,
            source="generator",
            notes={"purpose": "vllm calibration validation (held out)"},
        ),
    )
    longest = max(
        p + r.gen_tokens for s in sessions for p, r in zip(s.prompts(), s.rounds, strict=True)
    )
    if longest > max_model_len:
        raise VllmDesignError(
            f"max_model_len {max_model_len}: the validation plan reaches {longest} tokens; "
            "raise it or lower max_num_batched_tokens"
        )
    return plan
