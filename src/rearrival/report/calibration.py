"""Report tables and figure of the calibration stage (docs/DESIGN.md §3; paper Table VII).

Table VII puts each measured g(b) = f(b) + alpha with its CI beside the paper's value,
then beta and the residuals of the straight-line form; the prefill table does the same
for T(q) per token range with the reuse-rule check; Table IX-P sets the validation
errors of predictions made with the published constants beside those made with this
run's calibrated profile (the study's predictions and the exploratory evaluation's, both
written by the predict stage). Everything is read from ``results/calibration/`` (written
by ``rearrival calibrate``), the predictions and the validation results; nothing is
simulated here and nothing is copied from the paper except the published column, which
comes from the shipped profile file.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from rearrival.config.calibration import CALIBRATED, PUBLISHED, exploratory_profile
from rearrival.measure.calibration.document import PROFILE_FILE
from rearrival.measure.calibration.drive import DECODE_STEPS_FILE, PREFILL_FILE
from rearrival.model.cost.profile import measured_profile
from rearrival.report.figure_model import BUCKET_COLOURS, Figure, absent, pyplot, to_svg
from rearrival.report.results import Results, decision_records, study_backend
from rearrival.report.table_model import Column, Part, Table
from rearrival.vocabulary import PREDICTION

CALIBRATION_DIR = "calibration"


def calibrated_tree(res: Results) -> dict[str, Any] | None:
    """The calibrated profile as written, or None (noted as missing) before the stage ran."""
    return res.load(f"{CALIBRATION_DIR}/{PROFILE_FILE}")


def _absent_table(tid: str, title: str) -> Table:
    return Table(
        tid,
        title,
        "Calibration stage not run yet.",
        (),
        (
            "results/calibration/profile.yaml not produced (run snakemake "
            "results/calibration/profile.yaml).",
        ),
        "none",
    )


def _runs(ids: list[str]) -> str:
    return " ".join(ids)


def table_vii(res: Results) -> Table:
    """Measured g(b) with CI beside the paper's, beta, and every (b, n) residual."""
    tree = calibrated_tree(res)
    title = "Decode step cost per bucket (calibration)"
    if tree is None:
        return _absent_table("VII", title)
    paper = measured_profile()
    decode = tree["decode"]
    alpha_ms = float(decode["alpha_ms"]["value"])
    published = {b for b, _ in paper.measured_bucket_s}
    rows = []
    for bucket, entry in sorted(decode["bucket_cost_ms"].items()):
        paper_g = (paper.bucket_cost_s(int(bucket)) + paper.alpha_s) * 1e3
        rows.append(
            {
                "bucket": int(bucket),
                "kind": entry["kind"],
                "n_values": ",".join(map(str, entry["n_values"])),
                "samples": entry["samples"],
                "g_ms": entry["g_ms"],
                "ci_low": entry["g_ci95_ms"][0],
                "ci_high": entry["g_ci95_ms"][1],
                "paper_g_ms": paper_g,
                "paper_kind": "measured"
                if int(bucket) in published
                else "interpolated (docs/DESIGN.md §3)",
                "difference": entry["g_ms"] / paper_g - 1,
                "run_ids": _runs(entry["run_ids"]),
            }
        )
    for bucket, entry in sorted((decode.get("interpolated_bucket_cost_ms") or {}).items()):
        rows.append(
            {
                "bucket": int(bucket),
                "kind": "interpolated",
                "n_values": "",
                "samples": 0,
                "g_ms": entry["value"] + alpha_ms,
                "paper_g_ms": (paper.bucket_cost_s(int(bucket)) + paper.alpha_s) * 1e3,
                "paper_kind": "interpolated (docs/DESIGN.md §3)",
                "run_ids": "",
            }
        )
    beta = decode["beta_ms_per_request"]
    residuals = decode["residuals"]
    coefficients = (
        {
            "coefficient": "beta (ms per running request)",
            "value": beta["value"],
            "ci_low": beta["ci95"][0],
            "ci_high": beta["ci95"][1],
            "paper": paper.beta_s * 1e3,
            "samples": beta["samples"],
            "run_ids": _runs(beta["run_ids"]),
        },
        {
            "coefficient": "alpha (ms, split of g(b); assumed)",
            "value": alpha_ms,
            "paper": paper.alpha_s * 1e3,
            "samples": 0,
            "run_ids": "",
        },
        {
            "coefficient": "max |residual| (relative)",
            "value": residuals["max_abs_relative"],
            "paper": None,
            "samples": len(residuals["points"]),
            "run_ids": "",
            "ci_high": residuals["bound_relative"],
        },
        {
            "coefficient": "rms residual (relative)",
            "value": residuals["rms_relative"],
            "paper": None,
            "samples": len(residuals["points"]),
            "run_ids": "",
        },
    )
    points = tuple(
        {
            "bucket": p["bucket"],
            "n": p["n"],
            "samples": p["samples"],
            "median_ms": p["median_ms"],
            "fitted_ms": p["fitted_ms"],
            "residual": p["median_ms"] / p["fitted_ms"] - 1,
        }
        for p in residuals["points"]
    )
    backend = str(tree["calibration"]["backend"])
    return Table(
        "VII",
        title,
        "Steady decode at exactly n running requests on the calibration artifacts; g(b) = "
        "f(b) + alpha fitted with beta on per-(b, n) median step times from the step log "
        "(95 % bootstrap CI), beside the paper's f(b) + alpha (its linear rule where the "
        "paper did not measure). Residuals test the straight-line form; the upper CI cell "
        "of the max residual row is the bound.",
        (
            Part(
                "g(b) per bucket",
                (
                    Column("bucket", "b", "int"),
                    Column("kind", "kind"),
                    Column("n_values", "n measured"),
                    Column("samples", "steps", "int"),
                    Column("g_ms", "g(b) (ms)", "f4"),
                    Column("ci_low", "CI low", "f4"),
                    Column("ci_high", "CI high", "f4"),
                    Column("paper_g_ms", "paper f+alpha (ms)", "f4"),
                    Column("paper_kind", "paper value"),
                    Column("difference", "difference", "pct2"),
                    Column("run_ids", "runs", "ids"),
                ),
                tuple(rows),
            ),
            Part(
                "coefficients",
                (
                    Column("coefficient", "coefficient"),
                    Column("value", "value", "f5"),
                    Column("ci_low", "CI low", "f5"),
                    Column("ci_high", "CI high / bound", "f5"),
                    Column("paper", "paper", "f5"),
                    Column("samples", "samples", "int"),
                    Column("run_ids", "runs", "ids"),
                ),
                coefficients,
            ),
            Part(
                "residuals",
                (
                    Column("bucket", "b", "int"),
                    Column("n", "n", "int"),
                    Column("samples", "steps", "int"),
                    Column("median_ms", "median (ms)", "f4"),
                    Column("fitted_ms", "fitted (ms)", "f4"),
                    Column("residual", "residual", "pct2"),
                ),
                points,
            ),
        ),
        (
            f"Profile {tree['profile_version']}; emulator truth "
            f"{tree['stack'].get('emulator_truth')}.",
        ),
        backend,
    )


def table_prefill(res: Results) -> Table:
    """T(q) coefficients with CIs beside the paper's, fit error per range, reuse check."""
    tree = calibrated_tree(res)
    title = "Prefill model and reuse rule (calibration)"
    if tree is None:
        return _absent_table("VII-P", title)
    paper = measured_profile()
    prefill = tree["prefill"]
    rows = tuple(
        {
            "coefficient": name,
            "value": prefill[key]["value"] * scale,
            "ci_low": prefill[key]["ci95"][0] * scale,
            "ci_high": prefill[key]["ci95"][1] * scale,
            "paper": ref * scale,
            "samples": prefill[key]["samples"],
            "run_ids": _runs(prefill[key]["run_ids"]),
        }
        for name, key, ref, scale in (
            ("a: per chunk (ms)", "per_chunk_s", paper.prefill_per_chunk_s, 1e3),
            ("b: per token, per chunk (ns)", "per_token_s", paper.prefill_per_token_s, 1e9),
        )
    )
    samples = res.load(f"{CALIBRATION_DIR}/{PREFILL_FILE}")
    ranges = []
    if samples is not None:
        q = samples["computed_tokens"].to_numpy(dtype=float)
        t = samples["prefill_s"].to_numpy(dtype=float)
        chunks = np.ceil(q / int(prefill["chunk_tokens"]["value"]))
        fitted = chunks * (prefill["per_chunk_s"]["value"] + prefill["per_token_s"]["value"] * q)
        published = np.array([paper.prefill_s(int(x)) for x in q])
        for entry in prefill["errors_by_range"]:
            inside = (q >= entry["low"]) & (q <= entry["high"])
            ranges.append(
                {
                    "range": f"{entry['low']}-{entry['high']}",
                    "samples": int(inside.sum()),
                    "fit_mean": float(np.mean(np.abs(fitted[inside] / t[inside] - 1))),
                    "fit_max": float(np.max(np.abs(fitted[inside] / t[inside] - 1))),
                    "paper_mean": float(np.mean(np.abs(published[inside] / t[inside] - 1))),
                }
            )
    reuse = tree["reuse"]["block_tokens"]
    check = (
        {
            "rule": "C = floor(min(P, L-1)/128)*128",
            "checked": reuse["checked"],
            "violations": reuse["violations"],
        },
    )
    return Table(
        "VII-P",
        title,
        "Server-side prefill times of single requests and of their re-arrival remainders, "
        "fitted as T(q) = ceil(q/128) * (a + b*q) on relative error (95 % bootstrap CI), "
        "beside the paper's fit (500-6000 tokens); mean and max |relative error| per range "
        "for this fit and for the paper's constants; every re-arrival with a surviving "
        "prefix checked against the reuse rule.",
        (
            Part(
                "coefficients",
                (
                    Column("coefficient", "coefficient"),
                    Column("value", "value", "f4"),
                    Column("ci_low", "CI low", "f4"),
                    Column("ci_high", "CI high", "f4"),
                    Column("paper", "paper", "f4"),
                    Column("samples", "samples", "int"),
                    Column("run_ids", "runs", "ids"),
                ),
                rows,
            ),
            Part(
                "fit error by range",
                (
                    Column("range", "computed tokens"),
                    Column("samples", "samples", "int"),
                    Column("fit_mean", "fit mean |e|", "pct2"),
                    Column("fit_max", "fit max |e|", "pct2"),
                    Column("paper_mean", "paper mean |e|", "pct2"),
                ),
                tuple(ranges),
            ),
            Part(
                "reuse rule",
                (
                    Column("rule", "rule"),
                    Column("checked", "re-arrivals", "int"),
                    Column("violations", "violations", "int"),
                ),
                check,
            ),
        ),
        (),
        str(tree["calibration"]["backend"]),
    )


def _predicted_ratio(
    predictions: pd.DataFrame | None,
    replicates: int,
    n: int,
    reference: str,
    changed: str,
    variant: str,
) -> float | None:
    """The base simulator's replicate-summed device time of ``changed`` over
    ``reference`` (None unless every replicate of both was predicted)."""
    if predictions is None:
        return None
    chosen = predictions[
        (predictions["simulator"] == PREDICTION)
        & (predictions["n"] == n)
        & (predictions["variant"] == variant)
    ]
    totals = {}
    for name in (reference, changed):
        rows = chosen[chosen["configuration"] == name].set_index("replicate")["device_s"]
        if set(rows.index) != set(range(replicates)):
            return None
        total = 0.0
        for replicate in range(replicates):
            total += float(rows.loc[replicate])
        totals[name] = total
    return totals[changed] / totals[reference]


def table_ix_profiles(res: Results) -> Table:
    """Validation errors with the published and the calibrated profile side by side,
    read from the predictions of both evaluations (the study's and the exploratory one)."""
    title = "Cost validation: published vs calibrated constants"
    if calibrated_tree(res) is None:
        return _absent_table("IX-P", title)
    study_profile = res.cfg.measurement.profile
    other = exploratory_profile(study_profile)
    calibrated = other if study_profile == PUBLISHED else study_profile
    profiles = {"published": PUBLISHED, "calibrated": calibrated}
    notes: list[str] = []
    rows = []
    studies = res.studies("validation")
    for study in studies:
        for row in decision_records(res, study, notes):
            observed = row.get("ratio_obs_a")
            changed = str(row.get("changed", "")).removesuffix(f"-{row.get('variant')}")
            if observed is None or not changed:
                continue
            entry = {
                "study": study.name,
                "n": int(row["n"]),
                "comparison": row["comparison"],
                "observed": observed,
                "run_ids": row.get("run_ids") or "",
            }
            for label, profile in profiles.items():
                predicted = _predicted_ratio(
                    res.predictions(study.name, profile),
                    res.cfg.replicates,
                    int(row["n"]),
                    study.baseline,
                    changed,
                    str(row.get("variant")),
                )
                entry[f"pred_{label}"] = predicted
                entry[f"error_{label}"] = None if predicted is None else observed - predicted
            rows.append(entry)
    second = "calibrated" if calibrated == CALIBRATED else "profile file"
    return Table(
        "IX-P",
        title,
        "Replicate-summed ratios of each validated configuration to the baseline: observed "
        "on channel A (as registered), predicted by the base simulator with the paper's "
        "published constants and with this run's calibrated profile; e = R_obs - R_pred.",
        (
            Part(
                "comparisons",
                (
                    Column("study", "study"),
                    Column("n", "N", "int"),
                    Column("comparison", "comparison"),
                    Column("observed", "observed A", "f4"),
                    Column("pred_published", "pred (published)", "f4"),
                    Column("error_published", "e (published)", "f4"),
                    Column("pred_calibrated", f"pred ({second})", "f4"),
                    Column("error_calibrated", f"e ({second})", "f4"),
                    Column("run_ids", "runs", "ids"),
                ),
                tuple(rows),
            ),
        ),
        tuple(notes),
        study_backend(res, studies),
    )


def step_time_figure(res: Results) -> Figure:
    """Median step time against n per bucket, with the fitted g(b) + beta*n lines."""
    fid, title = "calibration-steps", "Decode step time against running requests"
    tree = calibrated_tree(res)
    steps = res.load(f"{CALIBRATION_DIR}/{DECODE_STEPS_FILE}") if tree is not None else None
    if steps is None:
        return absent(fid, title, "Calibration stage not run yet.")
    medians = steps.groupby(["bucket", "n"])["duration_s"].median().reset_index()
    beta = float(tree["decode"]["beta_ms_per_request"]["value"])
    costs = tree["decode"]["bucket_cost_ms"]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    buckets = sorted(int(b) for b in costs)
    # the report's palette while it suffices, else one distinct colour per bucket
    palette = (
        BUCKET_COLOURS
        if len(buckets) <= len(BUCKET_COLOURS)
        else [plt.get_cmap("tab20")(i % 20) for i in range(len(buckets))]
    )
    for index, bucket in enumerate(buckets):
        colour = palette[index]
        points = medians[medians["bucket"] == bucket]
        ax.scatter(points["n"], points["duration_s"] * 1e3, color=colour, s=14, zorder=3)
        ns = np.array(costs[bucket]["n_values"], dtype=float)
        ax.plot(
            ns, costs[bucket]["g_ms"] + beta * ns, color=colour, linewidth=1, label=f"b={bucket}"
        )
    ax.set_xlabel("running requests n")
    ax.set_ylabel("median step time (ms)")
    ax.legend(fontsize=6, ncol=3, title="bucket", title_fontsize=7)
    backend = str(tree["calibration"]["backend"])
    return Figure(
        fid,
        title,
        "Median decode step time at each running count n (points) and the fitted "
        f"g(b) + beta*n per bucket (lines, beta = {beta:.4f} ms per request); "
        f"calibration runs of profile {tree['profile_version']}. Backend: "
        f"{backend}.",
        to_svg(fig, fid),
        backend,
    )
