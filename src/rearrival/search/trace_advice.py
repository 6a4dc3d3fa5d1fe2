"""What to compile for your own agents: the Section V-D procedure on a real trace.

``rearrival advise --trace TRACE`` imports the trace (TraceLab round trace or OTLP JSON
GenAI spans) into multi-round sessions at the profile's maximum sequence length, then
builds the workload the paper studies: at each concurrency N, N sessions drawn with
replacement from the trace's sessions, all starting at t = 0 (N agents sharing one
instance). On that workload it runs the paper's procedure:

1. the baseline's reuse loss, in total and by round;
2. the search's pick over the candidate space (compile budget and memory filters), chosen
   on one set of drawn workloads and predicted on another, never used to select; its
   saving's spread over resampled session sets (a seeded bootstrap over sessions);
3. compile cost and device memory of every configuration it names;
4. whether more slots still help, and whether they fit.

The profile's costs are measured at its maximum sequence length (8,192 for the published
profile), so rounds beyond it are truncated and counted, never priced by extrapolation;
``token_scale`` shrinks a long-context trace as a labelled what-if instead.
"""

from __future__ import annotations

import gzip
import math
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rearrival.config.search import SearchError, SearchSettings
from rearrival.config.study import StudyConfig
from rearrival.model.configuration import RblnConfiguration
from rearrival.model.cost.memory import device_memory
from rearrival.model.cost.profile import Profile, measured_profile
from rearrival.model.plans.otel_import import plans_from_otel
from rearrival.model.plans.plan import MultiRoundSession, Plan, PlanMeta
from rearrival.model.plans.trace_plans import ImportResult, LongerContext
from rearrival.model.plans.tracelab_import import plans_from_trace
from rearrival.model.simulator.rbln.sim import SimConfig, simulate
from rearrival.progress import progress
from rearrival.search.advise import (
    advise,
    assess,
    larger_candidate,
    next_search,
    resolve_n,
    search_pick,
)
from rearrival.search.candidates import baseline_of, search_candidates, settings_space
from rearrival.search.caveats import n_caveats, ranking_caveats, spread_caveats
from rearrival.search.evaluate import CandidateArrays
from rearrival.search.rank import ranking
from rearrival.search.settings import override_settings
from rearrival.search.space import plan_footprint
from rearrival.search.verdict import outside_spread

RESAMPLES = 100
SPREAD = (0.05, 0.5, 0.95)
# --workload: the trace's sessions as its timestamps say (the default), or N drawn
# sessions starting together (the paper's question, a what-if for a trace).
TRACE_TIMING = "trace"
DRAWN = "drawn"
WORKLOADS = (TRACE_TIMING, DRAWN)


def import_trace(
    path: Path,
    token_scale: float,
    profile: Profile | None,
    max_seq_len: int | None = None,
    longer_context: LongerContext | None = None,
    time_origin: str = "zero",
) -> ImportResult:
    """The trace's sessions at the profile's maximum sequence length (or ``max_seq_len``,
    a vLLM server's ``max_model_len``), starting as ``time_origin`` says (``plans
    from-trace --time-origin``; ``zero``: all at 0, the pool drawn workloads start from).

    OTLP JSON is recognised by its ``resourceSpans``; anything else is read as TraceLab."""
    importer = plans_from_otel if is_otlp(path) else plans_from_trace
    return importer(
        path,
        max_seq_len=profile.slot_tokens if max_seq_len is None else max_seq_len,
        time_origin=time_origin,
        token_scale=token_scale,
        profile=profile,
        longer_context=longer_context,
    )


def is_otlp(path: Path) -> bool:
    if not path.is_file():
        return False
    try:
        with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as handle:
            return b"resourceSpans" in handle.read(4096)
    except (OSError, EOFError):
        return False  # the TraceLab reader names the damage with its line


def check_workload(workload: str) -> None:
    """Refuse a workload kind the advice does not know, naming both."""
    if workload not in WORKLOADS:
        raise SearchError(
            f"option --workload {workload!r}: give {TRACE_TIMING} (the trace's own timing) "
            f"or {DRAWN} (N sessions drawn from it, all starting together)"
        )


def peak_sessions(plan: Plan, baseline: RblnConfiguration, profile: Profile) -> int:
    """The most sessions in the system at once on the trace's own timing (first arrival
    to last completion, on the baseline's schedule): what ``--workload drawn`` departs
    from when it starts N together."""
    spans: dict[int, list[float]] = {}
    for record in simulate(plan, SimConfig.of(baseline), profile).requests:
        span = spans.setdefault(record.session, [math.inf, -math.inf])
        span[0] = min(span[0], record.arrival_s)
        span[1] = max(span[1], record.complete_s)
    events = sorted([(a, 1) for a, _ in spans.values()] + [(b, -1) for _, b in spans.values()])
    peak = now = 0
    for _, change in events:
        now += change
        peak = max(peak, now)
    return peak


def _advise_on_trace_timing(
    cfg: StudyConfig,
    trace: Path,
    n: Sequence[int] | None,
    token_scale: float,
    search_dir: Path | None,
    workers: int,
    profile: Profile,
    time_origin: str,
    axes: dict[str, Any] | None,
) -> dict[str, Any]:
    """``advise --plans`` on the import of ``trace`` (``plans from-trace`` with the same
    --token-scale and --time-origin), with the import's lines beside it."""
    imported = import_trace(trace, token_scale, profile, time_origin=time_origin)
    advice = advise(
        cfg,
        n=n,
        search_dir=search_dir,
        workers=workers,
        profile=profile,
        plans=[imported.plan],
        plans_name=f"{trace} ({imported.source}, sha256 {imported.trace_sha256[:12]})",
        axes=axes,
    )
    pool = imported.plan
    return {
        **advice,
        "workload": {
            "kind": TRACE_TIMING,
            "time_origin": time_origin,
            "what_if": None
            if time_origin == "first"
            else "--time-origin zero: every session starts at t = 0, not as the trace says",
        },
        "workload_notes": imported.summary_lines(),
        "import": {
            "source": imported.source,
            "trace_sha256": imported.trace_sha256,
            "flags": pool.meta.import_flags,
            "notes": pool.meta.notes,
        },
        "baseline_per_round": per_round_loss([pool], baseline_of(cfg), profile),
    }


def workload_plan(pool: Plan, n: int, rng: random.Random) -> Plan:
    """N sessions drawn with replacement from the trace's, all starting at t = 0."""
    picks = [min(int(rng.random() * pool.n), pool.n - 1) for _ in range(n)]
    sessions = tuple(
        MultiRoundSession(i, pool.sessions[j].rounds, 0.0) for i, j in enumerate(picks)
    )
    meta = PlanMeta(
        n=n,
        generator_version=pool.meta.generator_version,
        source=pool.meta.source,
        trace_sha256=pool.meta.trace_sha256,
        import_flags=pool.meta.import_flags,
    )
    return Plan(sessions, meta)


def workload_plans(
    pool: Plan, n_set: Sequence[int], draws: int, seed: int, inputs: str
) -> list[Plan]:
    """``draws`` workloads per N; ``inputs`` keeps selection and evaluation draws apart."""
    return [
        workload_plan(pool, n, random.Random(f"rearrival-trace/{seed}/{inputs}/{n}/{draw}"))
        for n in n_set
        for draw in range(draws)
    ]


def _device_s(plan: Plan, cand: RblnConfiguration, profile: Profile) -> float:
    return simulate(plan, SimConfig.of(cand), profile).device_s


def search_on(
    plans: Sequence[Plan],
    cands: Sequence[RblnConfiguration],
    baseline: RblnConfiguration,
    profile: Profile,
) -> tuple[RblnConfiguration, float, list[dict[str, str]]]:
    """The candidate with the lowest summed device time over ``plans`` relative to the
    baseline (paper V-A score), ties to fewer buckets and slots, and the ranking's
    caveats (``rearrival.search.caveats``).

    Candidates that schedule identically at a plan's N (same batch, slots and buckets
    up to N; ``CandidateArrays.groups``) are simulated once."""
    every = [*cands, baseline] if baseline not in cands else list(cands)
    plan_footprint(len(every), max(c.batch_size for c in every), plans, 0).check()
    arrays = CandidateArrays(every, profile)
    totals = [[] for _ in every]
    for plan in progress(plans, len(plans), "advise: simulating the candidates", "plan"):
        reps, inverse = arrays.groups(plan.n)
        times = [_device_s(plan, every[int(i)], profile) for i in reps]
        for index, rep in enumerate(inverse.tolist()):
            totals[index].append(times[rep])
    base = math.fsum(totals[every.index(baseline)])
    scores = {c.id: math.fsum(totals[i]) / base for i, c in enumerate(every) if c in cands}
    order = ranking(scores, {c.id: c.tiebreak() for c in cands})
    pick = next(c for c in cands if c.id == order[0])
    return pick, scores[order[0]], ranking_caveats([scores[cid] for cid in order])


def per_round_loss(plans: Sequence[Plan], cand: RblnConfiguration, profile: Profile) -> list[dict]:
    """Re-arrivals, KV misses and prefill tokens beyond full reuse, by round index."""
    rows: dict[int, dict[str, int]] = {}
    for plan in plans:
        result = simulate(plan, SimConfig.of(cand), profile)
        prompts = {s.session: s.prompts() for s in plan.sessions}
        for record in result.requests:
            if record.round == 0:
                continue
            before = prompts[record.session][record.round - 1]
            floor = record.prompt_tokens - profile.reusable_tokens(before, record.prompt_tokens)
            row = rows.setdefault(
                record.round, {"re_arrivals": 0, "misses": 0, "extra_prefill_tokens": 0}
            )
            row["re_arrivals"] += 1
            row["misses"] += record.cached_tokens == 0 and floor < record.prompt_tokens
            row["extra_prefill_tokens"] += record.computed_tokens - floor
    return [{"round": k, **rows[k]} for k in sorted(rows)]


def saving_spread(
    pool: Plan,
    n_set: Sequence[int],
    baseline: RblnConfiguration,
    pick: RblnConfiguration,
    profile: Profile,
    *,
    seed: int,
    resamples: int,
    draws: int = 1,
) -> dict[str, Any]:
    """The pick's saving over ``resamples`` fresh session sets (``bootstrap_spread``)."""

    def saving(plans: Sequence[Plan]) -> float:
        base = math.fsum(_device_s(p, baseline, profile) for p in plans)
        chosen = math.fsum(_device_s(p, pick, profile) for p in plans)
        return 1 - chosen / base

    return bootstrap_spread(pool, n_set, saving, seed=seed, resamples=resamples, draws=draws)


def bootstrap_spread(
    pool: Plan,
    n_set: Sequence[int],
    saving: Callable[[Sequence[Plan]], float],
    *,
    seed: int,
    resamples: int,
    draws: int = 1,
) -> dict[str, Any]:
    """``saving`` over ``resamples`` fresh session sets (``draws`` plans per N each, the
    evaluation inputs' shape, so the predicted saving is one draw of the same
    distribution: ``rearrival.search.verdict``): a seeded bootstrap over the trace's
    sessions; quantiles by the nearest-rank rule."""
    savings = []
    for b in progress(range(resamples), resamples, "advise: spread of the saving", "resample"):
        savings.append(saving(workload_plans(pool, n_set, draws, seed, f"bootstrap{b}")))
    ordered = sorted(savings)

    def quantile(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]

    low, median, high = (quantile(q) for q in SPREAD)
    return {"resamples": resamples, "seed": seed, "p05": low, "median": median, "p95": high}


def advise_trace(
    cfg: StudyConfig,
    trace: Path,
    *,
    n: Sequence[int] | None = None,
    token_scale: float = 1.0,
    search_dir: Path | None = None,
    seed: int = 0,
    resamples: int = RESAMPLES,
    workers: int = 2,
    profile: Profile | None = None,
    workload: str = TRACE_TIMING,
    time_origin: str = "first",
    axes: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The Section V-D summary for a trace's workload (the dict ``advise`` returns, plus
    the import's counts and the per-round baseline loss).

    ``workload`` ``trace`` (the default): the trace's sessions as its timestamps place
    them (``time_origin``), advised exactly as ``advise --plans`` advises the directory
    ``plans from-trace`` writes with the same options (issue 36: the two gave different
    answers for one trace). ``drawn``: a what-if the output names, N sessions drawn with
    replacement at each N, all starting together, with the saving's spread over
    resampled session sets."""
    profile = profile or measured_profile()
    check_workload(workload)
    if workload == TRACE_TIMING:
        return _advise_on_trace_timing(
            cfg, trace, n, token_scale, search_dir, workers, profile, time_origin, axes
        )
    imported = import_trace(trace, token_scale, profile)
    pool = imported.plan
    settings = override_settings(SearchSettings.from_config(cfg), **(axes or {}))
    if n is not None:
        settings = override_settings(settings, n=tuple(sorted(set(n))))
    memory = device_memory(profile)
    baseline = baseline_of(cfg)
    caveats: list[dict[str, str]] = []
    if search_dir is not None:
        recommendation = search_pick(cfg, search_dir, workers, profile, settings)
        pick, source = recommendation.pick, recommendation.source
        n_set = resolve_n(n, recommendation.search_n, settings.n, source)
    else:
        n_set = settings.n
        cands = search_candidates(settings, profile)
        space = settings_space(settings, profile)
        search_plans = workload_plans(pool, n_set, settings.seeds, seed, "search")
        pick, score, caveats = search_on(search_plans, cands, baseline, profile)
        source = (
            f"a search over {len(cands)} of {space.enumerated} candidates "
            f"({space.excluded_by_compile_budget} over the compile budget, "
            f"{space.excluded_by_memory} over device memory removed) on "
            f"{len(search_plans)} drawn workloads (score {score:.4f})"
        )
    plans = workload_plans(pool, n_set, settings.seeds, seed, "evaluation")
    larger = larger_candidate(pick, settings.batch_sizes)
    result = assess(plans, baseline, pick, larger, profile, memory, cfg.measurement.model.name)
    result["more_slots_next"] = next_search(result, settings, larger)
    spread = saving_spread(
        pool, n_set, baseline, pick, profile, seed=seed, resamples=resamples, draws=settings.seeds
    )
    own = import_trace(trace, token_scale, profile, time_origin="first").plan
    return {
        "inputs": (
            f"{len(plans)} workloads drawn from {pool.n} sessions of {trace} ({imported.source}, "
            f"sha256 {imported.trace_sha256[:12]}): N sessions each, with replacement, all "
            "starting at t = 0; never used to select"
        ),
        "workload": {
            "kind": DRAWN,
            "what_if": (
                "--workload drawn: N sessions drawn from the trace, all starting together, "
                "not the trace's own timing (--workload trace, the default)"
            ),
            "trace_peak_sessions": peak_sessions(own, baseline_of(cfg), profile),
        },
        "n": list(n_set),
        "recommendation_source": source,
        "profile": profile.identity(),
        "workload_notes": imported.summary_lines(),
        "import": {
            "source": imported.source,
            "trace_sha256": imported.trace_sha256,
            "flags": pool.meta.import_flags,
            "notes": pool.meta.notes,
        },
        "baseline_per_round": per_round_loss(plans, baseline, profile),
        "saving_spread": spread,
        "caveats": caveats
        + spread_caveats(spread)
        + outside_spread(result["predicted_saving"], spread)
        + n_caveats(n_set),
        **result,
    }
