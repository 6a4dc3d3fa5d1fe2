"""The audit's report: one row per run, registration, decision table, ledger, witness
and signature check, its verdict, and the table ``rearrival audit`` prints."""

from __future__ import annotations

import textwrap
from dataclasses import asdict, dataclass
from typing import Any

OK, VIOLATION, EXCLUDED = "ok", "violation", "excluded"
REGISTRATION_ROW = "(registration)"


@dataclass(frozen=True)
class AuditRow:
    """One line of the audit table: a run (or a study's registration) and its verdict."""

    study: str
    run: str
    prereg_commit: str | None
    prereg_time: str | None
    run_start: str | None
    verdict: str
    reason: str


@dataclass(frozen=True)
class AuditReport:
    """All rows; ``ok`` is False as soon as one row is a violation."""

    rows: tuple[AuditRow, ...]

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def violations(self) -> tuple[AuditRow, ...]:
        return tuple(r for r in self.rows if r.verdict == VIOLATION)

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "rows": [asdict(r) for r in self.rows]}

    def totals(self) -> str:
        counts = {v: sum(r.verdict == v for r in self.rows) for v in (OK, VIOLATION, EXCLUDED)}
        return (
            f"{len(self.rows)} rows: {counts[OK]} ok, {counts[VIOLATION]} violation, "
            f"{counts[EXCLUDED]} excluded"
        )

    def table(self, *, violations_only: bool = False) -> str:
        """The totals first, then one block per row: verdict, run, prereg commit and
        start on one line, the reason wrapped below it, all within ``WIDTH`` columns.
        Runs of studies that were never registered (calibration) are one line per
        study; ``violations_only`` keeps only the violations."""
        shown = self.violations if violations_only else self.rows
        unregistered: dict[str, int] = {}
        lines = [self.totals()]
        for row in shown:
            if row.verdict == OK and row.reason == UNREGISTERED:
                unregistered[row.study] = unregistered.get(row.study, 0) + 1
                continue
            lines.extend(_heading(row))
            lines.extend(
                textwrap.wrap(
                    row.reason,
                    WIDTH,
                    initial_indent=_INDENT,
                    subsequent_indent=_INDENT,
                    break_on_hyphens=False,
                )
            )
        lines.extend(
            f"{OK:<{len(_INDENT)}}{study}: {count} run(s) not preregistered "
            "(no prediction judges them)"
            for study, count in sorted(unregistered.items())
        )
        return "\n".join(lines)


WIDTH = 100
_INDENT = " " * 10
UNREGISTERED = "not preregistered: no prediction judges this run"


def _heading(row: AuditRow) -> list[str]:
    """Verdict, run, prereg commit and start; the last two on a line of their own when
    one line would pass ``WIDTH``."""
    named = row.run.startswith((f"{row.study}/", f"{row.study}."))
    first = f"{row.verdict:<{len(_INDENT) - 1}} {row.run if named else f'{row.study} {row.run}'}"
    details = []
    if row.prereg_commit:
        details.append(f"prereg {row.prereg_commit[:12]}")
    if row.run_start:
        details.append(f"started {row.run_start[:19]}")
    joined = "  ".join([first, *details])
    if len(joined) <= WIDTH or not details:
        return [joined]
    return [first, _INDENT + "  ".join(details)]
