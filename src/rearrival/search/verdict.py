"""What an advice recommends, from its own prediction (issue 36: a pick predicted worse
than the baseline was still recommended, beside a spread that said the opposite).

The search picks on its search inputs; the advice predicts the pick on other inputs
(paper V-D step 3 asks for new inputs). When that prediction is no saving, the advice
recommends keeping the baseline and says why, never the pick against its own number.
The spread over resampled session sets is priced by the same device time as the
saving, on sets of the evaluation inputs' shape, so the saving is one draw of what the
spread summarises; when it still falls outside the 90 % interval, a caveat says so.
"""

from __future__ import annotations

from typing import Any


def deploy_choice(pick_id: str, baseline_id: str, saving: float) -> dict[str, Any]:
    """The configuration to deploy: the pick when its predicted ``saving`` over the
    baseline is positive, else the baseline; ``why`` says which and by how much."""
    if pick_id == baseline_id:
        return {
            "keep_baseline": True,
            "id": baseline_id,
            "why": "the search's pick is the baseline",
        }
    if saving <= 0:
        return {
            "keep_baseline": True,
            "id": baseline_id,
            "why": (
                f"the search's pick {pick_id} is predicted {-100 * saving:.2f} % slower than "
                "the baseline on the inputs it was not chosen on: keep the baseline"
            ),
        }
    return {
        "keep_baseline": False,
        "id": pick_id,
        "why": f"{pick_id} is predicted to save {100 * saving:.2f} % of device time",
    }


def outside_spread(saving: float, spread: dict[str, Any] | None) -> list[dict[str, str]]:
    """``outside_spread``: the predicted saving lies outside its own 90 % interval."""
    if spread is None or spread["p05"] <= saving <= spread["p95"]:
        return []
    return [
        {
            "code": "outside_spread",
            "message": (
                f"the predicted saving {100 * saving:.2f} % lies outside the 90 % interval "
                f"of its resampled session sets ({100 * spread['p05']:.2f} % to "
                f"{100 * spread['p95']:.2f} %): these inputs are not typical of the trace; "
                "raise --resamples or the search's seeds before relying on either"
            ),
        }
    ]
