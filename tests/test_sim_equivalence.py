"""The event core agrees with the step-by-step reference (docs/DESIGN.md §4).

Integer outputs (steps, histogram, reuse, tokens, slots, evictions, stretch shapes) must
match exactly; times to 1e-9 relative, because the core multiplies a step time by a
stretch length where the reference adds it step by step. The compiled core
(``rearrival.model.simulator.rbln.core``, what ``simulate`` runs) and the Python event core it
compiles must agree bit for bit, since the search's outputs may not depend on which one ran.
Both on two-round plans and on multi-round plans with staggered session starts, under
every rule set (release x dummy block x fixed arrivals); the default suite runs a few
hundred plans, ``-m slow`` thousands.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable

import pytest
from conftest import random_plan

from rearrival.model.cost.profile import measured_profile
from rearrival.model.plans.plan import MultiRoundSession, Plan, PlanMeta, Round, Session
from rearrival.model.simulator.rbln.event import simulate_python
from rearrival.model.simulator.rbln.reference import simulate_reference
from rearrival.model.simulator.rbln.sim import SimConfig, SimResult, simulate

# bucket sets chosen so that many n fall between buckets, plus single-bucket grids
BUCKET_SETS = [
    (1, 2, 4, 8),
    (1, 4, 8),
    (1, 2, 8),
    (1, 3, 6, 12),
    (1, 16),
    (2, 4),
    (1,),
    (1, 4, 6, 8, 10, 16),
    (3,),
    (1, 5, 32),
]
VARIANTS = list(
    itertools.product(("deferred", "immediate"), ("off", "pre-evict", "reserved"), (False, True))
)
PLANS_PER_VARIANT = 30  # x 12 variants = 360 random plans in the default suite
SLOW_PLANS_PER_VARIANT = 400  # x 12 = 4,800 with -m slow


def assert_times_close(a: float, b: float, what: str) -> None:
    assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), f"{what}: {a} != {b}"


def assert_same(core: SimResult, ref: SimResult, label: str) -> None:
    cs, rs = core.summary(), ref.summary()
    assert cs.keys() == rs.keys()
    for key, value in cs.items():
        if isinstance(value, float):
            assert_times_close(value, rs[key], f"{label} {key}")
        else:
            assert value == rs[key], f"{label} {key}: {value} != {rs[key]}"
    assert core.total_computed_tokens == ref.total_computed_tokens
    for a, b in zip(core.requests, ref.requests, strict=True):
        for name in a.__slots__:
            x, y = getattr(a, name), getattr(b, name)
            if isinstance(x, float):
                assert_times_close(x, y, f"{label} request {a.session}/{a.turn} {name}")
            else:
                assert x == y, f"{label} request {a.session}/{a.turn} {name}: {x} != {y}"
    assert [(s.n, s.b, s.steps) for s in core.stretches] == [
        (s.n, s.b, s.steps) for s in ref.stretches
    ], label
    for a, b in zip(core.stretches, ref.stretches, strict=True):
        assert_times_close(a.start_s, b.start_s, f"{label} stretch start")
        assert_times_close(a.end_s, b.end_s, f"{label} stretch end")
    assert [(e.slot, e.session, e.turn, e.cause) for e in core.evictions] == [
        (e.slot, e.session, e.turn, e.cause) for e in ref.evictions
    ], label
    for a, b in zip(core.evictions, ref.evictions, strict=True):
        assert_times_close(a.time_s, b.time_s, f"{label} eviction time")


def random_case(rng: random.Random, release: str, dummy_block: str, fixed: bool):
    n = rng.randint(1, 32)
    plan = random_plan(
        rng,
        n,
        max_gen=rng.choice([4, 12, 30]),
        max_wait_s=rng.choice([0.02, 0.2, 1.0]),
        zero_wait_share=rng.choice([0.0, 0.2, 1.0]),
    )
    buckets = rng.choice(BUCKET_SETS)
    batch = buckets[-1]
    slots = rng.choice(
        [None, 1, max(1, batch // 2), max(1, batch - 1), batch + 1, 2 * batch, n, 2 * n]
    )
    fixed_arrivals = None
    if fixed:  # some before the first completion (clamped), some well after
        fixed_arrivals = [round(rng.uniform(0.0, 1.5), rng.choice([2, 9])) for _ in range(n)]
    config = SimConfig(
        buckets=buckets,
        batch_size=batch,
        slots=slots,
        release=release,
        dummy_block=dummy_block,
        fixed_arrivals=fixed_arrivals,
    )
    return plan, config


def assert_identical(core: SimResult, python: SimResult, label: str) -> None:
    """Compiled and Python event cores: every output equal, floats bit for bit."""
    assert core.summary() == python.summary(), label
    assert core.total_computed_tokens == python.total_computed_tokens, label
    assert core.requests == python.requests, label
    assert core.stretches == python.stretches, label
    assert core.evictions == python.evictions, label


def check_random_plans(
    make_case: Callable[..., tuple[Plan, SimConfig]],
    variant: tuple[str, str, bool],
    count: int,
    seed_base: int,
) -> None:
    """The three cores agree on ``count`` random plans from ``make_case`` (two-round or
    multi-round), and every request is one prefill and every round after the first a
    re-arrival."""
    rng = random.Random(seed_base + VARIANTS.index(variant))
    profile = measured_profile()
    for index in range(count):
        plan, config = make_case(rng, *variant)
        label = f"case {index} N={plan.n} requests={plan.requests} {config}"
        core = simulate(plan, config, core="compiled")
        summary = core.summary()
        assert summary["prefill_steps"] == plan.requests
        assert summary["re_arrivals"] == plan.requests - plan.n
        assert_same(core, simulate_reference(plan, config), label)
        assert_identical(core, simulate_python(plan, config, profile), label)


@pytest.mark.parametrize(("release", "dummy_block", "fixed"), VARIANTS)
def test_core_matches_reference_on_random_plans(release, dummy_block, fixed):
    check_random_plans(random_case, (release, dummy_block, fixed), PLANS_PER_VARIANT, 1000)


@pytest.mark.slow
@pytest.mark.parametrize(("release", "dummy_block", "fixed"), VARIANTS)
def test_core_matches_reference_on_many_random_plans(release, dummy_block, fixed):
    check_random_plans(random_case, (release, dummy_block, fixed), SLOW_PLANS_PER_VARIANT, 5000)


@pytest.mark.parametrize("n", [6, 8, 10])
def test_core_matches_reference_on_paper_sized_plans(n):
    # paper-sized generations (32-256) and prompts, on the baseline and the selected grid
    rng = random.Random(n)
    plan = random_plan(rng, n, max_gen=256, max_wait_s=5.0)
    for config in (
        SimConfig(),
        SimConfig(buckets=(1, 4, 6, 8, 10, 16), batch_size=16),
        SimConfig(release="immediate", dummy_block="pre-evict"),
        SimConfig(dummy_block="reserved"),
    ):
        core = simulate(plan, config, core="compiled")
        assert_same(core, simulate_reference(plan, config), str(config))
        assert_identical(core, simulate_python(plan, config, measured_profile()), str(config))


def test_plan_too_large_for_int64_keys_runs_the_python_core_with_a_warning():
    huge = Plan((Session(0, 200, 2**61, 3, 8, 0.5, "aggregate"),), PlanMeta(n=1))
    with pytest.warns(RuntimeWarning, match="int64"):
        result = simulate(huge, SimConfig(), core="compiled")
    assert result.decode_steps == 2**61 - 1 + 2  # G0 - 1 then G1 - 1 decode steps
    assert result.summary() == simulate_python(huge, SimConfig(), measured_profile()).summary()


def test_auto_core_gives_the_compiled_bits():
    plan = random_plan(random.Random(5), 12, max_gen=60)
    config = SimConfig(buckets=(1, 4, 6, 8, 10, 16), batch_size=16)
    results = [simulate(plan, config, core=core) for core in ("auto", "compiled", "python")]
    for other in results[1:]:
        assert_identical(results[0], other, "auto vs explicit core")
    with pytest.raises(ValueError, match="core 'fast'"):
        simulate(plan, config, core="fast")


def test_pre_evict_under_deferred_release_gives_the_base_results():
    """Deferred + pre-evict == deferred + off on random plans (documented in
    ``rbln.sim``): the slot pre-evict frees is the one the next admission would
    have evicted, with no look-up in between, so only the eviction records differ."""
    rng = random.Random(77)
    profile = measured_profile()
    fired = 0
    for _ in range(300):
        plan, base = random_case(rng, "deferred", "off", rng.random() < 0.3)
        dummy = SimConfig(
            buckets=base.buckets,
            batch_size=base.batch_size,
            slots=base.slots,
            dummy_block="pre-evict",
            fixed_arrivals=base.fixed_arrivals,
        )
        pre = simulate_python(plan, dummy, profile)
        fired += any(e.cause == "dummy-block" for e in pre.evictions)
        off = simulate_python(plan, base, profile)
        assert pre.summary() == off.summary()
        assert [r.cached_tokens for r in pre.requests] == [r.cached_tokens for r in off.requests]
    assert fired > 50  # the rule did fire, so the equality is not vacuous


# ---- multi-round sessions with staggered starts ----------------------------------------

MULTI_PLANS_PER_VARIANT = 20  # x 12 variants = 240 random multi-round plans by default
SLOW_MULTI_PLANS_PER_VARIANT = 300  # x 12 = 3,600 with -m slow


def random_multi_round_plan(rng: random.Random, n: int) -> Plan:
    """Sessions of 1-8 rounds (new segments from 0 tokens, short generations, some zero
    gaps), starting at 0 or spread over up to 2 s (some on the same instant)."""
    max_gen = rng.choice([3, 10, 25])
    max_gap = rng.choice([0.02, 0.3, 1.5])
    spread = rng.choice([0.0, 0.05, 2.0])
    sessions = []
    for i in range(n):
        k = rng.randint(1, 8)
        rounds = tuple(
            Round(
                rng.randint(1, 1600) if j == 0 else rng.randint(0, 300),
                rng.randint(1, max_gen),
                0.0 if j == k - 1 or rng.random() < 0.2 else rng.uniform(0.0, max_gap),
            )
            for j in range(k)
        )
        start = 0.0 if rng.random() < 0.3 else round(rng.uniform(0.0, spread), rng.choice([2, 9]))
        sessions.append(MultiRoundSession(i, rounds, start))
    return Plan(tuple(sessions), PlanMeta(n=n))


def random_multi_case(rng: random.Random, release: str, dummy_block: str, fixed: bool):
    n = rng.randint(1, 16)
    plan = random_multi_round_plan(rng, n)
    buckets = rng.choice(BUCKET_SETS)
    batch = buckets[-1]
    slots = rng.choice([None, 1, max(1, batch // 2), batch + 1, 2 * batch, n, 3 * n])
    fixed_arrivals = None
    if fixed:  # one time per re-arrival, (session, round) order
        fixed_arrivals = [
            round(rng.uniform(0.0, 3.0), rng.choice([2, 9])) for _ in range(plan.requests - plan.n)
        ]
    config = SimConfig(
        buckets=buckets,
        batch_size=batch,
        slots=slots,
        release=release,
        dummy_block=dummy_block,
        fixed_arrivals=fixed_arrivals,
    )
    return plan, config


@pytest.mark.parametrize(("release", "dummy_block", "fixed"), VARIANTS)
def test_cores_agree_on_random_multi_round_plans(release, dummy_block, fixed):
    variant = (release, dummy_block, fixed)
    check_random_plans(random_multi_case, variant, MULTI_PLANS_PER_VARIANT, 3000)


@pytest.mark.slow
@pytest.mark.parametrize(("release", "dummy_block", "fixed"), VARIANTS)
def test_cores_agree_on_many_random_multi_round_plans(release, dummy_block, fixed):
    variant = (release, dummy_block, fixed)
    check_random_plans(random_multi_case, variant, SLOW_MULTI_PLANS_PER_VARIANT, 7000)


@pytest.mark.parametrize(
    ("release", "dummy_block"),
    [("deferred", "off"), ("immediate", "pre-evict"), ("deferred", "reserved")],
)
def test_two_round_plan_written_as_multi_round_gives_the_same_result(release, dummy_block):
    """The paper's session is the K = 2 case: the same sessions as MultiRoundSession rows
    give every output bit for bit, in every core."""
    rng = random.Random(31)
    for _ in range(20):
        plan = random_plan(rng, rng.randint(1, 20), max_gen=20, max_wait_s=0.5)
        multi = Plan(
            tuple(MultiRoundSession(s.session, s.rounds) for s in plan.sessions), plan.meta
        )
        buckets = rng.choice(BUCKET_SETS)
        config = SimConfig(
            buckets=buckets,
            batch_size=buckets[-1],
            slots=rng.choice([None, 1, plan.n]),
            release=release,
            dummy_block=dummy_block,
        )
        compiled = [simulate(p, config, core="compiled") for p in (multi, plan)]
        assert_identical(*compiled, f"compiled {config}")
        python = [simulate_python(p, config, measured_profile()) for p in (multi, plan)]
        assert_identical(*python, f"python {config}")
        assert_same(simulate_reference(multi, config), simulate_reference(plan, config), "ref")
