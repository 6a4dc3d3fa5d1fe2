"""How much KV an agent fleet needs on vLLM, and which knobs (docs/DESIGN.md §15 "Search
and advice"): ``rearrival advise --substrate vllm``.

The question vLLM users ask is "is my agent workload cache-friendly, and how much KV do
I need?". A static analyzer answers only the first half, with a bound that assumes no
eviction and says nothing of time. This advice answers both with the exact predictor,
on the workload the RBLN advice builds (N sessions drawn from a trace, all starting
together; or a plans directory; or the config's generated inputs):

1. the prefix-cache hit rate the workload gets at each pool size (the pick's other
   knobs held), beside its structural upper bound (``prefix_bound``: every full-block
   prefix reused on an unbounded pool), with the re-arrivals that lost part of their
   prefix, the prefill tokens recomputed because tool waits let their blocks be evicted,
   preemptions, device time and the memory each pool leaves;
2. the search's pick (summed predicted device time over the search inputs, as the RBLN
   search; ties to the smaller pool), chosen on one set of inputs and predicted on
   another, and its saving against the baseline (vLLM's defaults, or ``--baseline``)
   with its spread over resampled session sets (a trace only, as ``advise --trace``);
3. the smallest pool whose cost is within 0.5 % of the pick's and the smallest that
   loses nothing to tool waits: the KV an operator can give up, and what it costs.

It says which profile priced it (name, sha256, device), and a CPU profile's times are
said to be CPU seconds of that machine and model, never GPU seconds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd

from rearrival.config.search import SearchSettings
from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.profile import GIB
from rearrival.model.cost.vllm_profile import VllmProfile, seconds_unit
from rearrival.model.plans.plan import Plan
from rearrival.model.plans.trace_plans import LongerContext
from rearrival.search.advise import SMALL_GAIN, both_inputs
from rearrival.search.caveats import score_caveats, spread_caveats
from rearrival.search.deploy import vllm_deployment, vllm_knobs
from rearrival.search.inputs import PlanKey
from rearrival.search.settings import override_settings
from rearrival.search.trace_advice import (
    DRAWN,
    TRACE_TIMING,
    bootstrap_spread,
    check_workload,
    import_trace,
    workload_plans,
)
from rearrival.search.verdict import deploy_choice, outside_spread
from rearrival.search.vllm.defaults import short_id
from rearrival.search.vllm.evaluate import device_s
from rearrival.search.vllm.outputs import (
    TIEBREAK,
    capture_caveats,
    memory_entry,
    pool_columns,
    pool_totals,
)
from rearrival.search.vllm.run import Inputs, Scored, overlap_caveats, score_inputs
from rearrival.search.vllm.space import VllmAxes, ladder_text, with_pool

KNOBS = ("max_num_seqs", "block_size", "max_num_batched_tokens", "capture_sizes")
CONTEXT_STEP = 1024  # a suggested max_model_len is rounded up to this


def longer_context(profile: VllmProfile, block_size: int) -> LongerContext:
    """What a longer ``max_model_len`` costs on vLLM: the pool must hold one such request
    (``rearrival.model.plans.trace_plans.LongerContext``)."""

    def cost(need: int) -> tuple[str, str]:
        longer = -(-need // CONTEXT_STEP) * CONTEXT_STEP
        blocks = -(-longer // block_size) + 1
        gib = blocks * profile.kv_bytes_per_block(block_size) / GIB
        return (
            f"give --max-model-len {longer:,} (if {profile.model_id} serves that length)",
            f"the pool must then hold at least {blocks:,} blocks of {block_size} tokens "
            f"({gib:.3f} GiB of KV)",
        )

    return cost


def trace_inputs(
    trace: Path,
    settings: SearchSettings,
    profile: VllmProfile,
    axes: VllmAxes,
    *,
    token_scale: float,
    max_model_len: int,
    seed: int,
    workload: str = TRACE_TIMING,
    time_origin: str = "first",
) -> tuple[Inputs, Any]:
    """The trace's inputs and the import (its counts and notes). ``workload`` ``trace``
    (the default): its sessions as the timestamps place them (``time_origin``), one plan
    that selects and is evaluated on, as ``advise --plans`` takes the import's directory
    (issue 36). ``drawn``: a what-if, workloads drawn from its sessions
    (``rearrival.search.trace_advice``), the search draws and the held-out evaluation
    draws, N sessions each at every N, all starting at t = 0."""
    check_workload(workload)
    imported = import_trace(
        trace,
        token_scale,
        None,
        max_seq_len=max_model_len,
        longer_context=longer_context(profile, axes.block_sizes[0]),
        time_origin=time_origin if workload == TRACE_TIMING else "zero",
    )
    pool = imported.plan
    if workload == TRACE_TIMING:
        own = override_settings(settings, n=(pool.n,))
        summary = {
            "trace": str(trace),
            "trace_sha256": imported.trace_sha256,
            "source": imported.source,
            "trace_sessions": pool.n,
            "workload": TRACE_TIMING,
            "time_origin": time_origin,
            "max_model_len": max_model_len,
            "token_scale": token_scale,
        }
        return Inputs(both_inputs([pool]), False, own, summary), imported
    keyed = []
    for inputs in ("search", "evaluation"):
        drawn = workload_plans(pool, settings.n, settings.seeds, seed, inputs)
        keyed += [
            (PlanKey(inputs, plan.n, i % settings.seeds, 0), plan) for i, plan in enumerate(drawn)
        ]
    summary = {
        "trace": str(trace),
        "trace_sha256": imported.trace_sha256,
        "source": imported.source,
        "trace_sessions": pool.n,
        "n": list(settings.n),
        "draws_per_n": settings.seeds,
        "workload": DRAWN,
        "seed": seed,
        "max_model_len": max_model_len,
        "token_scale": token_scale,
    }
    return Inputs(keyed, True, settings, summary), imported


def _rows(frame: pd.DataFrame, cid: str) -> pd.DataFrame:
    return frame[frame["candidate"] == cid]


def entry(scored: Scored, cand: VllmConfiguration, profile: VllmProfile) -> dict[str, Any]:
    """One configuration on the evaluation inputs: device time, hit rate and its bound,
    losses, and memory."""
    rows = _rows(scored.results, cand.id)
    held = rows[rows["inputs"] == "evaluation"]
    counted = pool_totals(held)[cand.id]
    return {
        "configuration": {
            "id": cand.id,
            "short_id": short_id(cand),
            **cand.as_dict(),
            "vllm": vllm_knobs(cand),
        },
        "device_s": math.fsum(held["device_s"].tolist()),
        **{k.removeprefix("e_"): v for k, v in pool_columns(counted, "e_").items()},
        **memory_entry(cand, profile),
    }


def pool_rows(scored: Scored, pick: VllmConfiguration, profile: VllmProfile) -> list[dict]:
    """The pick's knobs at every pool searched, smallest pool first."""
    table = scored.table
    same = table[(table[list(KNOBS)] == table.iloc[0][list(KNOBS)]).all(axis=1)]
    pools = sorted(int(v) for v in same["num_blocks"])
    return [entry(scored, with_pool(pick, k), profile) for k in pools]


def smallest_pools(rows: Sequence[dict], pick: dict) -> dict[str, Any]:
    """The smallest pool within ``SMALL_GAIN`` of the pick's device time, and the
    smallest that recomputes no prefill because of evictions (None: none searched)."""
    near = [r for r in rows if r["device_s"] <= pick["device_s"] * (1 + SMALL_GAIN)]
    lossless = [r for r in rows if r["recomputed_prefill_tokens"] == 0 and r["preemptions"] == 0]
    return {
        "within": SMALL_GAIN,
        "smallest_within": near[0]["configuration"]["num_blocks"] if near else None,
        "smallest_without_loss": lossless[0]["configuration"]["num_blocks"] if lossless else None,
    }


def advise_vllm(
    inputs: Inputs,
    axes: VllmAxes,
    profile: VllmProfile,
    *,
    baseline: str | None = None,
    trace_pool: Plan | None = None,
    seed: int = 0,
    resamples: int = 100,
    notes: Sequence[str] = (),
    source: str = "",
) -> dict[str, Any]:
    """The advice as a JSON-ready dict (see ``to_markdown``); ``trace_pool`` (a trace's
    sessions) adds the saving's spread over resampled session sets."""
    scored = score_inputs(inputs, axes, profile, baseline)
    pick = VllmConfiguration.from_id(str(scored.table.iloc[0]["id"]))
    base = scored.baseline[0]
    chosen, base_entry = entry(scored, pick, profile), entry(scored, base, profile)
    rows = pool_rows(scored, pick, profile)
    caveats = score_caveats(
        scored.table["score"].tolist(),
        float(scored.table["evaluation_score"].iat[0]),
        inputs.held_out,
        TIEBREAK,
    )
    caveats += capture_caveats(scored.space.candidates)
    spread = None
    predicted = 1 - chosen["device_s"] / base_entry["device_s"]
    verdict = deploy_choice(pick.id, base.id, predicted)
    if trace_pool is not None:
        cost = profile.step_cost

        def saving(plans: Sequence[Plan]) -> float:
            old = math.fsum(device_s(p, base, cost) for p in plans)
            return 1 - math.fsum(device_s(p, pick, cost) for p in plans) / old

        spread = bootstrap_spread(
            trace_pool,
            inputs.settings.n,
            saving,
            seed=seed,
            resamples=resamples,
            draws=inputs.settings.seeds,
        )
        caveats += spread_caveats(spread) + outside_spread(predicted, spread)
    elif caveats:
        caveats += overlap_caveats(inputs.of("search"), base, profile)
    score = float(scored.table.iloc[0]["score"])
    counts = scored.space.counts()
    return {
        "substrate": "vllm",
        "inputs": source,
        "inputs_detail": inputs.summary,
        "n": list(inputs.settings.n),
        "workload_notes": list(notes),
        "profile": profile.identity(),
        "profile_note": profile.seconds_note(),
        "profile_memory": None if profile.memory is None else asdict(profile.memory),
        "recommendation_source": (
            f"a search over {counts['searched']:,} of {counts['enumerated']:,} vLLM "
            f"configurations ({counts['excluded_by_budget']:,} with a token budget below "
            f"max_num_seqs, {counts['excluded_by_pool_too_small']:,} too small for the "
            f"longest request, {counts['excluded_by_memory']:,} over device memory) on "
            f"{len(inputs.of('search'))} search inputs (score {score:.4f})"
        ),
        "pools_from": ladder_text(scored.space),
        "space": counts,
        "baseline": {**base_entry, "why": scored.baseline[1]},
        "selected": chosen,
        "pools": rows,
        "predicted_saving": predicted,
        "recommendation": verdict,
        "deploy": vllm_deployment(
            base if verdict["keep_baseline"] else pick,
            model=profile.model_id,
            max_model_len=inputs.summary.get("max_model_len"),
        ),
        "saving_spread": spread,
        "smallest_pools": smallest_pools(rows, chosen),
        "simulations": scored.simulations,
        "caveats": caveats,
    }


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _left(row: dict[str, Any]) -> str:
    if row["fits_memory"] is None:
        return "n/a"
    text = f"{row['headroom_gib_per_device']:.3f}"
    return text if row["fits_memory"] else f"{text} (no fit)"


def memory_sentence(row: dict[str, Any], memory: dict[str, Any] | None) -> str:
    """Device memory of one configuration: KV, what the devices hold and what is left
    (``memory``: the profile's memory block)."""
    c = row["configuration"]
    blocks = f"{c['num_blocks']:,} blocks of {c['block_size']} tokens"
    kv = f"{blocks} hold {row['kv_gib']:.3f} GiB of KV"
    if row["fits_memory"] is None or memory is None:
        return f"{kv}; the profile has no memory block, so what is left is not known"
    weights = f"the weights ({memory['weights_gib']:g} GiB"
    besides = (
        f"{weights}) and other overhead ({memory['overhead_gib']:g} GiB)"
        if memory["overhead_gib"] is not None
        else f"{weights}; the profile gives no other overhead)"
    )
    text = (
        f"{kv}; with {besides} that is {row['memory_gib_per_device']:.3f} GiB per device of "
        f"{row['device_memory_gib']:.3f} GiB on each of {memory['num_devices']}"
    )
    if row["fits_memory"]:
        return f"{text}: leaves {row['headroom_gib_per_device']:.3f} GiB per device"
    return f"{text}: DOES NOT FIT ({-row['headroom_gib_per_device']:.3f} GiB short)"


def to_markdown(advice: dict[str, Any]) -> str:
    """Human-readable report of ``advise_vllm`` (prints as Markdown)."""
    chosen, base = advice["selected"], advice["baseline"]
    unit = seconds_unit(advice["profile"])
    ident = advice["profile"]
    lines = [
        "# How much KV, and which knobs (vLLM substrate)",
        "",
        *[f"**Caveat:** {c['message']}." for c in advice["caveats"]],
        *([""] if advice["caveats"] else []),
        f"Inputs: {advice['inputs']}; N {','.join(map(str, advice['n']))}. Predictions of "
        "the vLLM rule set (vLLM 0.32.0's scheduler, docs/DESIGN.md §15), not measurements.",
        f"Profile: {ident['name']} ({ident['version']}, device {ident['device']}, model "
        f"{ident['model_id']}, sha256 {ident['sha256']}).",
        f"**{advice['profile_note']}.**",
        *[f"- {note}" for note in advice["workload_notes"]],
        "",
        "## 1. Prefix-cache hit rate by pool size",
        "",
        f"At the pick's other knobs (max_num_seqs {chosen['configuration']['batch_size']}, "
        f"token budget {chosen['configuration']['max_num_batched_tokens']}, block size "
        f"{chosen['configuration']['block_size']}), on the evaluation inputs. The upper "
        "bound is what a static analyzer says: every full-block prefix reused, no "
        "eviction. Pools: " + advice["pools_from"] + ".",
        "",
        f"| pool blocks | KV GiB | hit rate | upper bound | re-arrivals losing prefix | "
        f"recomputed prefill tokens | preemptions | device {unit} | memory left GiB/device |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in advice["pools"]:
        lines.append(
            f"| {row['configuration']['num_blocks']:,} | {row['kv_gib']:.3f} | "
            f"{_pct(row['hit_rate'])} | {_pct(row['upper_bound'])} | "
            f"{row['re_arrivals_lost']}/{row['re_arrivals']} | "
            f"{row['recomputed_prefill_tokens']:,} | {row['preemptions']} | "
            f"{row['device_s']:.3f} | {_left(row)} |"
        )
    smallest = advice["smallest_pools"]
    lines += [
        "",
        "## 2. The pick",
        "",
        f"Pick: `{chosen['configuration']['short_id']}` ({knob_text(chosen)}) from "
        f"{advice['recommendation_source']}.",
        f"Baseline: `{base['configuration']['short_id']}`: {base['why']}.",
        "",
        f"| configuration | device {unit} | hit rate | upper bound | recomputed prefill "
        "tokens | preemptions | KV GiB | memory left GiB/device |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, row in (("baseline", base), ("pick", chosen)):
        lines.append(
            f"| {label} `{row['configuration']['short_id']}` | {row['device_s']:.3f} | "
            f"{_pct(row['hit_rate'])} | {_pct(row['upper_bound'])} | "
            f"{row['recomputed_prefill_tokens']:,} | {row['preemptions']} | "
            f"{row['kv_gib']:.3f} | {_left(row)} |"
        )
    lines += [
        "",
        f"Predicted saving of the pick: {100 * advice['predicted_saving']:.2f} % of device "
        "time against the baseline.",
        *_spread_lines(advice.get("saving_spread")),
        f"**Recommended: `{advice['recommendation']['id']}`** ({advice['recommendation']['why']}).",
        *vllm_deploy_lines(advice),
        f"Memory: {memory_sentence(chosen, advice['profile_memory'])}.",
        "",
        "## 3. How much KV",
        "",
        _smallest_line(smallest),
        "",
        "Validate the pick on the server itself (`rearrival run --backend vllm`) before "
        "relying on it.",
    ]
    return "\n".join(lines)


def knob_text(row: dict[str, Any]) -> str:
    """A configuration in vLLM's own knob names (``rearrival.search.deploy``)."""
    knobs = row["configuration"]["vllm"]
    shown = {k: v for k, v in knobs.items() if k not in ("enable_prefix_caching",) and v}
    return ", ".join(
        f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in shown.items()
    )


def vllm_deploy_lines(advice: dict[str, Any]) -> list[str]:
    """What to run for the recommended configuration."""
    deploy = advice.get("deploy")
    if not deploy:
        return []
    lines = [
        "",
        f"What to run (model {advice['profile']['model_id']}, the profile's):",
        "",
        "```sh",
    ]
    return [*lines, *deploy["commands"], "```"]


def _spread_lines(spread: dict[str, Any] | None) -> list[str]:
    if not spread:
        return []
    return [
        f"Over {spread['resamples']} resampled session sets (bootstrap over sessions, seed "
        f"{spread['seed']}): median {100 * spread['median']:.2f} %, 90 % of them between "
        f"{100 * spread['p05']:.2f} % and {100 * spread['p95']:.2f} %."
    ]


def _smallest_line(smallest: dict[str, Any]) -> str:
    within = smallest["smallest_within"]
    lossless = smallest["smallest_without_loss"]
    parts = []
    if within is not None:
        parts.append(
            f"the smallest pool within {100 * smallest['within']:.1f} % of the pick's device "
            f"time is {within:,} blocks"
        )
    parts.append(
        f"the smallest that loses no prefill to evictions or preemptions is {lossless:,} blocks"
        if lossless is not None
        else "every pool searched loses some prefill to evictions or preemptions"
    )
    return "At the pick's knobs, " + "; ".join(parts) + "."
