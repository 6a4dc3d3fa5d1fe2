"""Run manifests as the audit reads them: only the fields its checks rely on, so a
manifest that cannot be read becomes a violation row instead of an exception."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from rearrival.prereg.audit.report import VIOLATION, AuditRow
from rearrival.prereg.registration import PreregError, parse_utc


@dataclass(frozen=True)
class Run:
    """The manifest fields the audit relies on (TEAM.md run-record contract)."""

    label: str
    study: str
    status: str
    reason: str | None
    started_at: str | None
    start: datetime | None
    prereg: dict[str, Any]
    plan_seed: int | None
    plan_sha256: str | None
    replicate: Any
    n: Any
    variant: Any
    backend: Any = None
    configuration: Any = None


def load_run(path: Path, results_dir: Path) -> Run | AuditRow:
    """A manifest as a Run, or a violation row saying what is wrong with the file."""
    label = path.parent.relative_to(results_dir).as_posix()
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return AuditRow(
            "?",
            label,
            None,
            None,
            None,
            VIOLATION,
            f"{path}: unreadable manifest ({exc}); re-run this run",
        )
    if not isinstance(raw, dict):
        return AuditRow(
            "?",
            label,
            None,
            None,
            None,
            VIOLATION,
            f"{path}: manifest is not a JSON object; re-run this run",
        )
    study = str(raw.get("study", "?"))
    label = str(raw.get("run_id") or label)
    start: datetime | None = None
    try:
        start = parse_utc(raw.get("started_at"), f"{path}: started_at")
    except PreregError as exc:
        if raw.get("status") == "complete":
            return AuditRow(study, label, None, None, None, VIOLATION, str(exc))
    prereg = raw.get("prereg") if isinstance(raw.get("prereg"), dict) else {}
    seeds = raw.get("seeds") if isinstance(raw.get("seeds"), dict) else {}
    seed = seeds.get("plan")
    return Run(
        label,
        study,
        str(raw.get("status")),
        raw.get("reason"),
        raw.get("started_at"),
        start,
        prereg,
        seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
        raw.get("plan_sha256"),
        raw.get("replicate"),
        raw.get("n"),
        raw.get("variant"),
        raw.get("backend"),
        raw.get("configuration"),
    )
