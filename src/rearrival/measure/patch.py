"""The observation-only patch of vllm-rbln (paper Section II-D, docs/DESIGN.md §5 "rbln").

The real serving stack does not report, per decode step, how many requests ran and
which compiled bucket was chosen. The paper added five lines (one DEBUG log statement)
to ``RBLNOptimumDecoderMixin.preprocess_for_decoder`` right after ``select_bucket_size``
so channel A can be reconstructed from the server log. This module applies that edit to
an installed vllm-rbln 0.11.1, reverts it exactly, and reports the file's SHA256, which
every rbln run records as ``patch_sha256``. It checks the installed version and both
hashes so the file a measurement ran against is known byte for byte; it never touches
control flow, bucket selection or KV allocation.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from rearrival.atomic import atomic_write_bytes
from rearrival.errors import RearrivalError

PACKAGE = "vllm_rbln"
VERSION = "0.11.1"
TARGET = "vllm_rbln/model_executor/models/optimum/model_base.py"
# The unpatched file's sha256 in the PyPI wheel vllm_rbln-0.11.1, taken once from
# `pip download --no-deps vllm-rbln==0.11.1` (unzip, sha256 of TARGET's bytes).
SHA256_ORIGINAL = "46ce1675a2b55e36d4d6dd0154edae793cd3874ed1fbe16e74a40ed7c809298e"
# Derived once from the same download: run `patched_text()` below on TARGET (insert ADDED
# after ANCHOR), sha256 of the resulting UTF-8 bytes. tests/test_patch.py needs no network:
# it uses a stand-in site-packages with its own two hashes; on the device host `rearrival
# rbln patch check` names any other hash, and apply/revert refuse it.
SHA256_PATCHED = "37fc8029a907fa939a3ce72f30b4bd3fdf4632a69605251ec91f71ea2376683f"

# The select_bucket_size call inside preprocess_for_decoder (occurs exactly once).
ANCHOR = (
    "                    padded_batch_size = select_bucket_size(\n"
    "                        request_nums, self.decoder_batch_sizes\n"
    "                    )\n"
)
# Five lines, one log statement, after the bucket is chosen and before any padding.
# Lazy %-formatting keeps the cost of a disabled DEBUG level to one level check.
# The monotonic clock reading (docs/DESIGN.md §3, calibration) turns consecutive lines into
# per-step durations; ``__import__`` keeps the edit to this one statement (the module does
# not import ``time``), so no import line and no control flow changes.
ADDED = (
    "                    # rearrival observation patch: count, chosen bucket, monotonic time\n"
    "                    logger.debug(\n"
    '                        "[BUCKET] request_nums=%d padded_batch_size=%d t_mono_ns=%d",\n'
    '                        request_nums, padded_batch_size, __import__("time").monotonic_ns(),\n'
    "                    )\n"
)


class PatchError(RearrivalError):
    """The installed vllm-rbln cannot be patched or reverted safely; names file and fix."""


class VllmRblnAbsent(PatchError):
    """No vllm-rbln where we looked: nothing to check, apply or revert."""


@dataclass(frozen=True)
class PatchStatus:
    """Where the target file is, which vllm-rbln is installed, and the file's state."""

    site_packages: Path
    path: Path
    version: str | None
    sha256: str | None
    state: str  # "original" | "patched" | "modified" | "missing"

    def line(self) -> str:
        return (
            f"{self.state} sha256={self.sha256 or '-'} version={self.version or '-'} "
            f"file={self.path}"
        )


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def locate_site_packages(site_packages: Path | None) -> Path:
    """The directory holding ``vllm_rbln/``: as given, or where Python would import it."""
    if site_packages is not None:
        if not (site_packages / PACKAGE).is_dir():
            raise VllmRblnAbsent(
                f"site-packages {site_packages}: no '{PACKAGE}' package there; "
                f"pass the site-packages directory where vllm-rbln=={VERSION} "
                "is installed"
            )
        return site_packages
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise VllmRblnAbsent(
            f"vllm-rbln is not installed in this Python ({sys.executable}); install "
            f"vllm-rbln=={VERSION} or pass --site-packages DIR where it is installed"
        )
    return Path(next(iter(spec.submodule_search_locations))).parent


def installed_version(site_packages: Path) -> str | None:
    """Version from the wheel's ``dist-info/METADATA`` (no import of the package)."""
    for dist_info in sorted(site_packages.glob("vllm_rbln-*.dist-info")) + sorted(
        site_packages.glob("vllm-rbln-*.dist-info")
    ):
        metadata = dist_info / "METADATA"
        if not metadata.is_file():
            continue
        for line in metadata.read_text(errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
            if not line.strip():
                break  # headers end at the first blank line
    return None


def patch_status(site_packages: Path | None = None) -> PatchStatus:
    """State of the target file: original, patched, modified (unknown hash) or missing."""
    root = locate_site_packages(site_packages)
    path = root / TARGET
    version = installed_version(root)
    if not path.is_file():
        return PatchStatus(root, path, version, None, "missing")
    digest = sha256_bytes(path.read_bytes())
    state = {SHA256_ORIGINAL: "original", SHA256_PATCHED: "patched"}.get(digest, "modified")
    return PatchStatus(root, path, version, digest, state)


def patched_text(original: str) -> str:
    """The original file with the log statement inserted after the bucket selection."""
    if original.count(ANCHOR) != 1:
        raise PatchError(
            f"{TARGET}: the select_bucket_size call was not found exactly once; "
            f"reinstall vllm-rbln=={VERSION}"
        )
    return original.replace(ANCHOR, ANCHOR + ADDED)


def reverted_text(patched: str) -> str:
    """The inverse edit: remove exactly the inserted lines."""
    if patched.count(ANCHOR + ADDED) != 1:
        raise PatchError(
            f"{TARGET}: the observation patch was not found exactly once; "
            f"reinstall vllm-rbln=={VERSION}"
        )
    return patched.replace(ANCHOR + ADDED, ANCHOR)


def _check_version(status: PatchStatus) -> None:
    if status.version != VERSION:
        raise PatchError(
            f"{status.site_packages}: installed vllm-rbln version is "
            f"{status.version or 'unknown'}, the patch is for {VERSION}; "
            f"install vllm-rbln=={VERSION}"
        )


def _write_keeping_mode(path: Path, data: bytes) -> None:
    mode = path.stat().st_mode & 0o7777
    atomic_write_bytes(path, data)
    os.chmod(path, mode)  # the temp file is 0600; site-packages files stay readable


def apply_patch(site_packages: Path | None = None) -> PatchStatus:
    """Insert the log statement; refuses unless version and pre-patch hash are the known ones.

    Applying to an already patched file is a no-op, so the command is safe to repeat.
    """
    status = patch_status(site_packages)
    _check_version(status)
    if status.state == "patched":
        return status
    if status.state != "original":
        raise PatchError(
            f"{status.path}: sha256 {status.sha256 or '(file missing)'} is neither "
            f"the original {SHA256_ORIGINAL[:12]}... nor the patched "
            f"{SHA256_PATCHED[:12]}...; reinstall vllm-rbln=={VERSION}"
        )
    new = patched_text(status.path.read_bytes().decode()).encode()
    if sha256_bytes(new) != SHA256_PATCHED:
        raise PatchError(
            f"{status.path}: patched content would hash to {sha256_bytes(new)}, "
            f"expected {SHA256_PATCHED}; the patch data in rearrival.measure.patch is "
            "inconsistent, report this as a bug"
        )
    _write_keeping_mode(status.path, new)
    return patch_status(site_packages)


def revert_patch(site_packages: Path | None = None) -> PatchStatus:
    """Remove the log statement, restoring the original hash exactly (checked before writing)."""
    status = patch_status(site_packages)
    _check_version(status)
    if status.state == "original":
        return status
    if status.state != "patched":
        raise PatchError(
            f"{status.path}: sha256 {status.sha256 or '(file missing)'} is not the "
            f"patched {SHA256_PATCHED[:12]}...; reinstall vllm-rbln=={VERSION} "
            "to get the original file back"
        )
    old = reverted_text(status.path.read_bytes().decode()).encode()
    if sha256_bytes(old) != SHA256_ORIGINAL:
        raise PatchError(
            f"{status.path}: reverting would not restore sha256 "
            f"{SHA256_ORIGINAL}; reinstall vllm-rbln=={VERSION}"
        )
    _write_keeping_mode(status.path, old)
    return patch_status(site_packages)
