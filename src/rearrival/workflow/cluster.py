"""Slurm site settings and the check run before a workflow submits anything to Slurm.

Why: a cluster profile that names partitions and generic resources nobody has breaks on
first contact, and a submission that fails half-way leaves a user reading sbatch errors
job by job. The site's partition, account and the generic resource a real-device job holds
(docs/DESIGN.md §8: runs on one device never overlap) come from one documented place, the
environment, read here; `check_slurm_site` turns "no Slurm", "controller down" and
"no such partition" into one line naming the cause and the fix before the first sbatch.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from rearrival.errors import RearrivalError

ENV_PARTITION = "REARRIVAL_SLURM_PARTITION"
ENV_ACCOUNT = "REARRIVAL_SLURM_ACCOUNT"
ENV_DEVICE_GRES = "REARRIVAL_SLURM_DEVICE_GRES"
SLURM_TOOLS = ("sbatch", "squeue", "sinfo", "scontrol", "scancel")
# The format sbatch and the Slurm executor plugin accept for --gres: name[:type][:count].
_GRES = re.compile(r"^[A-Za-z0-9_]+(:[A-Za-z0-9_.]+)?(:[0-9]+)?$")
_QUERY_TIMEOUT_S = 30

Runner = Callable[[Sequence[str]], subprocess.CompletedProcess]


class ClusterError(RearrivalError):
    """The Slurm cluster or the site settings cannot run the workflow."""


@dataclass(frozen=True)
class SlurmSite:
    """Where a site's jobs go: partitions (comma-separated, as sbatch -p takes them), the
    account ('' when the site has none) and the device's generic resource ('' unless the
    backend drives real hardware)."""

    partition: str
    account: str
    device_gres: str

    @property
    def partitions(self) -> tuple[str, ...]:
        return tuple(p for p in self.partition.split(",") if p)


def device_gres(environ: Mapping[str, str], *, real_device: bool) -> str:
    """The --gres a real-device job requests; '' for emulated backends, which hold none."""
    if not real_device:
        return ""
    gres = environ.get(ENV_DEVICE_GRES, "").strip()
    if gres and not _GRES.match(gres):
        raise ClusterError(
            f"{ENV_DEVICE_GRES}={gres!r} is not a Slurm generic resource: "
            "write name[:type][:count], e.g. rbln:4"
        )
    return gres


def site_from_environment(environ: Mapping[str, str], *, real_device: bool) -> SlurmSite:
    """The site settings, refusing the ones the profile cannot submit with."""
    partition = environ.get(ENV_PARTITION, "").strip()
    if not partition:
        raise ClusterError(
            f"{ENV_PARTITION} is not set: export the Slurm partition(s) to submit to "
            "(see profiles/slurm/config.yaml)"
        )
    if ENV_ACCOUNT not in environ:
        raise ClusterError(
            f"{ENV_ACCOUNT} is not set: export your Slurm account, or an empty value if "
            "the site has none (see profiles/slurm/config.yaml)"
        )
    gres = device_gres(environ, real_device=real_device)
    if real_device and not gres:
        raise ClusterError(
            f"{ENV_DEVICE_GRES} is not set: backend rbln on Slurm needs the generic "
            "resource each real-device job holds (e.g. rbln:4), so runs never overlap"
        )
    return SlurmSite(partition, environ[ENV_ACCOUNT].strip(), gres)


def _run(command: Sequence[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            list(command), capture_output=True, text=True, timeout=_QUERY_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(command, 1, "", f"no answer in {_QUERY_TIMEOUT_S} s")


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "no output")


def check_slurm_site(
    environ: Mapping[str, str],
    *,
    real_device: bool,
    run: Runner = _run,
    which: Callable[[str], str | None] = shutil.which,
) -> SlurmSite:
    """Fail with one line before any submission when Slurm cannot take the workflow."""
    missing = [tool for tool in SLURM_TOOLS if which(tool) is None]
    if missing:
        raise ClusterError(
            f"Slurm is not installed here ({', '.join(missing)} not on PATH): install "
            "Slurm's client tools or run without --profile profiles/slurm"
        )
    site = site_from_environment(environ, real_device=real_device)
    ping = run(["scontrol", "ping"])
    if ping.returncode != 0 or "UP" not in ping.stdout:
        raise ClusterError(
            "the Slurm controller is not reachable ("
            f"{_first_line(ping.stdout + ping.stderr)}): start slurmctld or point "
            "SLURM_CONF at the cluster's slurm.conf"
        )
    listing = run(["sinfo", "--noheader", "--format=%R|%G"])
    if listing.returncode != 0:
        raise ClusterError(f"sinfo failed: {_first_line(listing.stderr)}")
    gres_by_partition: dict[str, set[str]] = {}
    for line in listing.stdout.splitlines():
        name, _, gres = line.strip().partition("|")
        if name:
            gres_by_partition.setdefault(name, set()).update(
                g.split("(")[0] for g in gres.split(",") if g and g != "(null)"
            )
    for partition in site.partitions:
        if partition not in gres_by_partition:
            raise ClusterError(
                f"Slurm partition {partition!r} ({ENV_PARTITION}) does not exist; this "
                f"cluster has: {', '.join(sorted(gres_by_partition))}"
            )
    if site.device_gres:
        wanted = site.device_gres.split(":")[0]
        offered = {g.split(":")[0] for p in site.partitions for g in gres_by_partition[p]}
        if wanted not in offered:
            raise ClusterError(
                f"no node in partition(s) {site.partition} offers the generic resource "
                f"{wanted!r} ({ENV_DEVICE_GRES}); they offer: "
                f"{', '.join(sorted(offered)) or 'none'}"
            )
    return site
