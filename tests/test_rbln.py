"""Compile job and server launcher of the RBLN path (docs/DESIGN.md §5, backend rbln).

No NPU here: the fail-fast paths run for real; the compile orchestration runs against a
stand-in ``optimum.rbln`` module that records its arguments; the launcher's lifecycle
runs with ``rearrival emulate-server`` as the served command.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import pytest

from rearrival.commands.configuration import configuration_option
from rearrival.measure import rbln, serve
from rearrival.model.configuration import ConfigurationError, RblnConfiguration

CLI = str(Path(sys.executable).with_name("rearrival"))


# the paper's maximum sequence length and devices (the study definition's model: block)
SHAPE = {"max_seq_len": 8192, "num_devices": 4}


def compile_config(
    model: str, buckets: tuple[int, ...], batch_size: int, **kw
) -> rbln.CompileConfig:
    return rbln.CompileConfig(model, RblnConfiguration(buckets, batch_size), **(SHAPE | kw))


CONFIG = compile_config("Qwen/Qwen3-4B", (1, 2, 4, 8), 8)

FAKE_OPTIMUM = """
import itertools
import json
from pathlib import Path

CALLS = []


class RBLNQwen3ForCausalLM:
    def __init__(self, model, kwargs):
        self.model, self.kwargs = model, kwargs

    @classmethod
    def from_pretrained(cls, model, **kwargs):
        CALLS.append((model, kwargs))
        return cls(model, kwargs)

    def save_pretrained(self, path):
        path = Path(path)
        path.mkdir(parents=True)
        (path / "rbln_config.json").write_text(json.dumps(self.kwargs))
        (path / "decoder.rbln").write_bytes(b"x" * 1000)
"""


@pytest.fixture
def fake_stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An importable stand-in optimum.rbln and a device directory holding rbln0."""
    package = tmp_path / "fake" / "optimum" / "rbln"
    package.mkdir(parents=True)
    (package.parent / "__init__.py").write_text("")
    (package / "__init__.py").write_text(textwrap.dedent(FAKE_OPTIMUM))
    monkeypatch.syspath_prepend(str(tmp_path / "fake"))
    for name in ("optimum", "optimum.rbln"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    devices = tmp_path / "dev"
    devices.mkdir()
    (devices / "rbln0").touch()
    return devices


def test_without_optimum_rbln_compile_fails_fast_naming_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(rbln.RblnError, match=r"optimum\.rbln' is not importable; install"):
        rbln.compile_artifact(CONFIG, tmp_path / "artifacts")
    assert not (tmp_path / "artifacts").exists()


def test_cli_compile_without_stack_is_one_line_no_traceback(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            CLI,
            "rbln",
            "compile",
            "--model",
            "Qwen/Qwen3-4B",
            "--batch-size",
            "8",
            "--buckets",
            "1,2,4,8",
            "--artifacts",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("rearrival: error:") and done.stderr.count("\n") == 1
    assert "optimum-rbln==0.11.1" in done.stderr


def test_without_device_compile_fails_fast(fake_stack: Path, tmp_path: Path) -> None:
    empty = tmp_path / "nodev"
    empty.mkdir()
    with pytest.raises(rbln.RblnError, match="no RBLN device"):
        rbln.compile_artifact(CONFIG, tmp_path / "artifacts", dev_dir=empty)


def test_compile_passes_the_spec_arguments_and_is_content_addressed(
    fake_stack: Path, tmp_path: Path
) -> None:
    artifacts = tmp_path / "artifacts"
    first = rbln.compile_artifact(CONFIG, artifacts, dev_dir=fake_stack)
    import optimum.rbln as fake

    assert fake.CALLS == [
        (
            "Qwen/Qwen3-4B",
            {
                "export": True,
                "rbln_batch_size": 8,
                "rbln_max_seq_len": 8192,
                "rbln_num_devices": 4,
                "rbln_decoder_batch_sizes": [1, 2, 4, 8],
            },
        )
    ]
    assert not first.skipped and first.compile_s is not None and first.compile_s >= 0
    assert first.artifact.parent == artifacts and (first.artifact / "decoder.rbln").is_file()
    record = json.loads(first.record.read_text())
    assert record["artifact_bytes"] == first.artifact_bytes > 1000
    assert record["config"]["buckets"] == [1, 2, 4, 8] and "optimum-rbln" in record["software"]
    assert [p.name for p in artifacts.iterdir() if p.name.startswith(".")] == []

    again = rbln.compile_artifact(CONFIG, artifacts, dev_dir=fake_stack)
    assert again.skipped and again.artifact == first.artifact and len(fake.CALLS) == 1

    other = compile_config("Qwen/Qwen3-4B", (1, 2, 4, 6, 8), 8)
    third = rbln.compile_artifact(other, artifacts, dev_dir=fake_stack)
    assert not third.skipped and third.artifact != first.artifact and len(fake.CALLS) == 2


def test_artifact_name_depends_on_every_input() -> None:
    software = {"optimum-rbln": "0.11.1", "rebel-compiler": "0.11.1.post1"}
    base = rbln.artifact_name(CONFIG, software)
    assert base == rbln.artifact_name(CONFIG, dict(software))
    variants = [
        compile_config("Qwen/Qwen3-8B", (1, 2, 4, 8), 8),
        compile_config("Qwen/Qwen3-4B", (1, 2, 4, 8, 16), 16),
        compile_config("Qwen/Qwen3-4B", (2, 4, 8), 8),
        compile_config("Qwen/Qwen3-4B", (1, 2, 4, 8), 8, max_seq_len=4096),
        compile_config("Qwen/Qwen3-4B", (1, 2, 4, 8), 8, num_devices=2),
    ]
    names = {rbln.artifact_name(v, software) for v in variants}
    names.add(rbln.artifact_name(CONFIG, software | {"rebel-compiler": "0.11.2"}))
    assert base not in names and len(names) == len(variants) + 1
    assert "/" not in base and base.startswith("Qwen-Qwen3-4B.b8.k1-2-4-8.")
    # pinned: if the address moved with a refactor, artifacts compiled before would be
    # compiled again (about 7 minutes each on the device, paper Table XIV)
    assert base == "Qwen-Qwen3-4B.b8.k1-2-4-8.b7442f9c929d55fd"


@pytest.mark.parametrize(
    ("batch_size", "buckets", "message"),
    [
        (8, (1, 2, 4), "as the largest"),
        (8, (4, 2, 8), "ascending"),
        (8, (0, 8), "positive"),
        (0, (8,), "positive integer"),
    ],
)
def test_bad_compile_options_are_refused_naming_the_option(
    batch_size: int, buckets: tuple[int, ...], message: str
) -> None:
    """`rearrival rbln compile` builds its configuration from --buckets/--batch-size."""
    with pytest.raises(ConfigurationError, match=message) as caught:
        configuration_option(",".join(map(str, buckets)), batch_size)
    assert str(caught.value).startswith("--") and "\n" not in str(caught.value)


def test_vllm_serve_argv_is_a_list_carrying_the_spec_flags() -> None:
    argv = rbln.vllm_serve_argv(Path("/a/b c;rm -rf x"), batch_size=8, port=8011, max_seq_len=8192)
    assert Path(argv[0]).name == "vllm"
    assert argv[1:3] == ["serve", "/a/b c;rm -rf x"]  # one argument, never a shell
    pairs = dict(itertools.pairwise(argv))
    assert pairs["--max-num-seqs"] == "8" and pairs["--block-size"] == "8192"
    assert pairs["--port"] == "8011" and pairs["--host"] == "127.0.0.1"
    assert "--enable-prefix-caching" in argv
    assert rbln.serve_env()["VLLM_LOGGING_LEVEL"] == "DEBUG"


def test_launcher_starts_polls_and_stops_an_emulate_server(tmp_path: Path) -> None:
    port = serve.free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [
        CLI,
        "emulate-server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--buckets",
        "1,2,4,8",
        "--batch-size",
        "8",
    ]
    log = tmp_path / "server.log"
    with serve.running_server(argv, url, log, ready_timeout_s=30, grace_s=5) as server:
        assert server.alive()
        with urllib.request.urlopen(f"{url}/v1/models", timeout=5) as resp:
            assert json.load(resp)["data"]
    assert not server.alive()
    assert server.returncode == 0, "SIGTERM ends emulate-server cleanly"
    assert log.is_file()


def test_launcher_reports_a_server_that_dies_before_ready(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"]
    log = tmp_path / "dead.log"
    with (
        pytest.raises(serve.ServerError, match=r"exited with code 3 before it was ready; read"),
        serve.running_server(
            argv, f"http://127.0.0.1:{serve.free_port()}", log, ready_timeout_s=30
        ),
    ):
        pass
    assert "boom" in log.read_text()


def test_launcher_kills_a_server_that_ignores_sigterm(tmp_path: Path) -> None:
    port = serve.free_port()
    script = textwrap.dedent(f"""
        import signal, http.server
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
        http.server.HTTPServer(("127.0.0.1", {port}), H).serve_forever()
    """)
    with serve.running_server(
        [sys.executable, "-c", script],
        f"http://127.0.0.1:{port}",
        tmp_path / "stubborn.log",
        ready_timeout_s=30,
        grace_s=0.5,
    ) as server:
        assert server.alive()
    assert server.returncode == -9


def test_launcher_refuses_a_missing_command(tmp_path: Path) -> None:
    with (
        pytest.raises(serve.ServerError, match="cannot start server command 'no-such-vllm'"),
        serve.running_server(["no-such-vllm", "serve"], "http://127.0.0.1:1", tmp_path / "x.log"),
    ):
        pass


def test_rbln_run_checks_stack_patch_slots_and_artifact_before_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every pre-flight check fails in one line before a server or run directory exists."""
    from rearrival.measure import patch
    from rearrival.measure.client import ReplayOptions
    from rearrival.model.plans.plan import Plan, Session

    plan = Plan((Session(0, 100, 4, 4, 8, 1.0, "aggregate"),))
    fake = tmp_path / "fake"
    for module in ("vllm", "vllm_rbln"):
        (fake / module).mkdir(parents=True)
        (fake / module / "__init__.py").write_text("")
    devices = tmp_path / "dev"
    devices.mkdir()
    out = tmp_path / "run"

    def attempt(artifact: Path | None = None, slots: int | None = None) -> None:
        rbln.run_rbln(
            plan,
            out,
            artifact=artifact,
            configuration=RblnConfiguration((1, 2, 4, 8), 8, slots),
            variant="wait",
            options=ReplayOptions(),
            manifest={},
            dev_dir=devices,
            ready_timeout_s=5,
        )

    with pytest.raises(rbln.RblnError, match="'vllm' is not importable"):
        attempt()
    monkeypatch.syspath_prepend(str(fake))
    with pytest.raises(rbln.RblnError, match="no RBLN device"):
        attempt()
    (devices / "rbln0").touch()
    state = {"state": "original"}
    monkeypatch.setattr(
        patch,
        "patch_status",
        lambda _site=None: patch.PatchStatus(
            tmp_path, tmp_path / patch.TARGET, "0.11.1", "ab" * 32, state["state"]
        ),
    )
    with pytest.raises(rbln.RblnError, match="rearrival rbln patch apply"):
        attempt()
    state["state"] = "patched"
    with pytest.raises(rbln.RblnError, match="exactly batch_size=8 KV slots"):
        attempt(slots=4)
    with pytest.raises(rbln.RblnError, match="rearrival rbln compile"):
        attempt(artifact=tmp_path / "missing")
    artifact = tmp_path / "artifacts" / "qwen.b8"
    artifact.mkdir(parents=True)
    (artifact.parent / "qwen.b8.json").write_text(
        json.dumps({"config": {"buckets": [1, 2, 4, 6, 8], "batch_size": 8}})
    )
    with pytest.raises(rbln.RblnError, match=r"compiled for buckets \[1, 2, 4, 6, 8\]"):
        attempt(artifact=artifact)
    assert not out.exists()
