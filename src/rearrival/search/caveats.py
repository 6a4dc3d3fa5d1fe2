"""What a search's answer cannot tell, said with the answer (paper V-A: "the search
identified a set of candidates with similar predicted costs but did not establish the
superiority of any particular configuration"; docs/DESIGN.md §12).

Four cases make a pick an artefact of the tie-break rather than of the workload:

- ``no_difference``: every candidate scores exactly the same: on these inputs no
  configuration changes the predicted cost at all;
- ``tie``: other candidates score within the input noise of the pick. The noise is the
  gap between the pick's score on the search inputs and on the seed-separated evaluation
  inputs (the same candidate on another draw of the same workload); where the evaluation
  inputs are the search inputs again, only exact ties (equal to 1e-9) count. Among tied
  candidates the pick is the one with fewer buckets, then fewer slots
  (``RblnConfiguration.tiebreak``), not a predicted difference.
- ``no_saving``: the pick scores within that noise of the baseline's 1.
- ``no_overlap``: no two sessions of the search inputs are ever in the system at once (a
  trace imported with ``--time-origin first`` whose sessions are days apart), so every
  configuration serves one session at a time and none can do better than another;
  checked on the baseline's schedule of plans a user brought (``search --plans``,
  ``advise --plans``), only when one of the others needs explaining. The first three
  read the ranking alone, so the sharded and the one-process search write the same.

Each caveat is ``{"code", "message"}``: written to summary.json and the advice, and
printed by the verbs as a warning line on stderr.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rearrival.model.configuration import RblnConfiguration
from rearrival.model.cost.profile import Profile
from rearrival.model.plans.plan import Plan
from rearrival.model.simulator.rbln.sim import SimConfig, simulate

EXACT = 1e-9  # scores are exactly rounded sums; closer than this they are the same number
# The largest concurrency the paper measured (Section II-C: N in {3, ..., 12, 16}); the
# simulator was validated at N 6 and 8 and checked at 10 (Section IV).
PAPER_LARGEST_N = 16
# How the ranking orders equal scores (``RblnConfiguration.tiebreak``); a vLLM search
# names its own (``VllmConfiguration.tiebreak``).
RBLN_TIEBREAK = "fewer buckets, then fewer slots"


def score_noise(search_score: float, evaluation_score: float, held_out: bool) -> float:
    """How far a score moves between two draws of the same workload (module docstring)."""
    return max(abs(search_score - evaluation_score), EXACT) if held_out else EXACT


def tie_caveats(
    rows: Sequence[Mapping[str, Any]], held_out: bool = True, tiebreak: str = RBLN_TIEBREAK
) -> list[dict[str, str]]:
    """``tie`` and ``no_saving`` for the rows of a ranked scores table (best first);
    ``tiebreak`` says how the ranking orders equal scores."""
    scores = [float(row["score"]) for row in rows]
    return score_caveats(scores, float(rows[0]["evaluation_score"]), held_out, tiebreak)


def score_caveats(
    scores: Sequence[float],
    evaluation_score: float,
    held_out: bool = True,
    tiebreak: str = RBLN_TIEBREAK,
) -> list[dict[str, str]]:
    """``tie_caveats`` on the ranked search scores (best first) and the pick's evaluation
    score, as plain numbers: an advice ranks without a table (and without pandas)."""
    best = scores[0]
    noise = score_noise(best, evaluation_score, held_out)
    tied = sum(abs(score - best) <= noise for score in scores)
    within = f"within {noise:.4f}" if noise > EXACT else "exactly"
    source = "the gap between its search and evaluation scores" if noise > EXACT else "equal sums"
    found = []
    if len(scores) > 1 and all(abs(score - best) <= EXACT for score in scores):
        return [
            {
                "code": "no_difference",
                "message": f"all {len(scores):,} candidates predict exactly the same cost "
                f"(score {best:.4f}): on these inputs the configuration does not "
                f"matter, and the pick is only the tie-break's ({tiebreak})",
            }
        ]
    if tied > 1:
        found.append(
            {
                "code": "tie",
                "message": f"{tied:,} of {len(scores):,} candidates score {within} the pick's "
                f"{best:.4f} ({source}): the pick among them is the tie-break's "
                f"({tiebreak}), not a predicted difference",
            }
        )
    if best - 1 > noise:  # every candidate worse (the baseline not among them)
        found.append(
            {
                "code": "no_saving",
                "message": f"the pick's score {best:.4f} is worse than the "
                "baseline's 1: every candidate is predicted to cost more than the baseline "
                "on these inputs, so keep the baseline",
            }
        )
    elif 1 - best <= noise:
        found.append(
            {
                "code": "no_saving",
                "message": f"the pick's score {best:.4f} is {within} the baseline's "
                "1: no candidate is predicted to beat the baseline on these inputs",
            }
        )
    return found


def ranking_caveats(
    scores_best_first: Sequence[float], tiebreak: str = RBLN_TIEBREAK
) -> list[dict[str, str]]:
    """``tie_caveats`` for scores from one set of inputs (no evaluation inputs measure
    the noise, so only exact ties count)."""
    scores = [float(score) for score in scores_best_first]
    return score_caveats(scores, scores[0], False, tiebreak)


def sessions_overlap(plan: Plan, baseline: RblnConfiguration, profile: Profile) -> bool:
    """Whether two sessions of ``plan`` are ever in the system at once under the
    baseline: each session from its first arrival to its last completion."""
    spans: dict[int, list[float]] = {}
    for record in simulate(plan, SimConfig.of(baseline), profile).requests:
        span = spans.setdefault(record.session, [record.arrival_s, record.complete_s])
        span[0], span[1] = min(span[0], record.arrival_s), max(span[1], record.complete_s)
    return spans_overlap(spans.values())


def spans_overlap(spans: Iterable[Sequence[float]]) -> bool:
    """Whether two of the (start, stop) spans of sessions intersect."""
    end = float("-inf")
    for start, stop in sorted(spans):
        if start < end:
            return True
        end = max(end, stop)
    return False


def overlap_caveat(
    plans: Sequence[Plan], baseline: RblnConfiguration, profile: Profile
) -> list[dict[str, str]]:
    """``no_overlap`` when no plan ever has two sessions in the system at once."""
    if any(sessions_overlap(plan, baseline, profile) for plan in plans):
        return []
    return no_overlap(len(plans))


def no_overlap(plans: int) -> list[dict[str, str]]:
    """The ``no_overlap`` caveat for ``plans`` search input plans."""
    return [
        {
            "code": "no_overlap",
            "message": f"no two sessions of the {plans} search input plans are ever in "
            "the system at once, so every configuration serves one session at a time and "
            "none can do better than another: start the sessions together (`rearrival "
            "plans from-trace --time-origin zero`) or draw N of them (`rearrival advise "
            "--trace`)",
        }
    ]


def n_caveats(n_set: Sequence[int]) -> list[dict[str, str]]:
    """``extrapolated_n``: an advice at an N beyond any the paper measured."""
    beyond = [n for n in n_set if n > PAPER_LARGEST_N]
    if not beyond:
        return []
    text = ",".join(map(str, beyond))
    return [
        {
            "code": "extrapolated_n",
            "message": f"N {text} is beyond the largest N the paper measured "
            f"({PAPER_LARGEST_N}; the simulator was validated at N 6 and 8, Section IV): "
            "the predictions there extrapolate its rules and constants, so validate the "
            "pick at that N before relying on it",
        }
    ]


def spread_caveats(spread: dict[str, Any]) -> list[dict[str, str]]:
    """``no_saving``: resampled session sets on which the pick saves nothing."""
    if spread["p05"] > 0:
        return []
    return [
        {
            "code": "no_saving",
            "message": f"over {spread['resamples']} resampled session sets the pick's saving "
            f"runs from {100 * spread['p05']:.2f} % to {100 * spread['p95']:.2f} % (5-95 %): "
            "it is not told apart from no saving on this workload",
        }
    ]


def import_caveats(plans: Sequence[Plan]) -> list[dict[str, str]]:
    """``truncated`` and ``what_if`` of plans imported from a trace, repeated with the
    answer (issue 36: ``advise --plans`` dropped the import's warning): the sessions and
    rounds the maximum sequence length removed (a transcript is every prompt plus every
    generated token so far), and a token-count scale the plan was imported at. Read from
    each plan's import notes, once per distinct import."""
    caveats: list[dict[str, str]] = []
    seen: set[str] = set()
    for plan in plans:
        notes = plan.meta.notes or {}
        over = notes.get("overflow")
        key = f"{plan.meta.trace_sha256}/{plan.meta.import_flags}"
        if over is None or key in seen:
            continue
        seen.add(key)
        selected = notes.get("sessions_selected", plan.n)
        cut = int(over["truncated_sessions"]) + int(over["dropped_sessions"])
        if cut:
            caveats.append(
                {
                    "code": "truncated",
                    "message": (
                        f"the import cut {cut} of {selected} sessions at a maximum sequence "
                        f"length of {int(over['max_seq_len']):,} tokens (prompts plus "
                        f"generated tokens): {over['truncated_sessions']} truncated, "
                        f"{over['dropped_sessions']} dropped, {over['dropped_rounds']} rounds "
                        "removed; the advice never sees those rounds"
                    ),
                }
            )
        scale = notes.get("token_scale", 1.0)
        if scale != 1.0:
            caveats.append(
                {
                    "code": "what_if",
                    "message": (
                        f"WHAT-IF: the plans were imported with every token count scaled by "
                        f"{scale} (--token-scale); the trace's own contexts differ"
                    ),
                }
            )
    return caveats
