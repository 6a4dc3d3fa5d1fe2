"""The paper's decision rules (Sections II-D, IV, V-C; docs/DESIGN.md §9).

A prediction is judged only after the two cost channels agree. Every quantity is a
ratio of sums over the replicates (never a mean of per-replicate ratios):

* channel agreement: |ratio_A - ratio_B| <= tau, with the initial rule tau = 0.02
  (``fixed``) or the amended rule tau = max(0.02, r_BASE / B_BASE) (``tau``), where
  B_BASE and r_BASE = B_BASE - A_BASE are sums over the three baseline replicates.
  Disagreement gives the verdict ``withheld``; the row is kept and reported.
* prediction error e = R_obs - R_pred on channel-A ratios (e > 0: the simulator
  overestimated the savings).
* confirmatory N (6, 8): ``pass`` iff |e| <= 0.03 and prediction and observation lie
  on the same side of 1 or both inside the equivalence band [0.98, 1.02]; else
  ``fail``. Any other N (the paper's N = 10) is ``exploratory``: error only.
* saturation (Section V-C): 95 % bootstrap CI of the median ratio over the 9
  (N x replicate) comparisons contains 1 and is at most 0.04 wide.

Channel agreement gates every row, exploratory ones included: an error whose channels
disagree is not backed by the cost model check, so it is labelled ``withheld`` too (the
error is still reported). The thresholds live in :class:`DecisionCriteria` so the
preregistration stage commits them and decisions read them back.

Comparisons against a threshold allow 1e-12 of slack: the thresholds and the tables are
decimal numbers, and binary subtraction of two decimals that differ by exactly the
threshold can land a few ulps above it.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rearrival.atomic import atomic_write_text
from rearrival.config.decision import DecisionCriteria, DecisionError

RULES = ("fixed", "tau")
INPUT_COLUMNS = (
    "comparison",
    "n",
    "ratio_pred",
    "ratio_obs_a",
    "ratio_obs_b",
    "rule",
    "r_base_s",
    "b_base_s",
)
OUTPUT_COLUMNS = ("tau", "channel_diff", "error", "verdict")
SLACK = 1e-12


DEFAULT_CRITERIA = DecisionCriteria()


def load_criteria(path: str | Path) -> DecisionCriteria:
    """Read criteria written as JSON (the keys of ``DecisionCriteria.to_dict``)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise DecisionError(
            f"{path}: no such criteria file; write it with the preregistration "
            "stage (`rearrival prereg`)"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DecisionError(f"{path}: not valid JSON ({exc}); restore it from git") from None
    if not isinstance(data, dict):
        raise DecisionError(f"{path}: decision criteria are a JSON object")
    return DecisionCriteria.from_dict(data, str(path))


# --- one comparison ------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """Outcome of one comparison row: tolerance used, channel gap, error, verdict."""

    tau: float
    channel_diff: float
    error: float
    verdict: str


def summed_ratio(changed: Sequence[float], baseline: Sequence[float]) -> float:
    """sum(changed) / sum(baseline) over paired replicates (never a mean of ratios)."""
    if len(changed) != len(baseline) or not baseline:
        raise DecisionError(
            f"summed ratio needs the same, non-zero number of changed and "
            f"baseline replicates (got {len(changed)} and {len(baseline)})"
        )
    denominator = math.fsum(baseline)
    if not denominator > 0:
        raise DecisionError(f"summed ratio: baseline sum is {denominator}; it must be > 0")
    return math.fsum(changed) / denominator


def tau_for(
    rule: str,
    *,
    r_base_s: float | None = None,
    b_base_s: float | None = None,
    criteria: DecisionCriteria = DEFAULT_CRITERIA,
) -> float:
    """Channel-agreement tolerance: ``fixed`` 0.02, ``tau`` max(0.02, r_BASE / B_BASE)."""
    if rule == "fixed":
        return criteria.tau_fixed
    if rule != "tau":
        raise DecisionError(f"rule '{rule}' is unknown; use one of {', '.join(RULES)}")
    if r_base_s is None or b_base_s is None:
        raise DecisionError(
            "rule 'tau' needs r_base_s and b_base_s (baseline sums over the three replicates)"
        )
    if not b_base_s > 0:
        raise DecisionError(
            f"rule 'tau': b_base_s is {b_base_s}; channel B of the baseline must be > 0 seconds"
        )
    return max(criteria.tau_fixed, r_base_s / b_base_s)


def _same_side_or_in_band(pred: float, obs: float, band: tuple[float, float]) -> bool:
    low, high = band
    same_side = (pred > 1 and obs > 1) or (pred < 1 and obs < 1) or (pred == obs == 1)
    in_band = all(low - SLACK <= x <= high + SLACK for x in (pred, obs))
    return same_side or in_band


def decide_comparison(
    *,
    n: int,
    ratio_pred: float,
    ratio_obs_a: float,
    ratio_obs_b: float,
    rule: str,
    r_base_s: float | None = None,
    b_base_s: float | None = None,
    criteria: DecisionCriteria = DEFAULT_CRITERIA,
) -> Decision:
    """Judge one preregistered comparison (paper Section IV rules, in this order):
    channel agreement, then exploratory N, then error and direction."""
    tau = tau_for(rule, r_base_s=r_base_s, b_base_s=b_base_s, criteria=criteria)
    channel_diff = abs(ratio_obs_a - ratio_obs_b)
    error = ratio_obs_a - ratio_pred
    if channel_diff > tau + SLACK:
        verdict = "withheld"
    elif n not in criteria.confirmatory_n:
        verdict = "exploratory"
    elif abs(error) <= criteria.error_tolerance + SLACK and _same_side_or_in_band(
        ratio_pred, ratio_obs_a, criteria.equivalence_band
    ):
        verdict = "pass"
    else:
        verdict = "fail"
    return Decision(tau=tau, channel_diff=channel_diff, error=error, verdict=verdict)


# --- decision tables -----------------------------------------------------------------------


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)
    return "" if value is None else str(value)


def _parse_number(
    row: Mapping[str, Any],
    column: str,
    where: str,
    *,
    integer: bool = False,
    optional: bool = False,
) -> Any:
    raw = row.get(column)
    if (
        raw is None
        or (isinstance(raw, str) and not raw.strip())
        or (isinstance(raw, float) and math.isnan(raw))
    ):
        if optional:
            return None
        raise DecisionError(f"{where}, column '{column}': empty; give a number")
    try:
        value = float(raw)
        if integer:
            if not value.is_integer():
                raise ValueError
            return int(value)
    except (TypeError, ValueError):
        kind = "an integer" if integer else "a number"
        raise DecisionError(
            f"{where}, column '{column}': {raw!r} is not {kind}; fix the value"
        ) from None
    if not math.isfinite(value):
        raise DecisionError(f"{where}, column '{column}': {raw!r} is not finite; give a number")
    return value


def judge_rows(
    rows: Iterable[Mapping[str, Any]],
    *,
    criteria: DecisionCriteria = DEFAULT_CRITERIA,
    source: str = "<table>",
) -> list[dict[str, Any]]:
    """Each input row plus tau, channel_diff, error and verdict; errors name row and column.

    Rows are numbered from 1 (the first data row after the header). Existing output
    columns in the input are recomputed, so a published decision table can be re-judged.
    """
    judged = []
    for index, row in enumerate(rows, start=1):
        where = f"{source}: row {index}"
        missing = [c for c in INPUT_COLUMNS if c not in row]
        if missing:
            raise DecisionError(
                f"{source}: missing column '{missing[0]}'; a decision table has "
                f"columns {','.join(INPUT_COLUMNS)}"
            )
        rule = str(row["rule"]).strip()
        if rule not in RULES:
            raise DecisionError(
                f"{where}, column 'rule': {rule!r}; use 'fixed' (tau 0.02) or 'tau' (amended rule)"
            )
        needs_base = rule == "tau"
        values = {
            "n": _parse_number(row, "n", where, integer=True),
            **{
                c: _parse_number(row, c, where)
                for c in ("ratio_pred", "ratio_obs_a", "ratio_obs_b")
            },
            **{
                c: _parse_number(row, c, where, optional=not needs_base)
                for c in ("r_base_s", "b_base_s")
            },
        }
        if needs_base and not values["b_base_s"] > 0:
            raise DecisionError(
                f"{where}, column 'b_base_s': {row['b_base_s']!r}; rule 'tau' "
                "needs the baseline channel B sum in seconds (> 0)"
            )
        decision = decide_comparison(rule=rule, criteria=criteria, **values)
        kept = {key: value for key, value in row.items() if key not in OUTPUT_COLUMNS}
        judged.append(kept | asdict(decision))
    return judged


def read_table(path: str | Path) -> list[dict[str, str]]:
    """Rows of a decision-table CSV as strings, refusing a missing column up front."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise DecisionError(f"{path}: no such table; give the decision-input CSV") from None
    except UnicodeDecodeError:
        raise DecisionError(f"{path}: not a text CSV file; give the decision-input CSV") from None
    reader = csv.DictReader(io.StringIO(text))
    header = reader.fieldnames or []
    missing = [c for c in INPUT_COLUMNS if c not in header]
    if missing:
        raise DecisionError(
            f"{path}: missing column '{missing[0]}'; the header must contain "
            f"{','.join(INPUT_COLUMNS)}"
        )
    rows = list(reader)
    for index, row in enumerate(rows, start=1):
        if None in row or any(value is None for value in row.values()):
            raise DecisionError(
                f"{path}: row {index}: number of fields differs from the "
                f"header's {len(header)} columns; fix the commas or quoting"
            )
    if not rows:
        raise DecisionError(f"{path}: no data rows; add one row per comparison")
    return rows


def table_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """CSV text of judged rows: input columns in input order, then the four outputs."""
    if not rows:
        return ",".join(INPUT_COLUMNS + OUTPUT_COLUMNS) + "\n"
    inputs = [c for c in rows[0] if c not in OUTPUT_COLUMNS]
    columns = inputs + list(OUTPUT_COLUMNS)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row.get(c)) for c in columns])
    return buffer.getvalue()


def decide_table(
    path: str | Path,
    out: str | Path | None = None,
    *,
    criteria: DecisionCriteria = DEFAULT_CRITERIA,
) -> str:
    """Re-judge a comparison table file; write the result atomically to ``out`` if given.

    Returns the CSV text either way (the CLI prints it when there is no ``--out``).
    """
    text = table_csv(judge_rows(read_table(path), criteria=criteria, source=str(path)))
    if out is not None:
        atomic_write_text(Path(out), text)
    return text


# --- saturation (Section V-C) --------------------------------------------------------------


@dataclass(frozen=True)
class SaturationResult:
    """Bootstrap CI of the median ratio of one adjacent pair and the saturation verdict."""

    median: float
    ci_low: float
    ci_high: float
    n: int
    n_boot: int
    seed: int
    confidence: float
    method: str
    max_width: float

    @property
    def width(self) -> float:
        return self.ci_high - self.ci_low

    @property
    def contains_one(self) -> bool:
        return self.ci_low <= 1.0 <= self.ci_high

    @property
    def saturated(self) -> bool:
        return self.contains_one and self.width <= self.max_width + SLACK


def saturation(
    ratios: Sequence[float],
    *,
    n_boot: int = 10000,
    seed: int = 0,
    width: float = 0.04,
    confidence: float = 0.95,
) -> SaturationResult:
    """Is adding slots from one batch size to the next saturated? (paper Section V-C)

    Percentile bootstrap of the median over the (N x replicate) ratios, seeded. The
    percentile method is used, not BCa: BCa's jackknife acceleration is unstable for a
    median of 9 values (ties make it degenerate), and the paper calls the rule an
    operational classification, not an equivalence test.
    """
    # Lazy: scipy.stats takes 0.65 s to import (measured after numpy and pandas) and
    # only this rule needs it.
    from scipy.stats import bootstrap

    values = np.asarray([float(r) for r in ratios], dtype=float)
    if values.size < 2 or not np.isfinite(values).all():
        raise DecisionError(f"saturation needs at least 2 finite ratios, got {values.tolist()}")
    result = bootstrap(
        (values,),
        np.median,
        n_resamples=n_boot,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    interval = result.confidence_interval
    return SaturationResult(
        median=float(np.median(values)),
        ci_low=float(interval.low),
        ci_high=float(interval.high),
        n=int(values.size),
        n_boot=n_boot,
        seed=seed,
        confidence=confidence,
        method="percentile",
        max_width=width,
    )
