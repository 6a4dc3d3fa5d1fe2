"""What the advice tells a user to run (rearrival.search.deploy; issue 36 item 3): the
flags are the engines' own, checked against vLLM 0.32.0's parser and the project's own
`rearrival rbln compile` verb and optimum-rbln arguments."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest
from typer.testing import CliRunner
from vllm_env import require_vllm

from rearrival.cli import app
from rearrival.measure.rbln import CompileConfig
from rearrival.model.configuration import RblnConfiguration, VllmConfiguration
from rearrival.search.deploy import (
    rbln_compile_args,
    rbln_deployment,
    rbln_knobs,
    vllm_knobs,
    vllm_serve_args,
)

runner = CliRunner()
GPU_PICK = VllmConfiguration(
    (1, 2, 4, 8), 16, num_blocks=5454, block_size=16, max_num_batched_tokens=8192
)
# vLLM's own parser, then its EngineArgs: every flag must be one vLLM takes, meaning what
# the knobs say (``vllm serve`` is this parser behind a console script).
PARSE = """
import json, sys
from vllm.engine.arg_utils import EngineArgs
from vllm.utils.argparse_utils import FlexibleArgumentParser
args = EngineArgs.add_cli_args(FlexibleArgumentParser()).parse_args(sys.argv[1:])
e = EngineArgs.from_cli_args(args)
names = ("max_num_seqs", "num_gpu_blocks_override", "block_size", "max_num_batched_tokens",
         "enable_prefix_caching", "cudagraph_capture_sizes", "enforce_eager", "max_model_len")
print(json.dumps({k: getattr(e, k) for k in names}))
"""


def test_vllm_serve_args_are_vllms_own_flags() -> None:
    python = require_vllm()
    eager = VllmConfiguration((), 8, num_blocks=512, block_size=32, max_num_batched_tokens=512)
    for configuration in (GPU_PICK, eager):
        argv = vllm_serve_args(configuration, model="/models/qwen3", max_model_len=8192)
        assert argv[:3] == ["vllm", "serve", "/models/qwen3"]
        done = subprocess.run(
            [str(python), "-c", PARSE, *argv[3:]], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr[-2000:]
        parsed = json.loads(done.stdout.strip().splitlines()[-1])
        assert parsed.pop("max_model_len") == 8192
        assert parsed == vllm_knobs(configuration)


def test_rbln_compile_args_are_the_compile_verbs_and_optimum_rblns(monkeypatch) -> None:
    import rearrival.measure.rbln as rbln

    pick = RblnConfiguration((1, 4, 6, 8, 10, 16), 16)
    seen = {}

    def fake_compile(config: CompileConfig, artifacts):
        seen["config"] = config
        raise SystemExit(0)

    monkeypatch.setattr(rbln, "compile_artifact", fake_compile)
    argv = rbln_compile_args(pick, model="Qwen/Qwen3-4B", max_seq_len=8192, num_devices=4)
    assert argv[:3] == ["rearrival", "rbln", "compile"]
    result = runner.invoke(app, argv[1:])
    assert result.exit_code == 0, result.output
    config = seen["config"]
    assert config.configuration == pick and config.model == "Qwen/Qwen3-4B"
    expected = {k: v for k, v in config.from_pretrained_kwargs().items() if k != "export"}
    assert rbln_knobs(pick, max_seq_len=8192, num_devices=4) == expected
    deployment = rbln_deployment(pick, model="Qwen/Qwen3-4B", max_seq_len=8192, num_devices=4)
    assert shlex.split(deployment["commands"][0]) == argv and deployment["note"] is None
    fewer = rbln_deployment(
        RblnConfiguration((1, 8), 8, 4), model="m", max_seq_len=8192, num_devices=4
    )
    assert "only 8 slots can be deployed" in fewer["note"]


@pytest.mark.parametrize("as_json", [True, False])
def test_rbln_advice_says_what_to_run(as_json: bool, tmp_path) -> None:
    from conftest import config_with_search

    config = config_with_search(
        tmp_path,
        {
            "batch_sizes": [4, 6],
            "max_buckets": 3,
            "n": [2, 3],
            "seeds": 1,
            "blocks": 2,
            "restricted_n": [[2]],
            "top": 3,
            "shards": 2,
        },
    )
    args = ["advise", "--config", str(config), *(["--json"] if as_json else [])]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    if as_json:
        advice = json.loads(result.stdout)
        chosen = RblnConfiguration.from_id(advice["recommendation"]["id"])
        assert advice["deploy"]["knobs"]["rbln_decoder_batch_sizes"] == list(chosen.buckets)
        assert advice["deploy"]["commands"][0].startswith("rearrival rbln compile --model ")
        assert advice["model"] == {"name": "Qwen/Qwen3-4B", "max_seq_len": 8192, "num_devices": 4}
    else:
        assert "```sh\nrearrival rbln compile --model Qwen/Qwen3-4B" in result.stdout
        assert "vllm serve ARTIFACT --max-num-seqs" in result.stdout
        assert "Model: Qwen/Qwen3-4B at a maximum sequence length of 8,192 on 4" in result.stdout
