"""Calibration at work: validation errors with the published vs a calibrated profile on two
emulator truths (docs/DESIGN.md §3). Not a speed benchmark: an experiment.

For each truth (``default``: the twin of the paper's stack; ``assumed``: the clearly
hypothetical stack of ``rearrival/data/emulator_truth_assumed.yaml``):

1. calibrate on the emulated backend with that truth (``rearrival.measure.calibration``);
2. for each profile (published constants, this calibration), run the search to pick a
   configuration, then predict the validation study's ratios (baseline vs slots16 and vs
   the pick, N in {6, 8, 10}, the config's three replicates) with the base simulator;
3. run the same plans and configurations on the emulated backend with that truth and take
   the observed ratio from the true device time (sum of true step durations) and from
   channel A priced with the calibrated profile;
4. print e = R_obs - R_pred per comparison; |e| <= 0.03 at N = 6 and 8 passes (paper IV).

Usage: .venv/bin/python benchmarks/calibration_truths.py [--config F] [--truth default|assumed]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from rearrival.config.calibration import MeasurementSettings
from rearrival.config.study import load_study_config, tool_table_for
from rearrival.judge.channels import channel_a
from rearrival.measure.backends import BackendSettings
from rearrival.measure.calibration.document import profile_document, write_profile
from rearrival.measure.calibration.drive import calibrate
from rearrival.measure.emulate.driver import run_emulated
from rearrival.measure.emulate.truth import load_truth
from rearrival.measure.records import finish_manifest, manifest_template, read_run, write_run
from rearrival.model.cost.profile import load_profile, measured_profile
from rearrival.model.plans.plangen import derive_seed
from rearrival.model.simulator.rbln.sim import SimConfig, simulate
from rearrival.search.run import select
from rearrival.workflow.plans import study_plan

TOLERANCE = 0.03


def _observed(plan, conf, seed, truth, calibrated, scratch: Path) -> tuple[float, float]:
    """True device time and channel A (calibrated constants) of one emulated run."""
    run = run_emulated(plan, conf, variant="wait", seed=seed, truth=truth)
    true_s = float((run.steps["end_s"] - run.steps["start_s"]).sum())
    out = scratch / f"run-{seed}-{'-'.join(map(str, conf.buckets))}"
    manifest = manifest_template(
        study="check",
        backend="emulated",
        configuration=conf,
        variant="wait",
        condition="c",
        replicate=0,
        n=plan.n,
        plan_path="-",
        plan_sha256=plan.sha256(),
        plan_seed=None,
        run_seed=seed,
        condition_order=["c"],
        time_scale=1.0,
        prereg=None,
        run_id=out.name,
    )
    write_run(
        out,
        requests=run.requests,
        steps=run.steps,
        metrics=run.metrics,
        manifest=finish_manifest(manifest),
        server_log=run.server_log,
    )
    return true_s, channel_a(read_run(out), calibrated).total_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=Path("config/config.yaml"))
    parser.add_argument("--truth", default="assumed")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    cfg = load_study_config(args.config)
    settings = cfg.measurement
    settings = MeasurementSettings(
        profile=settings.profile,
        model=settings.model,
        emulator_truth=args.truth,
        calibration=settings.calibration,
    )
    truth = load_truth(settings.truth_path())
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        result = calibrate(
            settings,
            BackendSettings(emulator_truth=settings.truth_path()),
            scratch / "calibration",
            seed=cfg.study_seed,
        )
        path = write_profile(profile_document(result, settings), scratch / "profile.yaml")
        profiles = {"published": measured_profile(), "calibrated": load_profile(path)}
        study = cfg.study("validation")
        table = tool_table_for(cfg)
        picks = {name: select(cfg, args.workers, p)[0] for name, p in profiles.items()}
        slots16 = cfg.configurations["slots16"]
        baseline = cfg.configurations["baseline"]
        print(
            f"truth {truth.version}; picks: "
            + ", ".join(f"{k} -> {v.id}" for k, v in picks.items())
        )
        observed: dict[tuple, tuple[float, float]] = {}
        print(
            "profile     N  comparison                      R_true  R_chA(cal)  R_pred  "
            "e_true   verdict"
        )
        for name, profile in profiles.items():
            confs = {
                "baseline": baseline,
                "slots16": slots16,
                f"selected {picks[name].id}": picks[name],
            }
            for n in study.n:
                true, chan, pred = ({c: 0.0 for c in confs} for _ in range(3))
                for replicate in range(cfg.replicates):
                    plan = study_plan(cfg, study, n, replicate, table)
                    for label, conf in confs.items():
                        seed = derive_seed(
                            cfg.study_seed,
                            replicate,
                            n,
                            study.seed_block,
                            # the label names the knobs: one configuration, one seed per plan
                            f"run:{(conf.buckets, conf.batch_size)}",
                        )
                        key = (n, replicate, conf)
                        if key not in observed:  # same plan and configuration: run once
                            observed[key] = _observed(
                                plan, conf, seed, truth, profiles["calibrated"], scratch
                            )
                        t, a = observed[key]
                        true[label] += t
                        chan[label] += a
                        pred[label] += simulate(plan, SimConfig.of(conf), profile).device_s
                for label in list(confs)[1:]:
                    r_true = true[label] / true["baseline"]
                    r_chan = chan[label] / chan["baseline"]
                    r_pred = pred[label] / pred["baseline"]
                    error = r_true - r_pred
                    verdict = (
                        "exploratory"
                        if n not in (6, 8)
                        else "pass"
                        if abs(error) <= TOLERANCE
                        else "FAIL"
                    )
                    print(
                        f"{name:<11} {n:<2} {label:<31} {r_true:.4f}  {r_chan:.4f}      "
                        f"{r_pred:.4f}  {error:+.4f}  {verdict}"
                    )


if __name__ == "__main__":
    main()
