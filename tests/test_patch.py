"""The observation patch (paper Section II-D) on a stand-in vllm-rbln 0.11.1 install.

The tests need no network: a fixture writes a small site-packages directory with the
pieces the patch reads (``vllm_rbln-0.11.1.dist-info/METADATA`` and a ``model_base.py``
whose ``preprocess_for_decoder`` selects the bucket inside nested blocks, as the
published file does) and points the module's two known hashes at that file. What is
checked is the edit itself: where the line goes, that control flow is unchanged, that the
emitted line parses, that revert restores the bytes, and every refusal. That the two
constants are the published wheel's is checked where the real file is, on the device
host: ``rearrival rbln patch check`` names any other hash, and apply/revert refuse it.
"""

from __future__ import annotations

import ast
import io
import logging
import py_compile
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from rearrival.measure import patch
from rearrival.measure.steplog import parse_step_log, parse_step_times

# The structure the patch relies on (not vllm-rbln's code): the bucket selection is the
# last statement of a block nested five levels deep, so ANCHOR matches it exactly once.
STAND_IN = f"""\
# Stand-in for vllm_rbln's optimum model_base: only what the observation patch touches.
import logging

logger = logging.getLogger(__name__)


def select_bucket_size(request_nums, batch_sizes):
    return min(size for size in batch_sizes if size >= request_nums)


class RBLNOptimumDecoderMixin:
    decoder_batch_sizes = (1, 2, 4, 8)

    def preprocess_for_decoder(self, request_nums, is_prompt):
        if not is_prompt:
            if self.decoder_batch_sizes:
                if request_nums > 0:
{patch.ANCHOR}        return request_nums
"""
METADATA = f"Metadata-Version: 2.1\nName: vllm-rbln\nVersion: {patch.VERSION}\n\nA stand-in.\n"
CLI = str(Path(sys.executable).with_name("rearrival"))
# The real entry point (one-line errors, exit codes) with the stand-in's hashes as the
# known ones; argv: original hash, patched hash, then the CLI arguments.
CLI_WITH_HASHES = (
    "import sys; from rearrival.measure import patch; "
    "patch.SHA256_ORIGINAL, patch.SHA256_PATCHED = sys.argv[1:3]; del sys.argv[1:3]; "
    "from rearrival.cli import main; main()"
)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A site-packages directory holding the stand-in as an installed 0.11.1, whose
    original and patched hashes are the module's known ones for this test."""
    root = tmp_path / "site-packages"
    target = root / patch.TARGET
    target.parent.mkdir(parents=True)
    target.write_text(STAND_IN)
    dist_info = root / f"vllm_rbln-{patch.VERSION}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(METADATA)
    monkeypatch.setattr(patch, "SHA256_ORIGINAL", patch.sha256_bytes(STAND_IN.encode()))
    monkeypatch.setattr(
        patch, "SHA256_PATCHED", patch.sha256_bytes(patch.patched_text(STAND_IN).encode())
    )
    return root


def _target_sha(site: Path) -> str:
    return patch.sha256_bytes((site / patch.TARGET).read_bytes())


def _decoder_body(tree: ast.Module) -> list[ast.stmt]:
    """Statements of the block in preprocess_for_decoder holding select_bucket_size."""
    cls = next(
        n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RBLNOptimumDecoderMixin"
    )
    func = next(
        n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "preprocess_for_decoder"
    )
    for node in ast.walk(func):
        body = getattr(node, "body", None)
        if isinstance(body, list) and any(
            isinstance(s, ast.Assign) and "select_bucket_size" in ast.unparse(s) for s in body
        ):
            return body
    raise AssertionError("select_bucket_size assignment not found")


def _selection_index(body: list[ast.stmt]) -> int:
    return next(i for i, s in enumerate(body) if "select_bucket_size" in ast.unparse(s))


def test_an_installed_original_is_recognised(site: Path) -> None:
    status = patch.patch_status(site)
    assert (status.state, status.version, status.sha256) == (
        "original",
        "0.11.1",
        patch.SHA256_ORIGINAL,
    )


def test_apply_inserts_one_debug_line_right_after_bucket_selection(site: Path) -> None:
    original = (site / patch.TARGET).read_text()
    status = patch.apply_patch(site)
    assert status.state == "patched" and status.sha256 == patch.SHA256_PATCHED
    assert _target_sha(site) == patch.SHA256_PATCHED
    py_compile.compile(str(site / patch.TARGET), doraise=True, cfile=str(site / "x.pyc"))
    patched = (site / patch.TARGET).read_text()
    assert len(patched.splitlines()) - len(original.splitlines()) == 5

    tree = ast.parse(patched)
    body = _decoder_body(tree)
    index = _selection_index(body)
    assert len(body) == index + 2, "the log statement is the only addition, directly after"
    logged = body[index + 1]
    assert isinstance(logged, ast.Expr) and ast.unparse(logged.value.func) == "logger.debug"

    # Control flow untouched: without the new statement the trees are identical.
    del body[index + 1]
    assert ast.dump(tree) == ast.dump(ast.parse(original))


def test_emitted_line_reads_back_through_the_step_log_parser(site: Path) -> None:
    """Run the inserted statement with a real logger in vllm-rbln's format, parse it."""
    patch.apply_patch(site)
    body = _decoder_body(ast.parse((site / patch.TARGET).read_text()))
    index = _selection_index(body)
    statement = compile(ast.Module(body=[body[index + 1]], type_ignores=[]), "patch", "exec")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        logging.Formatter(
            "[vllm-rbln] %(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s"
        )
    )
    logger = logging.getLogger("vllm_rbln.test_patch")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        for n, b in [(3, 4), (1, 1), (8, 8)]:
            exec(statement, {"logger": logger, "request_nums": n, "padded_batch_size": b})
        logger.setLevel(logging.INFO)  # the line is DEBUG: invisible at the default level
        exec(statement, {"logger": logger, "request_nums": 2, "padded_batch_size": 2})
    finally:
        logger.removeHandler(handler)
    assert parse_step_log(stream.getvalue()) == [(3, 4), (1, 1), (8, 8)]
    stamps = [t for _, _, t in parse_step_times(stream.getvalue())]
    assert all(t is not None for t in stamps) and stamps == sorted(stamps), (
        "every line carries a monotonic clock reading for calibration (docs/DESIGN.md §3)"
    )


def test_revert_restores_the_original_bytes_and_mode(site: Path) -> None:
    target = site / patch.TARGET
    before_bytes, before_mode = target.read_bytes(), stat.S_IMODE(target.stat().st_mode)
    patch.apply_patch(site)
    assert stat.S_IMODE(target.stat().st_mode) == before_mode
    assert patch.apply_patch(site).state == "patched"  # repeating apply is a no-op
    status = patch.revert_patch(site)
    assert status.state == "original" and status.sha256 == patch.SHA256_ORIGINAL
    assert target.read_bytes() == before_bytes
    assert stat.S_IMODE(target.stat().st_mode) == before_mode
    assert patch.revert_patch(site).state == "original"


def test_wrong_version_is_refused_and_nothing_changes(site: Path) -> None:
    metadata = next(site.glob("vllm_rbln-*.dist-info")) / "METADATA"
    metadata.write_text(metadata.read_text().replace("Version: 0.11.1", "Version: 0.11.0", 1))
    with pytest.raises(patch.PatchError, match=r"0\.11\.0.*install vllm-rbln==0\.11\.1"):
        patch.apply_patch(site)
    assert _target_sha(site) == patch.SHA256_ORIGINAL


def test_unexpected_hash_is_refused_by_apply_and_revert(site: Path) -> None:
    target = site / patch.TARGET
    target.write_bytes(target.read_bytes() + b"# local edit\n")
    edited = target.read_bytes()
    assert patch.patch_status(site).state == "modified"
    with pytest.raises(patch.PatchError, match="neither the original"):
        patch.apply_patch(site)
    with pytest.raises(patch.PatchError, match=r"reinstall vllm-rbln==0\.11\.1"):
        patch.revert_patch(site)
    assert target.read_bytes() == edited


def test_cli_apply_check_revert_and_one_line_errors(site: Path, tmp_path: Path) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        hashes = (patch.SHA256_ORIGINAL, patch.SHA256_PATCHED)
        where = ("--site-packages", str(site))
        return subprocess.run(
            [sys.executable, "-c", CLI_WITH_HASHES, *hashes, "rbln", "patch", *args, *where],
            capture_output=True,
            text=True,
            check=False,
        )

    applied = cli("apply")
    assert applied.returncode == 0 and applied.stdout.startswith("patched sha256=")
    checked = cli("check")
    assert f"sha256={patch.SHA256_PATCHED}" in checked.stdout
    assert cli("revert").stdout.startswith(f"original sha256={patch.SHA256_ORIGINAL}")

    shutil.rmtree(next(site.glob("vllm_rbln-*.dist-info")))
    refused = cli("apply")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr.count("\n") == 1 and "version is unknown" in refused.stderr

    nowhere = subprocess.run(
        [CLI, "rbln", "patch", "check", "--site-packages", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        check=False,
    )
    # no vllm-rbln: no state to promise, a documented exit 1 (not the bad-input 2)
    assert nowhere.returncode == 1 and nowhere.stdout.startswith("absent: ")
    assert "no 'vllm_rbln' package there" in nowhere.stdout and nowhere.stderr == ""
