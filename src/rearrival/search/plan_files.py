"""Plan files a user brings to the search or the advice (``--plans DIR``): every plan
under a directory, refused when a transcript outgrows the profile's maximum sequence
length, and keyed as search or evaluation inputs (``search/`` and ``evaluation/``
subdirectories are held apart; otherwise every plan is both)."""

from __future__ import annotations

from pathlib import Path

from rearrival.config.search import SearchError
from rearrival.model.plans.plan import Plan, check_context, load_plan
from rearrival.search.inputs import PlanKey


def load_plan_dir(plans_dir: Path, max_seq_len: int | None = None) -> list[Plan]:
    """Every plan file (.parquet/.json) under ``plans_dir``, in path order; with
    ``max_seq_len`` (the profile's), a plan whose transcript outgrows it is refused, since
    the profile's costs were not measured there."""
    paths = sorted(p for p in plans_dir.rglob("*") if p.suffix in (".parquet", ".json"))
    if not paths:
        raise SearchError(
            f"plans directory {plans_dir}: no .parquet or .json plan files; "
            "write some with `rearrival plan` or `rearrival search plans`"
        )
    plans = [load_plan(p) for p in paths]
    if max_seq_len is not None:
        for path, plan in zip(paths, plans, strict=True):
            check_context(plan, max_seq_len, f"{path} (profile measured at {max_seq_len:,})")
    return plans


def keyed_plans(
    plans_dir: Path, max_seq_len: int | None = None
) -> tuple[list[tuple[PlanKey, Plan]], bool]:
    """(key, plan) for every input, and whether the evaluation inputs are held out."""
    split = (plans_dir / "search").is_dir() and (plans_dir / "evaluation").is_dir()
    sets = (
        {
            "search": load_plan_dir(plans_dir / "search", max_seq_len),
            "evaluation": load_plan_dir(plans_dir / "evaluation", max_seq_len),
        }
        if split
        else dict.fromkeys(("search", "evaluation"), load_plan_dir(plans_dir, max_seq_len))
    )
    keyed = []
    for inputs, plans in sets.items():
        seen: dict[int, int] = {}
        for plan in plans:
            index = seen[plan.n] = seen.get(plan.n, -1) + 1
            keyed.append((PlanKey(inputs, plan.n, index, 0), plan))
    return keyed, split
