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
from itertools import pairwise
from pathlib import Path
from typing import Any, NamedTuple

from rearrival.config.calibration import ModelSpec
from rearrival.config.search import SearchError, SearchSettings
from rearrival.config.study import StudyConfig, tool_table_for
from rearrival.model.configuration import RblnConfiguration
from rearrival.model.cost.memory import DeviceMemory, device_memory
from rearrival.model.cost.profile import Profile, calibration_note, measured_profile
from rearrival.model.plans.plan import Plan, check_context
from rearrival.model.simulator.rbln.sim import SimConfig, simulate
from rearrival.search.candidates import baseline_of, candidate_record
from rearrival.search.caveats import import_caveats, n_caveats, overlap_caveat
from rearrival.search.deploy import rbln_deployment
from rearrival.search.inputs import PlanKey, make_plan, workload_plans
from rearrival.search.plan_files import keyed_plans, load_plan_dir
from rearrival.search.run import select
from rearrival.search.settings import override_settings
from rearrival.search.verdict import deploy_choice

# Below this further saving (paper V-C: 16 -> 24 -> 32 slots changed cost by < 0.1 %
# once reuse was complete) more slots are not worth their memory and compile cost.
SMALL_GAIN = 0.005
# Step to the next larger batch when the search offers none (Table XIII: 16, 24, 32).
SLOT_STEP = 8


def evaluation_plans(
    cfg: StudyConfig, n_set: Sequence[int], settings: SearchSettings | None = None
) -> list[Plan]:
    """The config's evaluation inputs at each N: seeds x blocks plans never used to select
    (``settings``: a study's own search, e.g. over agent sessions)."""

    settings = settings or SearchSettings.from_config(cfg)
    table = tool_table_for(cfg)
    workload = workload_plans(settings)
    return [
        make_plan(PlanKey("evaluation", n, seed, block), settings, cfg.study_seed, table, workload)
        for n in n_set
        for seed in range(settings.seeds)
        for block in range(settings.blocks)
    ]


def predict(
    plans: Sequence[Plan], candidate: RblnConfiguration, profile: Profile | None = None
) -> dict[str, Any]:
    """Base-simulator totals over the inputs (seconds summed first) and the summed h(n->b)."""
    results = [simulate(p, SimConfig.of(candidate), profile) for p in plans]
    histogram: dict[str, int] = {}
    for r in results:
        for (n, b), steps in r.histogram_nb.items():
            histogram[f"{n}->{b}"] = histogram.get(f"{n}->{b}", 0) + steps
    padded = sum(int(k.split("->")[1]) * v for k, v in histogram.items())
    used = sum(int(k.split("->")[0]) * v for k, v in histogram.items())
    return {
        "configuration": candidate_record(candidate),
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
    """Re-arrival prefill tokens if every re-arrival found its own KV (the floor): each
    round after a session's first computes its prompt minus what the previous prompt
    leaves in the slot."""
    total = 0
    for plan in plans:
        for s in plan.sessions:
            prompts = s.prompts()
            total += sum(
                now - profile.reusable_tokens(before, now) for before, now in pairwise(prompts)
            )
    return total


def larger_candidate(pick: RblnConfiguration, batch_sizes: Sequence[int]) -> RblnConfiguration:
    """The pick's buckets with a larger top: the next searched batch size, else +8 slots
    (the saturation study's 16 -> 24 -> 32 steps, paper V-C)."""
    bigger = sorted(b for b in batch_sizes if b > pick.batch_size)
    top = bigger[0] if bigger else pick.batch_size + SLOT_STEP
    return RblnConfiguration((*pick.buckets[:-1], top), top)


def resources(
    candidate: RblnConfiguration, profile: Profile, memory: DeviceMemory
) -> dict[str, Any]:
    """Compile cost, artifact and KV memory of a configuration, checked against the
    devices: weights plus KV per device, the device's memory and what is left."""
    kv = profile.kv_gib(candidate.slots)
    compile_s = profile.compile_seconds(candidate.n_buckets)
    return {
        "kv_gib": kv,
        "kv_gib_per_device": kv / profile.num_devices,
        "memory_gib_per_device": memory.gib_per_device(candidate.slots),
        "device_memory_gib": memory.per_device_gib,
        "headroom_gib_per_device": memory.headroom_gib_per_device(candidate.slots),
        "fits_memory": memory.fits(candidate.slots),
        "compile_s": compile_s,
        "artifact_gib": profile.artifact_gib(candidate.n_buckets),
        "within_compile_budget": compile_s <= profile.compile_budget_s,
    }


class Recommendation(NamedTuple):
    """The pick, where it came from, the N set the search chose it at (None when a
    search result does not record it) and what the search's ranking cannot tell."""

    pick: RblnConfiguration
    source: str
    search_n: tuple[int, ...] | None
    caveats: list[dict[str, str]]


def search_pick(
    cfg: StudyConfig,
    search_dir: Path | None,
    workers: int,
    profile: Profile,
    settings: SearchSettings,
) -> Recommendation:
    """The search's pick: run now on the generated inputs, or read from ``search_dir``."""
    if search_dir is None:
        chosen = select(cfg, workers, profile, settings)
        n_text = ",".join(map(str, settings.n))
        source = f"search run now at N {n_text} (score {chosen.score:.4f})"
        return Recommendation(chosen.candidate, source, settings.n, chosen.caveats)
    # --search takes the finished search's directory or its selected.json itself
    path = search_dir if search_dir.is_file() else search_dir / "selected.json"
    try:
        raw = json.loads(path.read_text())
        pick = RblnConfiguration.from_id(raw["id"])
        recorded = raw.get("search_n")
        search_n = None if recorded is None else tuple(int(v) for v in recorded)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SearchError(
            f"{path}: no usable search result ({exc}); give the "
            "directory of a finished `rearrival search` or its "
            "selected.json, or no search result at all"
        ) from exc
    score = raw.get("search_score", float("nan"))
    return Recommendation(pick, f"{path} (search score {score:.4f})", search_n, [])


def pick_on_plans(
    cfg: StudyConfig,
    plans_dir: Path | str,
    workers: int,
    profile: Profile,
    settings: SearchSettings,
    given: Sequence[Plan] | None = None,
) -> tuple[Recommendation, list[Plan]]:
    """The search run on the agent sessions of a plans directory itself (as ``search
    --plans`` runs it: ``search/`` selects and ``evaluation/`` is held out when both are
    there, else every plan does both), and the plans the advice is evaluated on.
    ``given``: plans already in memory (``advise --trace``'s import), named ``plans_dir``,
    which select and are evaluated on alike, as one imported plan directory is."""
    if given is None:
        keyed, held_out = keyed_plans(Path(plans_dir), profile.slot_tokens)
    else:
        keyed, held_out = both_inputs(given), False
    searched = [(key, plan) for key, plan in keyed if key.inputs == "search"]
    chosen = select(cfg, workers, profile, settings, plans=searched)
    caveats = chosen.caveats
    if caveats:
        caveats = caveats + overlap_caveat([p for _, p in searched], baseline_of(cfg), profile)
    where = (
        f"{plans_dir}/search (evaluation/ held out)"
        if held_out
        else f"{plans_dir}, the same plans the advice is evaluated on (not held out)"
    )
    files = f"{len(searched)} plan{'' if given is not None else ' file'}" + (
        "" if len(searched) == 1 else "s"
    )
    source = f"a search over the {files} under {where} (score {chosen.score:.4f})"
    evaluated = [plan for key, plan in keyed if key.inputs == "evaluation"]
    return Recommendation(chosen.candidate, source, settings.n, caveats), evaluated


def both_inputs(plans: Sequence[Plan]) -> list[tuple[PlanKey, Plan]]:
    """Plans that select and are evaluated on alike (``keyed_plans`` of one directory)."""
    keyed = []
    for inputs in ("search", "evaluation"):
        seen: dict[int, int] = {}
        for plan in plans:
            index = seen[plan.n] = seen.get(plan.n, -1) + 1
            keyed.append((PlanKey(inputs, plan.n, index, 0), plan))
    return keyed


def resolve_n(
    asked: Sequence[int] | None,
    search_n: Sequence[int] | None,
    default: Sequence[int],
    source: str,
) -> tuple[int, ...]:
    """The N set advice is evaluated at: the search's own (``default`` when the search
    result does not record it), or ``asked`` when it agrees.

    A pick chosen at one N set says nothing about another (paper V-A: the pick depended
    on N), so a mismatch is refused rather than silently evaluated."""
    if asked is None:
        return tuple(sorted(default if search_n is None else search_n))
    asked = tuple(sorted(set(asked)))
    if search_n is not None and asked != tuple(sorted(search_n)):
        wanted = ",".join(map(str, asked))
        raise SearchError(
            f"N {wanted} differs from the N set {','.join(map(str, sorted(search_n)))} the "
            f"search chose its pick at ({source}); omit --n to evaluate at the search's N, "
            f"or run the search at N {wanted} (`rearrival search --n {wanted} --out DIR`)"
        )
    return asked


def assess(
    plans: Sequence[Plan],
    baseline: RblnConfiguration,
    pick: RblnConfiguration,
    larger: RblnConfiguration,
    profile: Profile,
    memory: DeviceMemory,
    model: str = ModelSpec.name,
) -> dict[str, Any]:
    """Steps (1), (2) and (4) of V-D on ``plans``: the three configurations predicted,
    each with its reuse loss, compile cost and memory, the more-slots verdict, and what
    to run to deploy the recommended one (``model``: the served model's id)."""
    floor = full_reuse_tokens(plans, profile)
    base, chosen, more = (predict(plans, c, profile) for c in (baseline, pick, larger))
    for entry, cand in ((base, baseline), (chosen, pick), (more, larger)):
        entry["extra_prefill_tokens"] = entry["computed_prefill_tokens"] - floor
        entry["reuse_misses"] = entry["re_arrivals"] - entry["reuse_hits"]
        entry.update(resources(cand, profile, memory))
    further = 1 - more["device_s"] / chosen["device_s"]
    saving = 1 - chosen["device_s"] / base["device_s"]
    verdict = deploy_choice(pick.id, baseline.id, saving)
    deployed = baseline if verdict["keep_baseline"] else pick
    return {
        "model": {
            "name": model,
            "max_seq_len": profile.slot_tokens,
            "num_devices": profile.num_devices,
        },
        "deploy": rbln_deployment(
            deployed, model=model, max_seq_len=profile.slot_tokens, num_devices=profile.num_devices
        ),
        "baseline": base,
        "selected": chosen,
        "larger": more,
        "full_reuse_prefill_tokens": floor,
        "predicted_saving": saving,
        "recommendation": verdict,
        "decode_ratio": chosen["decode_s"] / base["decode_s"],
        "prefill_ratio": chosen["prefill_s"] / base["prefill_s"],
        "further_saving_larger": further,
        "more_slots_verdict": more_slots_verdict(pick, larger, chosen, more, further),
        "compile_budget_s": profile.compile_budget_s,
        "num_devices": profile.num_devices,
        "max_slots_in_memory": memory.max_slots(),
    }


def next_search(
    result: dict[str, Any], settings: SearchSettings, larger: RblnConfiguration
) -> str | None:
    """The command that searches the larger batch size when more slots still help and
    fit, but the search did not offer it (issue 36: the verdict could not be followed)."""
    if not result["more_slots_verdict"].startswith("more slots still help"):
        return None
    if larger.batch_size in settings.batch_sizes:
        return None
    sizes = ",".join(map(str, sorted({*settings.batch_sizes, larger.batch_size})))
    n_text = ",".join(map(str, settings.n))
    return f"rearrival advise --batch-sizes {sizes} --n {n_text}"


def more_slots_verdict(
    pick: RblnConfiguration,
    larger: RblnConfiguration,
    chosen: dict[str, Any],
    more: dict[str, Any],
    further: float,
) -> str:
    """Step (4): do more slots pay, and do they fit the devices at all?"""
    if not more["fits_memory"]:
        return (
            f"more slots do not fit: {larger.id} needs {more['memory_gib_per_device']:.2f} GiB "
            f"per device of {more['device_memory_gib']:.2f} GiB (it would save a further "
            f"{100 * further:.2f} %); {pick.id} is the most this device allows here"
        )
    if further >= SMALL_GAIN:
        return f"more slots still help: {larger.id} saves a further {100 * further:.2f} %"
    if chosen["extra_prefill_tokens"] == 0:
        return (
            "more slots would not help; consider the smaller configuration "
            f"({pick.id} over {larger.id})"
        )
    return (
        f"reuse is still incomplete at {pick.id}, but {larger.id} saves only "
        f"{100 * further:.2f} % more; more slots would barely help"
    )


def advise(
    cfg: StudyConfig,
    *,
    n: Sequence[int] | None = None,
    plans_dir: Path | None = None,
    search_dir: Path | None = None,
    workers: int = 2,
    profile: Profile | None = None,
    study: str | None = None,
    plans: Sequence[Plan] | None = None,
    plans_name: str | None = None,
    axes: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The Section V-D summary as a JSON-ready dict (see ``to_markdown``).

    Inputs are the config's evaluation plans at the search's N set (``n`` must agree with
    it), or the plans under ``plans_dir`` (the search then runs at their N set), or
    ``plans`` already in memory, named ``plans_name`` (``advise --trace``: the same answer
    as ``advise --plans`` on the import's directory, issue 36). With ``study``, that
    study's own search and evaluation inputs (e.g. agent sessions) and its baseline.
    ``axes``: the search's own options (``batch_sizes``, ``max_buckets``) in place of the
    config's, as ``rearrival search`` takes them."""
    profile = profile or measured_profile()
    settings = (
        SearchSettings.from_config(cfg) if study is None else SearchSettings.for_study(cfg, study)
    )
    settings = override_settings(settings, **(axes or {}))
    given = plans is not None
    if given:
        plans = list(plans)
        for plan in plans:
            check_context(
                plan,
                profile.slot_tokens,
                f"{plans_name} (profile measured at {profile.slot_tokens:,})",
            )
        plans_dir = Path(plans_name or "the given plans")
    elif plans_dir is not None:
        plans = load_plan_dir(plans_dir, profile.slot_tokens)
    if plans is not None:
        n = sorted({p.n for p in plans}) if n is None else n
    if search_dir is None and n is not None:
        settings = override_settings(settings, n=tuple(sorted(set(n))))
    if plans is not None and own_search(plans, search_dir, settings):
        recommendation, plans = pick_on_plans(
            cfg, plans_name or plans_dir, workers, profile, settings, plans if given else None
        )
    else:
        recommendation = search_pick(cfg, search_dir, workers, profile, settings)
    pick, pick_source = recommendation.pick, recommendation.source
    n_set = resolve_n(n, recommendation.search_n, settings.n, pick_source)
    if plans is None:
        plans = evaluation_plans(cfg, n_set, settings)
        source = (
            f"{len(plans)} evaluation plans of the config at N {','.join(map(str, n_set))} "
            f"(seed block {settings.evaluation_seed_block}, never used to select)"
        )
    elif given:
        source = f"{len(plans)} plan{'' if len(plans) == 1 else 's'} of {plans_name}"
    else:
        source = f"{len(plans)} plan files under {plans_dir}"
    larger = larger_candidate(pick, settings.batch_sizes)
    baseline = baseline_of(cfg, study)
    result = assess(
        plans, baseline, pick, larger, profile, device_memory(profile), cfg.measurement.model.name
    )
    result["more_slots_next"] = next_search(result, settings, larger)
    return {
        "inputs": source,
        "n": list(n_set),
        "recommendation_source": pick_source,
        "profile": profile.identity(),
        "caveats": recommendation.caveats + n_caveats(n_set) + import_caveats(plans),
        **result,
    }


def own_search(plans: Sequence[Plan], search_dir: Path | None, settings: SearchSettings) -> bool:
    """Whether the advice searches on the plans it was given: agent sessions (several
    rounds) with no finished search and no study workload to select on, which the
    paper's generated two-round sessions would not represent."""
    return search_dir is None and settings.workload is None and any(p.multi_round for p in plans)


def profile_phrase(identity: dict[str, str]) -> str:
    """The profile an advice was priced with, as its Markdown names it."""
    note = calibration_note(identity["version"])
    text = f"{identity['name']} ({identity['version']}, sha256 {identity['sha256']})"
    return f"{text}; {note}" if note else text


def _config_cell(entry: dict[str, Any]) -> str:
    c = entry["configuration"]
    return f"`{c['id']}` (slots {c['slots']})"


def memory_sentence(entry: dict[str, Any]) -> str:
    """Device memory of one configuration: used, available and left per device."""
    c = entry["configuration"]
    text = (
        f"weights + {c['slots']} KV slots take {entry['memory_gib_per_device']:.2f} GiB per "
        f"device of {entry['device_memory_gib']:.2f} GiB"
    )
    if entry["fits_memory"]:
        return f"{text}: leaves {entry['headroom_gib_per_device']:.2f} GiB per device"
    return f"{text}: DOES NOT FIT ({-entry['headroom_gib_per_device']:.2f} GiB short per device)"


def _per_round_lines(advice: dict[str, Any]) -> list[str]:
    """The baseline's reuse loss by round (multi-round workloads only)."""
    rows = advice.get("baseline_per_round")
    if not rows:
        return []
    lines = [
        "",
        "| round | re-arrivals | KV misses | extra prefill tokens |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {r['round']} | {r['re_arrivals']} | {r['misses']} | {r['extra_prefill_tokens']:,} |"
        for r in rows
    ]
    return lines


def _spread_line(advice: dict[str, Any]) -> list[str]:
    spread = advice.get("saving_spread")
    if not spread:
        return []
    return [
        f"Over {spread['resamples']} resampled session sets (bootstrap over sessions, seed "
        f"{spread['seed']}): median {100 * spread['median']:.2f} %, 90 % of them between "
        f"{100 * spread['p05']:.2f} % and {100 * spread['p95']:.2f} %.",
    ]


def deploy_lines(advice: dict[str, Any]) -> list[str]:
    """What to run for the recommended configuration (``rearrival.search.deploy``)."""
    deploy = advice.get("deploy")
    if not deploy:
        return []
    model = advice.get("model")
    lines = [""]
    if model:
        lines.append(
            f"Model: {model['name']} at a maximum sequence length of {model['max_seq_len']:,} "
            f"on {model['num_devices']} RBLN devices (the profile's)."
        )
    knobs = ", ".join(f"{k}={v}" for k, v in deploy["knobs"].items())
    lines += [f"What to run ({knobs}):", "", "```sh", *deploy["commands"], "```"]
    if deploy.get("note"):
        lines.append(f"Note: {deploy['note']}.")
    return lines


def workload_lines(workload: dict[str, Any] | None) -> list[str]:
    """How ``advise --trace`` placed the trace's sessions in time, when not as the trace
    did (a named what-if), and how many the trace itself ever had at once."""
    if not workload or not workload.get("what_if"):
        return []
    lines = [f"**What-if:** {workload['what_if']}."]
    peak = workload.get("trace_peak_sessions")
    if peak is not None:
        lines.append(
            f"On its own timing the trace has at most {peak} session"
            f"{'' if peak == 1 else 's'} in the system at once."
        )
    return lines


def to_markdown(advice: dict[str, Any]) -> str:
    """Human-readable report of ``advise`` (prints as Markdown)."""
    base, chosen, more = advice["baseline"], advice["selected"], advice["larger"]
    n_text = ",".join(map(str, advice["n"]))
    lines = [
        "# What to compile (paper Section V-D)",
        "",
        *[f"**Caveat:** {c['message']}." for c in advice.get("caveats", [])],
        *([""] if advice.get("caveats") else []),
        f"Inputs: {advice['inputs']}; evaluated at N {n_text}. Predictions of the base "
        "simulator, not measurements.",
        f"Profile: {profile_phrase(advice['profile'])}.",
        *workload_lines(advice.get("workload")),
        *[f"- {note}" for note in advice.get("workload_notes", [])],
        "",
        "## 1. Baseline losses",
        "",
        f"- Baseline {_config_cell(base)}: {base['reuse_hits']} of {base['re_arrivals']} "
        f"re-arrivals reuse their KV ({base['reuse_misses']} miss).",
        f"- Extra re-arrival prefill: {base['extra_prefill_tokens']:,} tokens over the "
        f"{advice['full_reuse_prefill_tokens']:,} that full reuse would compute.",
        f"- Decode padding ratio {base['padding_ratio']:.3f}; steps by running count -> "
        "bucket: " + ", ".join(f"{k}: {v}" for k, v in base["histogram"].items()),
        *_per_round_lines(advice),
        "",
        "## 2. Recommended configuration",
        "",
        f"Pick: {_config_cell(chosen)} from {advice['recommendation_source']}.",
        "",
        "| configuration | device s | decode s | prefill s | reuse | extra prefill tokens "
        "| KV GiB (per device) | memory left per device GiB | compile s | artifact GiB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for entry in (base, chosen, more):
        lines.append(
            f"| {_config_cell(entry)} | {entry['device_s']:.3f} | {entry['decode_s']:.3f} | "
            f"{entry['prefill_s']:.3f} | {entry['reuse_hits']}/{entry['re_arrivals']} | "
            f"{entry['extra_prefill_tokens']:,} | {entry['kv_gib']:.3f} "
            f"({entry['kv_gib_per_device']:.4f}) | "
            f"{entry['headroom_gib_per_device']:.2f}{'' if entry['fits_memory'] else ' (no fit)'}"
            f" | {entry['compile_s']:.0f} | {entry['artifact_gib']:.2f} |"
        )
    lines += [
        "",
        f"Predicted saving of the pick: {100 * advice['predicted_saving']:.2f} % of device "
        f"time (decode x{advice['decode_ratio']:.4f}, prefill x{advice['prefill_ratio']:.4f}).",
        *_spread_line(advice),
        f"**Recommended: `{advice['recommendation']['id']}`** ({advice['recommendation']['why']}).",
        *deploy_lines(advice),
        f"Memory: {memory_sentence(chosen)} (at most {advice['max_slots_in_memory']} slots fit).",
        f"Compile budget {advice['compile_budget_s']:.0f} s: "
        + ("within" if chosen["within_compile_budget"] else "EXCEEDED")
        + f" ({chosen['compile_s']:.0f} s).",
        "",
        "## 3. More slots?",
        "",
        f"{advice['more_slots_verdict']}."
        + (
            f" Search it: `{advice['more_slots_next']}` (with the same inputs)."
            if advice.get("more_slots_next")
            else ""
        ),
        "",
        "Validate the pick on new inputs with predictions and criteria fixed beforehand "
        "before relying on it (paper V-B).",
    ]
    return "\n".join(lines)
