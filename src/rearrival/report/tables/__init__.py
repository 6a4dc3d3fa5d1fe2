"""The paper's tables rebuilt from this run's results (docs/DESIGN.md §13), by family.

Every table is computed from the files the pipeline wrote; nothing is copied from the
paper. Every row that comes from runs carries the ids of those runs, so a cell can be
traced back to its run directories; rows that come from a model or the simulator name
their source instead. A results file that does not exist yet gives a table with a "not
produced" note rather than an error.

The families: ``mechanisms`` (III, VI, M), ``validation`` (IX-XIII), ``costs`` (VIII,
XIV, XV), ``search`` (S8), ``supplementary`` (S1, S9), the calibration tables (VII,
VII-P, IX-P) in ``rearrival.report.calibration``, and ``agents`` (A1-A3, beyond the
paper: built only when the config has a study of agent sessions). The table type and
its renderers are in ``rearrival.report.table_model``. ``TABLE_BUILDERS`` lists the
paper's tables in its order (M, the mechanism studies, last); ``build_tables`` builds
them and joins the paper's published numbers; ``table_family`` names a table's family,
which ``snakemake --report`` uses to group the table files (rules/report.smk).
"""

from __future__ import annotations

from collections.abc import Callable

from rearrival.report.calibration import table_ix_profiles, table_prefill, table_vii
from rearrival.report.paper_numbers import load_paper_numbers, with_paper
from rearrival.report.results import Results
from rearrival.report.table_model import Table
from rearrival.report.tables.agents import condition_table, decision_table, round_table
from rearrival.report.tables.costs import table_viii, table_xiv, table_xv
from rearrival.report.tables.mechanisms import table_iii, table_m, table_vi
from rearrival.report.tables.search import table_s8
from rearrival.report.tables.supplementary import table_s1, table_s9
from rearrival.report.tables.validation import table_ix, table_x, table_xi, table_xii, table_xiii

TABLE_BUILDERS: dict[str, Callable[[Results], Table]] = {
    "III": table_iii,
    "VI": table_vi,
    "VII": table_vii,
    "VII-P": table_prefill,
    "VIII": table_viii,
    "IX": table_ix,
    "IX-P": table_ix_profiles,
    "X": table_x,
    "XI": table_xi,
    "XII": table_xii,
    "XIII": table_xiii,
    "XIV": table_xiv,
    "XV": table_xv,
    "S1": table_s1,
    "S8": table_s8,
    "S9": table_s9,
    "M": table_m,
}
# Studies of agent sessions (a ``workload`` block), after the paper's tables.
AGENT_TABLE_BUILDERS: dict[str, Callable[[Results], Table]] = {
    "A1": condition_table,
    "A2": round_table,
    "A3": decision_table,
}


def build_tables(res: Results) -> list[Table]:
    """Every table, in the paper's order, with the paper's published value and the
    difference beside each cell the paper reports."""
    numbers = load_paper_numbers()
    tables = [with_paper(builder(res), numbers) for builder in TABLE_BUILDERS.values()]
    if res.agent_studies():
        tables += [builder(res) for builder in AGENT_TABLE_BUILDERS.values()]
    return tables


def table_family(table_id: str) -> str:
    """The family a table is built in, named by its builder's module (``mechanisms``,
    ``validation``, ``costs``, ``search``, ``supplementary`` or ``calibration``); any
    other file of the tables folder (the scorecard) is a family of its own."""
    builder = (TABLE_BUILDERS | AGENT_TABLE_BUILDERS).get(table_id)
    return builder.__module__.rsplit(".", 1)[-1] if builder is not None else table_id
