"""The run stage (rules/run.smk, docs/DESIGN.md §5, §10): every condition of one replicate
in a seeded shuffled order, refused without a committed preregistration; and the prefill
injection measurement (paper III-C), the other rule of rules/run.smk.
"""

from __future__ import annotations

import contextlib
import random
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from rearrival.atomic import atomic_directory
from rearrival.config.study import Study, StudyConfig, resolve_configurations
from rearrival.errors import DiskError, StageError
from rearrival.measure.backends import BackendSettings, RunRequest, run_backend, run_status
from rearrival.measure.emulate.injection import run_injection
from rearrival.measure.emulate.truth import load_truth
from rearrival.measure.process_groups import Interrupted
from rearrival.model.plans.plangen import derive_seed
from rearrival.parquet import write_frame
from rearrival.prereg.registered import recorded_registration
from rearrival.prereg.registration import check_before_run, open_repo
from rearrival.prereg.witness import require_witnessed
from rearrival.vocabulary import INJECTION_BACKEND
from rearrival.workflow.plans import plan_file, read_study_plan


@dataclass(frozen=True)
class RunSlot:
    """One run of a replicate: which condition, which repeat, which seed."""

    label: str
    configuration: str
    variant: str
    seed: int


def run_slots(cfg: StudyConfig, study: Study, n: int, replicate: int) -> list[RunSlot]:
    """Every run of one replicate in a seeded shuffled order (paper II-D: the order of
    conditions changes from replicate to replicate so drift cannot favour one)."""
    slots = []
    for condition in study.conditions():
        for repeat in range(study.repeats):
            label = condition.label if study.repeats == 1 else f"{condition.label}-{repeat}"
            seed = derive_seed(cfg.study_seed, replicate, n, study.seed_block, f"run:{label}")
            slots.append(RunSlot(label, condition.configuration, condition.variant, seed))
    order_seed = derive_seed(cfg.study_seed, replicate, n, study.seed_block, "order")
    random.Random(order_seed).shuffle(slots)
    return slots


def run_replicate(
    cfg: StudyConfig,
    study_name: str,
    n: int,
    replicate: int,
    *,
    plans_dir: Path,
    out_dir: Path,
    repo_dir: Path,
    selected_path: Path | None = None,
    compile_record: Path | None = None,
    prereg_path: Path | None = None,
    failed_dir: Path | None = None,
) -> list[Path]:
    """Run every condition of one replicate, refusing to start without a committed prereg
    (and, with ``witness:`` set, until the witness holds the registration commit; the
    manifests then record the witness and its ref). With ``prereg_path`` (the prereg
    stage's record) that record must name a registration of the study on HEAD's history.

    The replicate directory is published only when every run completed. A run that
    failed (a server that never became ready, an engine that died, reuse or steps the
    server's own counters contradict) fails the stage with one line per failed run naming
    it and its reason; its record is kept under ``failed_dir`` for diagnosis, never in
    the results, so it is never sealed or used, and the next invocation reruns only this
    replicate.
    """
    study = cfg.study(study_name)
    settings = BackendSettings.from_study_config(cfg, compile_record)
    if prereg_path is not None:
        recorded_registration(repo_dir, study.name, prereg_path)
    prereg = check_before_run(repo_dir, study.name).manifest_entry()
    if cfg.witness:
        ref = require_witnessed(open_repo(repo_dir), cfg.witness, study.name, prereg["commit"])
        prereg["witness"] = {"remote": cfg.witness, "ref": ref}
    configurations = resolve_configurations(cfg, study, selected_path)
    plan_path = plan_file(plans_dir, n, replicate)
    plan = read_study_plan(plans_dir, n, replicate)
    slots = run_slots(cfg, study, n, replicate)
    order = [slot.label for slot in slots]
    written = []
    with atomic_directory(out_dir) as staging, keeping_unfinished(staging, failed_dir, out_dir):
        for slot in slots:
            run = RunRequest(
                study=study.name,
                plan=plan,
                plan_path=plan_path,
                configuration=configurations[slot.configuration],
                variant=slot.variant,
                label=slot.label,
                replicate=replicate,
                seed=slot.seed,
                condition_order=order,
                prereg=prereg,
            )
            run_backend(settings, run, staging / slot.label)
            written.append(out_dir / slot.label)
        refuse_failed_runs(staging, [slot.label for slot in slots], failed_dir)
    return written


@contextmanager
def keeping_unfinished(staging: Path, failed_dir: Path | None, out_dir: Path) -> Iterator[None]:
    """A replicate stopped by a signal (rearrival.measure.process_groups) or by a full
    disk: what it had written and not completed (failed runs, a server log beside a run
    that could not be written) is kept under ``failed_dir`` as a failed run's record is,
    the staging folder goes (atomic_directory), and the line names the replicate, so the
    next invocation reruns exactly this replicate."""
    try:
        yield
    except Interrupted as stop:
        raise stop.naming(_unfinished(staging, failed_dir, out_dir, str(stop))) from None
    except DiskError as exc:
        raise DiskError(_unfinished(staging, failed_dir, out_dir, str(exc))) from None


def _unfinished(staging: Path, failed_dir: Path | None, out_dir: Path, why: str) -> str:
    kept = keep_incomplete_runs(staging, failed_dir)
    where = f"; kept {', '.join(map(str, kept))}" if kept else ""
    return (
        f"replicate {out_dir} not published: {why}{where}; the next invocation reruns "
        "this replicate"
    )


def keep_incomplete_runs(staging: Path, failed_dir: Path | None) -> list[Path]:
    """Move every run of ``staging`` that did not complete, and every server log left
    beside a run, under ``failed_dir`` (replacing an earlier attempt's); where they went."""
    if failed_dir is None:
        return []
    kept = []
    for entry in sorted(staging.iterdir()):
        if entry.is_dir():
            written = (entry / "manifest.json").is_file()  # a run stopped before its record
            if not written or run_status(entry)[0] == "complete":
                continue
        elif not entry.name.endswith(".server.log"):
            continue
        with contextlib.suppress(OSError):  # a full disk may refuse even the move
            kept.append(_keep(entry, failed_dir / entry.name))
    return kept


def _keep(run: Path, kept: Path) -> Path:
    if kept.is_file():
        kept.unlink()
    shutil.rmtree(kept, ignore_errors=True)
    kept.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(run, kept)
    return kept


def refuse_failed_runs(staging: Path, labels: list[str], failed_dir: Path | None) -> None:
    """Raise, naming every run of the replicate that did not complete; keep their
    records under ``failed_dir`` (replacing an earlier attempt's)."""
    failures = []
    for label in labels:
        status, reason = run_status(staging / label)
        if status == "complete":
            continue
        if failed_dir is not None:  # the reason names the files where they are kept
            kept = _keep(staging / label, failed_dir / label)
            reason = (reason or "").replace(str(staging / label), str(kept))
            reason = f"{reason} (record kept in {kept})"
        failures.append(f"{label}: {status}: {reason}")
    if failures:
        where = f"; the records are kept in {failed_dir}" if failed_dir is not None else ""
        raise StageError(
            f"{len(failures)} run(s) did not complete, so the replicate is not published "
            f"and reruns next time{where}:\n" + "\n".join(failures)
        )


def injection(cfg: StudyConfig, out: Path) -> pd.DataFrame:
    """Prefill injection (paper III-C): background inter-token gaps around one injected
    prefill of each configured size, on the emulated engine."""
    if cfg.backend != INJECTION_BACKEND:
        raise StageError(
            f"{cfg.source}: backend {cfg.backend}: the prefill injection "
            f"(paper III-C) has a driver only on the {INJECTION_BACKEND} engine, "
            "and its result would be filed under a backend that did not produce "
            "it; the workflow leaves it out on this backend (set backend: "
            f"{INJECTION_BACKEND} to measure it)"
        )
    truth = load_truth(cfg.measurement.truth_path())  # config emulator_truth:
    settings = cfg.injection
    configuration = cfg.configurations[settings.configuration]
    frames = []
    for size in settings.injected_prompt_tokens:
        seed = derive_seed(cfg.study_seed, 0, int(size), 0, "injection")
        frames.append(
            run_injection(
                background_sessions=settings.background_sessions,
                injected_prompt_tokens=int(size),
                inject_at_s=settings.inject_at_s,
                gen_tokens=settings.background_gen_tokens,
                config=configuration,
                seed=seed,
                truth=truth,
            )
        )
    frame = pd.concat(frames, ignore_index=True)
    frame["backend"] = INJECTION_BACKEND
    write_frame(frame, out)
    return frame
