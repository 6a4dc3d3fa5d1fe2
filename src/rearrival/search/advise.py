""" "What should I compile": the paper's configuration selection procedure (Section V-D).

The paper ends with a procedure rather than a universal configuration: (1) diagnose the
baseline's losses (re-arrivals that miss their KV, the extra prefill they compute, the
request counts and buckets of decode steps); (2) compare candidates with the simulator
under the compile budget and memory; (3) validate the pick on new inputs; (4) check
whether more slots still pay once reuse losses are gone, and if the further gain is small
prefer the smaller configuration (memory and compile cost, Tables XIII-XV).

This module runs (1), (2) and (4) with the base simulator on the given inputs (by default
the config's evaluation inputs at one N, which the search never selects on) and reports
them; (3) needs measurements and is the job of the evaluation studies.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rearrival.config.study import StudyConfig, tool_table_for
from rearrival.model.plans import Plan, load_plan
from rearrival.model.profile import Profile, measured_profile
from rearrival.model.sim import simulate
from rearrival.search.scoring import (
    Candidate,
    PlanKey,
    SearchError,
    SearchSettings,
    baseline_of,
    make_plan,
    parse_candidate_id,
    select,
)

# Below this further saving (paper V-C: 16 -> 24 -> 32 slots changed cost by < 0.1 %
# once reuse was complete) more slots are not worth their memory and compile cost.
SMALL_GAIN = 0.005
# Step to the next larger batch when the search offers none (Table XIII: 16, 24, 32).
SLOT_STEP = 8


def load_plan_dir(plans_dir: Path) -> list[Plan]:
    """Every plan file (.parquet/.json) under ``plans_dir``, in path order."""
    paths = sorted(p for p in plans_dir.rglob("*") if p.suffix in (".parquet", ".json"))
    if not paths:
        raise SearchError(
            f"plans directory {plans_dir}: no .parquet or .json plan files; "
            "write some with `rearrival plan` or `rearrival search plans`"
        )
    return [load_plan(p) for p in paths]


def evaluation_plans(cfg: StudyConfig, n: int) -> list[Plan]:
    """The config's evaluation inputs at one N: seeds x blocks plans never used to select."""

    settings = SearchSettings.from_config(cfg)
    table = tool_table_for(cfg)
    return [
        make_plan(PlanKey("evaluation", n, seed, block), settings, cfg.study_seed, table)
        for seed in range(settings.seeds)
        for block in range(settings.blocks)
    ]


def predict(
    plans: Sequence[Plan], candidate: Candidate, profile: Profile | None = None
) -> dict[str, Any]:
    """Base-simulator totals over the inputs (seconds summed first) and the summed h(n->b)."""
    results = [simulate(p, candidate.sim_config(), profile) for p in plans]
    histogram: dict[str, int] = {}
    for r in results:
        for (n, b), steps in r.histogram_nb.items():
            histogram[f"{n}->{b}"] = histogram.get(f"{n}->{b}", 0) + steps
    padded = sum(int(k.split("->")[1]) * v for k, v in histogram.items())
    used = sum(int(k.split("->")[0]) * v for k, v in histogram.items())
    return {
        "configuration": candidate.as_dict(),
        "device_s": math.fsum(r.device_s for r in results),
        "decode_s": math.fsum(r.decode_s for r in results),
        "prefill_s": math.fsum(r.prefill_s for r in results),
        "reuse_hits": sum(r.reuse_hits for r in results),
        "re_arrivals": sum(r.re_arrivals for r in results),
        "computed_prefill_tokens": sum(r.computed_prefill_tokens for r in results),
        "padding_ratio": (padded - used) / padded if padded else 0.0,
        "histogram": dict(
            sorted(histogram.items(), key=lambda kv: tuple(map(int, kv[0].split("->"))))
        ),
    }


def full_reuse_tokens(plans: Sequence[Plan], profile: Profile) -> int:
    """Re-arrival prefill tokens if every re-arrival found its own KV (the floor)."""
    return sum(
        s.followup_prompt_tokens
        - profile.reusable_tokens(s.prompt_tokens, s.followup_prompt_tokens)
        for p in plans
        for s in p.sessions
    )


def larger_candidate(pick: Candidate, batch_sizes: Sequence[int]) -> Candidate:
    """The pick's buckets with a larger top: the next searched batch size, else +8 slots
    (the saturation study's 16 -> 24 -> 32 steps, paper V-C)."""
    bigger = sorted(b for b in batch_sizes if b > pick.batch_size)
    top = bigger[0] if bigger else pick.batch_size + SLOT_STEP
    return Candidate((*pick.buckets[:-1], top), top)


def resources(candidate: Candidate, profile: Profile) -> dict[str, Any]:
    kv = profile.kv_gib(candidate.slots)
    compile_s = profile.compile_seconds(candidate.n_buckets)
    return {
        "kv_gib": kv,
        "kv_gib_per_device": kv / profile.num_devices,
        "compile_s": compile_s,
        "artifact_gib": profile.artifact_gib(candidate.n_buckets),
        "within_compile_budget": compile_s <= profile.compile_budget_s,
    }


def _pick(
    cfg: StudyConfig, search_dir: Path | None, workers: int, profile: Profile | None = None
) -> tuple[Candidate, str]:
    if search_dir is None:
        pick, score = select(cfg, workers, profile)
        return pick, f"search run now on the config's search inputs (score {score:.4f})"
    # --search takes the finished search's directory or its selected.json itself
    path = search_dir if search_dir.is_file() else search_dir / "selected.json"
    try:
        raw = json.loads(path.read_text())
        pick = parse_candidate_id(raw["id"])
    except (OSError, ValueError, KeyError) as exc:
        raise SearchError(
            f"{path}: no usable search result ({exc}); give the "
            "directory of a finished `rearrival search` or its "
            "selected.json, or no search result at all"
        ) from exc
    return pick, f"{path} (search score {raw.get('search_score', float('nan')):.4f})"


def advise(
    cfg: StudyConfig,
    *,
    n: int = 8,
    plans_dir: Path | None = None,
    search_dir: Path | None = None,
    workers: int = 2,
    profile: Profile | None = None,
) -> dict[str, Any]:
    """The Section V-D summary as a JSON-ready dict (see ``to_markdown``)."""
    profile = profile or measured_profile()
    settings = SearchSettings.from_config(cfg)
    if plans_dir is None:
        plans = evaluation_plans(cfg, n)
        source = (
            f"{len(plans)} evaluation plans of the config at N={n} "
            f"(seed block {settings.evaluation_seed_block}, never used to select)"
        )
    else:
        plans = load_plan_dir(plans_dir)
        source = f"{len(plans)} plan files under {plans_dir}"
    baseline = baseline_of(cfg)
    pick, pick_source = _pick(cfg, search_dir, workers, profile)
    larger = larger_candidate(pick, settings.batch_sizes)
    floor = full_reuse_tokens(plans, profile)
    base, chosen, more = (predict(plans, c, profile) for c in (baseline, pick, larger))
    for entry, cand in ((base, baseline), (chosen, pick), (more, larger)):
        entry["extra_prefill_tokens"] = entry["computed_prefill_tokens"] - floor
        entry["reuse_misses"] = entry["re_arrivals"] - entry["reuse_hits"]
        entry.update(resources(cand, profile))
    further = 1 - more["device_s"] / chosen["device_s"]
    complete = chosen["extra_prefill_tokens"] == 0
    if further < SMALL_GAIN and complete:
        verdict = (
            "more slots would not help; consider the smaller configuration "
            f"({pick.id} over {larger.id})"
        )
    elif further < SMALL_GAIN:
        verdict = (
            f"reuse is still incomplete at {pick.id}, but {larger.id} saves only "
            f"{100 * further:.2f} % more; more slots would barely help"
        )
    else:
        verdict = f"more slots still help: {larger.id} saves a further {100 * further:.2f} %"
    return {
        "inputs": source,
        "recommendation_source": pick_source,
        "baseline": base,
        "selected": chosen,
        "larger": more,
        "full_reuse_prefill_tokens": floor,
        "predicted_saving": 1 - chosen["device_s"] / base["device_s"],
        "decode_ratio": chosen["decode_s"] / base["decode_s"],
        "prefill_ratio": chosen["prefill_s"] / base["prefill_s"],
        "further_saving_larger": further,
        "more_slots_verdict": verdict,
        "compile_budget_s": profile.compile_budget_s,
        "num_devices": profile.num_devices,
    }


def _config_cell(entry: dict[str, Any]) -> str:
    c = entry["configuration"]
    return f"`{c['id']}` (slots {c['slots']})"


def to_markdown(advice: dict[str, Any]) -> str:
    """Human-readable report of ``advise`` (prints as Markdown)."""
    base, chosen, more = advice["baseline"], advice["selected"], advice["larger"]
    lines = [
        "# What to compile (paper Section V-D)",
        "",
        f"Inputs: {advice['inputs']}. Predictions of the base simulator, not measurements.",
        "",
        "## 1. Baseline losses",
        "",
        f"- Baseline {_config_cell(base)}: {base['reuse_hits']} of {base['re_arrivals']} "
        f"re-arrivals reuse their KV ({base['reuse_misses']} miss).",
        f"- Extra re-arrival prefill: {base['extra_prefill_tokens']:,} tokens over the "
        f"{advice['full_reuse_prefill_tokens']:,} that full reuse would compute.",
        f"- Decode padding ratio {base['padding_ratio']:.3f}; steps by running count -> "
        "bucket: " + ", ".join(f"{k}: {v}" for k, v in base["histogram"].items()),
        "",
        "## 2. Recommended configuration",
        "",
        f"Pick: {_config_cell(chosen)} from {advice['recommendation_source']}.",
        "",
        "| configuration | device s | decode s | prefill s | reuse | extra prefill tokens "
        "| KV GiB (per device) | compile s | artifact GiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for entry in (base, chosen, more):
        lines.append(
            f"| {_config_cell(entry)} | {entry['device_s']:.3f} | {entry['decode_s']:.3f} | "
            f"{entry['prefill_s']:.3f} | {entry['reuse_hits']}/{entry['re_arrivals']} | "
            f"{entry['extra_prefill_tokens']:,} | {entry['kv_gib']:.3f} "
            f"({entry['kv_gib_per_device']:.4f}) | {entry['compile_s']:.0f} | "
            f"{entry['artifact_gib']:.2f} |"
        )
    lines += [
        "",
        f"Predicted saving of the pick: {100 * advice['predicted_saving']:.2f} % of device "
        f"time (decode x{advice['decode_ratio']:.4f}, prefill x{advice['prefill_ratio']:.4f}).",
        f"Compile budget {advice['compile_budget_s']:.0f} s: "
        + ("within" if chosen["within_compile_budget"] else "EXCEEDED")
        + ".",
        "",
        "## 3. More slots?",
        "",
        f"{advice['more_slots_verdict']}.",
        "",
        "Validate the pick on new inputs with predictions and criteria fixed beforehand "
        "before relying on it (paper V-B).",
    ]
    return "\n".join(lines)
