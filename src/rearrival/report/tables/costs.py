"""Tables of the compared configurations and what they cost besides run time (paper
Sections IV-B and V-D; docs/DESIGN.md §13): Table VIII (bucket set, batch size, KV slots and
KV reservation of every configuration), Table XIV (compile time and artifact size,
measured where hardware compile records exist, else the profile's fitted model) and
Table XV (KV memory per token, slot and device from the model dimensions).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rearrival.config.study import SELECTED
from rearrival.model.configuration import Configuration
from rearrival.model.cost.profile import GIB, measured_profile
from rearrival.report.results import Results, run_configuration
from rearrival.report.table_model import Column, Part, Table


def configuration_names(res: Results) -> list[str]:
    names = list(res.cfg.configurations)
    if any(s.uses_selected for s in res.studies()):
        names.append(SELECTED)
    return names


def _configuration_runs(res: Results, name: str) -> list[str]:
    frame = res.all_channels()
    if frame.empty:
        return []
    chosen = frame[(frame["configuration"] == name) & (frame["status"] == "complete")]
    return sorted(chosen["run_id"])


def _resolved(res: Results, name: str) -> Configuration | None:
    conf = res.configuration(name)
    if conf is None:
        for study in res.studies():
            conf = run_configuration(res.channels(study.name), name)
            if conf is not None:
                break
    return conf


def table_viii(res: Results) -> Table:
    profile = measured_profile()
    notes, rows = [], []
    for name in configuration_names(res):
        conf = _resolved(res, name)
        if conf is None:
            notes.append(
                f"Configuration '{name}' not produced: results/search/selected.json "
                "is absent (run snakemake results/search/selected.json)."
            )
            continue
        kv = profile.kv_gib(conf.slots)
        runs = _configuration_runs(res, name)
        rows.append(
            {
                "configuration": name,
                "buckets": ",".join(map(str, conf.buckets)),
                "n_buckets": len(conf.buckets),
                "batch_size": conf.batch_size,
                "slots": conf.slots,
                "kv_gib": kv,
                "kv_gib_per_device": kv / profile.num_devices,
                "studies": " ".join(s.name for s in res.studies() if name in s.configurations),
                "source": "results/search/selected.json" if name == SELECTED else res.cfg.source,
                "run_ids": " ".join(runs),
            }
        )
    return Table(
        "VIII",
        "Compared configurations",
        f"Bucket set, batch size and KV slots of every configuration, with the KV "
        f"reservation from the profile ({profile.version}): whole instance and per "
        f"device over {profile.num_devices} devices.",
        (
            Part(
                "configurations",
                (
                    Column("configuration", "configuration"),
                    Column("buckets", "buckets"),
                    Column("batch_size", "batch", "int"),
                    Column("slots", "slots", "int"),
                    Column("kv_gib", "KV (GiB)", "f3"),
                    Column("kv_gib_per_device", "KV per device (GiB)", "f5"),
                    Column("studies", "studies"),
                    Column("run_ids", "runs", "ids"),
                ),
                tuple(rows),
            ),
        ),
        tuple(notes),
        "configuration (no measurement)",
    )


def _compile_measurements(res: Results) -> dict[tuple[tuple[int, ...], int], dict[str, Any]]:
    """Measured compile records found anywhere in results/compile/*.json, keyed by
    (buckets, batch_size); the first record with a compile time wins."""
    found: dict[tuple[tuple[int, ...], int], dict[str, Any]] = {}

    def walk(node: Any, source: Path) -> None:
        if isinstance(node, dict):
            config = node.get("config")
            if isinstance(config, dict) and "buckets" in config and "batch_size" in config:
                key = (tuple(int(b) for b in config["buckets"]), int(config["batch_size"]))
                if node.get("compile_s") is not None and key not in found:
                    found[key] = {**node, "_source": str(source)}
            for value in node.values():
                walk(value, source)
        elif isinstance(node, list):
            for value in node:
                walk(value, source)

    for path, data in res.compile_records():
        walk(data, path)
    return found


def table_xiv(res: Results) -> Table:
    profile = measured_profile()
    measured = _compile_measurements(res)
    notes, rows = [], []
    for name in configuration_names(res):
        conf = _resolved(res, name)
        if conf is None:
            notes.append(f"Configuration '{name}' not produced (no search result yet).")
            continue
        record = measured.get((conf.buckets, conf.batch_size))
        row = {
            "configuration": name,
            "buckets": ",".join(map(str, conf.buckets)),
            "n_buckets": len(conf.buckets),
            "batch_size": conf.batch_size,
            "run_ids": "",
        }
        if record is not None:
            row.update(
                compile_s=float(record["compile_s"]),
                artifact_gib=float(record["artifact_bytes"]) / GIB,
                source=f"measured ({record['_source']})",
            )
        else:
            row.update(
                compile_s=profile.compile_seconds(len(conf.buckets)),
                artifact_gib=profile.artifact_gib(len(conf.buckets)),
                source=f"model: authors' fit in profile {profile.version}",
            )
        row["over_budget"] = "yes" if row["compile_s"] > profile.compile_budget_s else "no"
        rows.append(row)
    if not measured:
        notes.append(
            "No compile was measured in this run (results/compile/*.json absent, "
            "as on the emulated backend): every value is the profile's fitted model, "
            "not a measurement."
        )
    return Table(
        "XIV",
        "Compile time and artifact size",
        f"Per configuration: compile seconds and artifact size, measured on hardware "
        f"where results/compile/*.json exists, else the fitted model; the search's "
        f"compile budget is {profile.compile_budget_s:g} s.",
        (
            Part(
                "configurations",
                (
                    Column("configuration", "configuration"),
                    Column("buckets", "buckets"),
                    Column("n_buckets", "buckets (count)", "int"),
                    Column("compile_s", "compile (s)", "f1"),
                    Column("artifact_gib", "artifact (GiB)", "f3"),
                    Column("over_budget", "over budget"),
                    Column("source", "source"),
                ),
                tuple(rows),
            ),
        ),
        tuple(notes),
        "measured" if measured else "model",
    )


def table_xv(res: Results) -> Table:
    profile = measured_profile()
    source = f"profile {profile.version}"
    quantities = [
        {
            "quantity": "KV bytes per token (2 x layers x kv_heads x head_dim x bytes)",
            "value": profile.kv_bytes_per_token,
            "unit": "B",
        },
        {"quantity": "KV per token", "value": profile.kv_bytes_per_token / 1024, "unit": "KiB"},
        {
            "quantity": "tokens per slot (max_seq_len, eager path)",
            "value": profile.slot_tokens,
            "unit": "tokens",
        },
        {"quantity": "KV per slot", "value": profile.slot_bytes / GIB, "unit": "GiB"},
        {
            "quantity": f"KV per slot per device ({profile.num_devices} devices)",
            "value": profile.slot_gib_per_device,
            "unit": "GiB",
        },
    ]
    for row in quantities:
        row |= {"source": source, "run_ids": ""}
    per_conf, notes = [], []
    for name in configuration_names(res):
        conf = _resolved(res, name)
        if conf is None:
            notes.append(f"Configuration '{name}' not produced (no search result yet).")
            continue
        kv = profile.kv_gib(conf.slots)
        per_conf.append(
            {
                "configuration": name,
                "slots": conf.slots,
                "kv_gib": kv,
                "kv_gib_per_device": kv / profile.num_devices,
                "source": source,
                "run_ids": "",
            }
        )
    return Table(
        "XV",
        "KV memory per token, slot and device",
        "KV cache reservation from the model dimensions in the profile: per token, "
        "per slot, per device, and per configuration's slot count.",
        (
            Part(
                "per token and slot",
                (
                    Column("quantity", "quantity"),
                    Column("value", "value", "f5"),
                    Column("unit", "unit"),
                    Column("source", "source"),
                ),
                tuple(quantities),
            ),
            Part(
                "per configuration",
                (
                    Column("configuration", "configuration"),
                    Column("slots", "slots", "int"),
                    Column("kv_gib", "KV (GiB)", "f3"),
                    Column("kv_gib_per_device", "KV per device (GiB)", "f5"),
                    Column("source", "source"),
                ),
                tuple(per_conf),
            ),
        ),
        tuple(notes),
        "model",
    )
