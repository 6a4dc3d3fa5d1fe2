"""Study-level decision tables: incomplete replicates are never judged, ratios are sums."""

from __future__ import annotations

import pandas as pd
import pytest

from rearrival.config.study import Study, study_config_from_mapping
from rearrival.judge.decide import DEFAULT_CRITERIA
from rearrival.judge.decisions import comparison_pairs, validation_rows

CONFIG = {
    "backend": "emulated",
    "study_seed": 1,
    "replicates": 3,
    "configurations": {
        "baseline": {"buckets": [1, 2, 4, 8], "batch_size": 8},
        "big": {"buckets": [1, 2, 4, 8, 16], "batch_size": 16},
    },
    "studies": {
        "validation": {
            "kind": "validation",
            "n": [6],
            "seed_block": 1,
            "configurations": ["baseline", "big"],
            "variants": ["wait"],
        }
    },
}


def channel_rows(a_base, a_big, status_big=("complete",) * 3):
    rows = []
    for name, values, statuses in (
        ("baseline", a_base, ("complete",) * 3),
        ("big", a_big, status_big),
    ):
        for replicate, (a, status) in enumerate(zip(values, statuses, strict=True)):
            rows.append(
                {
                    "run_id": f"{name}.r{replicate}",
                    "configuration": name,
                    "variant": "wait",
                    "condition": f"{name}-wait",
                    "n": 6,
                    "replicate": replicate,
                    "status": status,
                    "reason": None if status == "complete" else "server died",
                    "a_s": a,
                    "b_s": a * 1.04,
                    "r_s": a * 0.04,
                }
            )
    return pd.DataFrame(rows)


def predictions(device_base, device_big):
    return pd.DataFrame(
        [
            {
                "n": 6,
                "replicate": k,
                "configuration": name,
                "variant": "wait",
                "simulator": "base",
                "device_s": value,
            }
            for name, values in (("baseline", device_base), ("big", device_big))
            for k, value in enumerate(values)
        ]
    )


@pytest.fixture
def cfg():
    return study_config_from_mapping(CONFIG, "test")


def test_ratios_are_sums_over_replicates_not_means(cfg):
    rows = validation_rows(
        cfg.replicates,
        cfg.study("validation"),
        channel_rows([10, 20, 30], [5, 19, 27]),
        predictions([10, 20, 30], [6, 18, 28]),
        DEFAULT_CRITERIA,
    )
    (row,) = rows
    assert row["ratio_obs_a"] == pytest.approx(51 / 60)
    assert row["ratio_obs_a"] != pytest.approx((0.5 + 0.95 + 0.9) / 3)
    assert row["ratio_pred"] == pytest.approx(52 / 60)
    assert row["b_base_s"] == pytest.approx(60 * 1.04)
    assert row["verdict"] == "pass"
    assert row["run_ids"].split() == [
        "baseline.r0",
        "baseline.r1",
        "baseline.r2",
        "big.r0",
        "big.r1",
        "big.r2",
    ]


def test_incomplete_replicate_withholds_with_the_reason(cfg):
    rows = validation_rows(
        cfg.replicates,
        cfg.study("validation"),
        channel_rows([10, 20, 30], [9, 19, 27], ("complete", "partial", "complete")),
        predictions([10, 20, 30], [9, 18, 28]),
        DEFAULT_CRITERIA,
    )
    (row,) = rows
    assert row["verdict"] == "withheld"
    assert "big.r1 is partial (server died)" in row["note"]
    assert "ratio_obs_a" not in row or row.get("ratio_obs_a") is None


def test_missing_replicate_withholds(cfg):
    channels = channel_rows([10, 20, 30], [9, 19, 27])
    channels = channels[~((channels["configuration"] == "big") & (channels["replicate"] == 2))]
    (row,) = validation_rows(
        cfg.replicates,
        cfg.study("validation"),
        channels,
        predictions([10, 20, 30], [9, 18, 28]),
        DEFAULT_CRITERIA,
    )
    assert row["verdict"] == "withheld" and "replicate 2 of big-wait has no run" in row["note"]


def test_a_replicate_run_twice_withholds_instead_of_counting_twice(cfg):
    """Sums pair the sides replicate by replicate: a second complete run of one
    replicate would weigh it twice in one side's sum, so the comparison is withheld."""
    channels = channel_rows([10, 20, 30], [9, 19, 27])
    again = channels[(channels["configuration"] == "big") & (channels["replicate"] == 1)]
    channels = pd.concat([channels, again.assign(run_id="big.r1.again")], ignore_index=True)
    (row,) = validation_rows(
        cfg.replicates,
        cfg.study("validation"),
        channels,
        predictions([10, 20, 30], [9, 18, 28]),
        DEFAULT_CRITERIA,
    )
    assert row["verdict"] == "withheld"
    assert "replicate 1 of big-wait has 2 runs (big.r1 big.r1.again)" in row["note"]


def test_comparison_pairs_cover_interventions_and_workloads():
    study = Study("grid", "comparison", "", (6,), ("baseline", "grid6"), ("control", "wait"), 2)
    labels = [(a.label, b.label) for a, b in comparison_pairs(study)]
    assert labels == [
        ("baseline-control", "grid6-control"),
        ("baseline-wait", "grid6-wait"),
        ("baseline-control", "baseline-wait"),
        ("grid6-control", "grid6-wait"),
    ]
