"""Slurm site settings and the pre-submission check (rearrival.workflow.cluster), without Slurm:
the Slurm commands are answered by a stand-in, so each refusal is checked for naming its
cause. tests/test_slurm_cluster.py runs the same check against a real cluster."""

from __future__ import annotations

import subprocess

import pytest

from rearrival.workflow.cluster import (
    ENV_ACCOUNT,
    ENV_DEVICE_GRES,
    ENV_PARTITION,
    ClusterError,
    SlurmSite,
    check_slurm_site,
    device_gres,
    site_from_environment,
)

SITE_ENV = {ENV_PARTITION: "cpu,rbln", ENV_ACCOUNT: "proj42", ENV_DEVICE_GRES: "rbln:4"}
SINFO = "cpu|(null)\nrbln|rbln:4\n"


def _answers(
    ping: tuple[int, str] = (0, "Slurmctld(primary) at head is UP\n"),
    sinfo: tuple[int, str] = (0, SINFO),
):
    """A stand-in for the two Slurm queries the check makes."""

    def run(command):
        code, out = {"scontrol": ping, "sinfo": sinfo}[command[0]]
        return subprocess.CompletedProcess(
            command, code, out if code == 0 else "", "" if code == 0 else out
        )

    return run


def _installed(tool: str) -> str:
    return f"/usr/bin/{tool}"


def test_site_settings_come_from_the_environment():
    site = site_from_environment(SITE_ENV, real_device=True)
    assert site == SlurmSite("cpu,rbln", "proj42", "rbln:4")
    assert site.partitions == ("cpu", "rbln")
    assert site_from_environment(SITE_ENV, real_device=False).device_gres == ""


def test_an_empty_account_is_allowed_but_an_unset_one_is_not():
    assert site_from_environment(SITE_ENV | {ENV_ACCOUNT: ""}, real_device=False).account == ""
    unset = {k: v for k, v in SITE_ENV.items() if k != ENV_ACCOUNT}
    with pytest.raises(ClusterError, match=ENV_ACCOUNT):
        site_from_environment(unset, real_device=False)


@pytest.mark.parametrize("missing", [ENV_PARTITION, ENV_DEVICE_GRES])
def test_missing_settings_are_named(missing):
    environ = {k: v for k, v in SITE_ENV.items() if k != missing}
    with pytest.raises(ClusterError, match=f"^{missing} is not set"):
        site_from_environment(environ, real_device=True)


def test_device_gres_is_only_requested_on_real_hardware_and_must_parse():
    assert device_gres(SITE_ENV, real_device=False) == ""
    assert device_gres({}, real_device=True) == ""
    with pytest.raises(ClusterError, match="name\\[:type\\]\\[:count\\]"):
        device_gres({ENV_DEVICE_GRES: "--gres=rbln:4"}, real_device=True)


def test_a_usable_cluster_passes():
    site = check_slurm_site(SITE_ENV, real_device=True, run=_answers(), which=_installed)
    assert site.device_gres == "rbln:4"


def test_no_slurm_is_one_line_naming_the_missing_tools():
    with pytest.raises(ClusterError) as error:
        check_slurm_site(SITE_ENV, real_device=False, run=_answers(), which=lambda _: None)
    message = str(error.value)
    assert message.startswith("Slurm is not installed here (sbatch, squeue")
    assert "\n" not in message


def test_controller_down_is_named():
    down = _answers(ping=(1, "Slurmctld(primary) at head is DOWN\n"))
    with pytest.raises(ClusterError, match=r"controller is not reachable .*DOWN"):
        check_slurm_site(SITE_ENV, real_device=False, run=down, which=_installed)


def test_unknown_partition_lists_the_real_ones():
    environ = SITE_ENV | {ENV_PARTITION: "gpu"}
    with pytest.raises(ClusterError, match=r"partition 'gpu' .* this cluster has: cpu, rbln"):
        check_slurm_site(environ, real_device=False, run=_answers(), which=_installed)


def test_device_gres_the_partitions_do_not_offer_is_refused():
    environ = SITE_ENV | {ENV_PARTITION: "cpu"}
    with pytest.raises(ClusterError, match=r"generic resource 'rbln'.* offer: none"):
        check_slurm_site(environ, real_device=True, run=_answers(), which=_installed)
