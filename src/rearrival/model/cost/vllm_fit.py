"""The vLLM step cost fitted to a real server's steps (docs/DESIGN.md §15, "Calibration";
the vLLM analogue of paper Table VII).

The calibration (``rearrival.measure.calibration.vllm_drive``) measures; this module turns
per-step samples -- each logged step's decode tokens as run D_pad, prefill tokens P,
context read C (from the replay) and its logged elapsed seconds -- into the four
coefficients of rule 7 with their intervals, and says where the linear form holds:

- *Fit*: least squares of the elapsed time on (1, D_pad, P, C) with every coefficient
  >= 0 (``scipy.optimize.lsq_linear``): a step cannot get cheaper with more work, and
  the predictor refuses a negative coefficient. The unconstrained solution is kept
  beside it, so a bound that binds is visible. Least squares on seconds, not on relative
  error, because the predictor sums step times: the fit's steps sum to what was measured.
- *Intervals*: a moving-block bootstrap. Each run's steps are cut into consecutive blocks
  of ``block_steps``, blocks are resampled with replacement and the fit repeated; the
  95 % interval is the 2.5-97.5 percentile range. Blocks, because a shared machine's
  speed drifts: neighbouring steps are not independent samples.
- *Identification*: a coefficient whose interval reaches 0 is ``identified: false``: at
  this noise the data cannot tell the term from zero (the KV read of a tiny model on a
  CPU, say). Its value is what the fit gave, reported with its interval, never a silent 0.
- *Residuals*: per cell of steps alike in kind (decode, prefill, mixed), decode tokens,
  prefill tokens (powers of two) and context read (powers of four): steps, the observed
  and fitted mean step time and their relative difference, the bound test's input.

Samples that cannot identify the four coefficients (too few steps, a regressor that
never varies, times that are not positive numbers) raise :class:`VllmFitError` naming
what is missing and the fix; nothing falls back to assumed values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rearrival.errors import RearrivalError
from rearrival.model.cost.vllm_profile import COEFFICIENTS, VllmStepCost

CI_LEVEL = 0.95
# What a coefficient multiplies, as the errors and the profile name it.
REGRESSORS = ("1 (every step)", "decode tokens D_pad", "prefill tokens P", "context read C")
# The design needs this many steps per coefficient at the least before a fit is tried.
MIN_STEPS_PER_COEFFICIENT = 10


class VllmFitError(RearrivalError, ValueError):
    """Step samples that cannot give the vLLM step cost; names what is missing and the fix."""


@dataclass(frozen=True)
class StepSamples:
    """Per-step samples as arrays: decode tokens as run, prefill tokens, context read,
    logged seconds, and the run each step belongs to (blocks never span two runs)."""

    decode_padded: np.ndarray
    prefill: np.ndarray
    context: np.ndarray
    elapsed_s: np.ndarray
    run: np.ndarray

    @property
    def design(self) -> np.ndarray:
        ones = np.ones(len(self.elapsed_s))
        return np.column_stack([ones, self.decode_padded, self.prefill, self.context]).astype(float)


@dataclass(frozen=True)
class Coefficient:
    """One fitted coefficient (seconds, per token where named)."""

    name: str
    value: float
    ci: tuple[float, float]
    unconstrained: float

    @property
    def identified(self) -> bool:
        """Whether the interval excludes 0: the data tell the term from zero."""
        return self.ci[0] > 0


@dataclass(frozen=True)
class Cell:
    """Steps alike in kind and size, with the fit's mean error on them."""

    kind: str
    decode_tokens: int
    prefill_bin: int  # upper edge of the prefill tokens (a power of two; 0: none)
    context_bin: int  # upper edge of the context read (a power of four; 0: none)
    steps: int
    observed_mean_s: float
    fitted_mean_s: float

    @property
    def relative(self) -> float:
        return self.observed_mean_s / self.fitted_mean_s - 1


@dataclass(frozen=True)
class VllmStepCostFit:
    """The fitted step cost, its intervals, the residual cells and fit totals."""

    coefficients: tuple[Coefficient, ...]
    cells: tuple[Cell, ...]
    steps: int
    runs: int
    resamples: int
    block_steps: int
    observed_total_s: float
    fitted_total_s: float
    rms_residual_s: float

    @property
    def step_cost(self) -> VllmStepCost:
        return VllmStepCost(*(c.value for c in self.coefficients))

    def coefficient(self, name: str) -> Coefficient:
        return next(c for c in self.coefficients if c.name == name)


def _check(samples: StepSamples) -> np.ndarray:
    """The design matrix, refused when it cannot identify the four coefficients."""
    y = samples.elapsed_s
    if len(y) < MIN_STEPS_PER_COEFFICIENT * len(COEFFICIENTS):
        raise VllmFitError(
            f"{len(y)} usable steps, need at least {MIN_STEPS_PER_COEFFICIENT * len(COEFFICIENTS)}"
            " to fit four coefficients; raise the calibration's cycles or decode_tokens"
        )
    if not np.all(np.isfinite(y)) or np.any(y <= 0):
        bad = int(np.flatnonzero(~np.isfinite(y) | (y <= 0))[0])
        raise VllmFitError(
            f"step sample {bad}: elapsed time {y[bad]!r} s is not a positive number; the step "
            "log is damaged, re-run the calibration"
        )
    design = samples.design
    for column in range(1, design.shape[1]):
        if len(np.unique(design[:, column])) < 2:
            raise VllmFitError(
                f"the steps never vary their {REGRESSORS[column]}, so {COEFFICIENTS[column]} "
                "cannot be told from the others; the calibration plan must mix decode "
                "batches, prefills and long contexts (run it as designed)"
            )
    if np.linalg.matrix_rank(design) < design.shape[1]:
        raise VllmFitError(
            "the steps' decode tokens, prefill tokens and context read move together, so "
            "the four coefficients are not identified; run the calibration plan as designed"
        )
    return design


def _scaled_fit(design: np.ndarray, y: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Nonnegative least squares on columns scaled to comparable size (conditioning)."""
    from scipy.optimize import lsq_linear

    result = lsq_linear(design / scale, y, bounds=(0.0, np.inf), method="bvls")
    return result.x / scale


def _blocks(run: np.ndarray, block_steps: int) -> list[np.ndarray]:
    """Consecutive steps of one run, ``block_steps`` at a time (the last block shorter)."""
    blocks = []
    for value in dict.fromkeys(run.tolist()):
        index = np.flatnonzero(run == value)
        blocks += [index[i : i + block_steps] for i in range(0, len(index), block_steps)]
    return blocks


def _interval(values: np.ndarray) -> tuple[float, float]:
    low, high = np.quantile(values, [(1 - CI_LEVEL) / 2, (1 + CI_LEVEL) / 2])
    return float(low), float(high)


def _bin(value: int, base: int) -> int:
    """The smallest power of ``base`` >= value (0 for 0): a cell's upper edge."""
    if value <= 0:
        return 0
    return int(base ** math.ceil(math.log(value, base) - 1e-12))


def _cells(samples: StepSamples, fitted: np.ndarray) -> tuple[Cell, ...]:
    keys = []
    for d, p, c in zip(samples.decode_padded, samples.prefill, samples.context, strict=True):
        kind = "mixed" if d and p else ("prefill" if p else "decode")
        keys.append((kind, int(d), _bin(int(p), 2), _bin(int(c), 4)))
    out = []
    for key in sorted(set(keys)):
        mask = np.array([k == key for k in keys])
        out.append(
            Cell(
                *key,
                steps=int(mask.sum()),
                observed_mean_s=float(samples.elapsed_s[mask].mean()),
                fitted_mean_s=float(fitted[mask].mean()),
            )
        )
    return tuple(out)


def fit_vllm_step_cost(
    samples: StepSamples, *, resamples: int, block_steps: int, seed: int
) -> VllmStepCostFit:
    """Fit the four coefficients (module docstring); raises :class:`VllmFitError` when
    the samples cannot identify them."""
    if resamples < 100 or block_steps < 1:
        raise VllmFitError(
            f"bootstrap: resamples {resamples} (need >= 100) and block_steps {block_steps} "
            "(need >= 1)"
        )
    design = _check(samples)
    y = samples.elapsed_s.astype(float)
    scale = np.maximum(design.max(axis=0), 1.0)
    params = _scaled_fit(design, y, scale)
    free = np.linalg.lstsq(design, y, rcond=None)[0]
    blocks = _blocks(samples.run, block_steps)
    rng = np.random.default_rng(seed)
    boot = np.empty((resamples, design.shape[1]))
    for i in range(resamples):
        rows = np.concatenate([blocks[j] for j in rng.integers(0, len(blocks), len(blocks))])
        boot[i] = _scaled_fit(design[rows], y[rows], scale)
    fitted = design @ params
    return VllmStepCostFit(
        coefficients=tuple(
            Coefficient(name, float(params[i]), _interval(boot[:, i]), float(free[i]))
            for i, name in enumerate(COEFFICIENTS)
        ),
        cells=_cells(samples, fitted),
        steps=len(y),
        runs=len(set(samples.run.tolist())),
        resamples=resamples,
        block_steps=block_steps,
        observed_total_s=float(y.sum()),
        fitted_total_s=float(fitted.sum()),
        rms_residual_s=float(np.sqrt(np.mean((y - fitted) ** 2))),
    )
