"""vLLM's own scheduler driven in virtual time: the oracle of the ``vllm`` rule set
(docs/DESIGN.md §15).

Run as a script by the vLLM environment's python (``rearrival.model.simulator.vllm.oracle``
starts it), never imported by the library: it needs vLLM, which cannot share the project's
environment, and it imports only the standard library and vLLM. It reads a JSON batch of
cases on stdin and writes one JSON document on stdout.

Each case builds vLLM's real ``Scheduler`` (with its ``KVCacheManager`` and ``BlockPool``)
from a ``VllmConfig`` with the case's knobs, prefix caching on and the synchronous
scheduler, and no model: every step it calls ``schedule()``, fabricates the model's output
(one sampled token for every request whose scheduled chunk reaches the end of its tokens,
none for a partial prefill chunk), calls ``update_from_output`` and advances a virtual
clock by the step cost of docs/DESIGN.md §15 rule 7, with the same float expressions as
the predictor's cores. Token ids make every session's transcript unique (its first token
encodes the session) and deterministic: a request of session s holds the first tokens of
one fixed sequence, so round k+1's prompt is round k's prompt, its generated tokens and
its new tokens, and no two sessions ever share a cached block.

Input: ``{"model_dir": DIR, "cases": [{"id", "block_size", "num_blocks",
"max_num_seqs", "max_num_batched_tokens", "capture_sizes": [...], "step_cost": [base,
per_decode_token, per_prefill_token, per_kv_token], "sessions": [{"start_s", "rounds":
[[new_tokens, gen_tokens, gap_after_s], ...]}], "fixed_arrivals": [...] | null}]}``.
Output: ``{"vllm_version", "import_s", "results": [{"id", "requests": [...], "totals":
{...}, "setup_s", "run_s", "run_cpu_s"}]}`` with one request row per (session, round) in that order.
"""

from __future__ import annotations

import bisect
import heapq
import json
import os
import sys
import time

# The V1 model runner's scheduler output (what the CPU build uses): a resumed request is a
# "cached" request, so vLLM's iteration log counts its recomputed tokens as generation
# tokens once it has produced output. Pinned so the oracle does not depend on whether this
# machine has Triton.
os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "0")
# Plans may hold longer transcripts than the tiny model's max_position_embeddings; the
# scheduler never reads positions.
os.environ.setdefault("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

FIRST_TOKEN = 3  # token ids 0-2 are the tiny model's pad, bos and eos
VOCAB = 2048


def token(session: int, position: int) -> int:
    """Token ``position`` of session ``session``'s transcript: the first token names the
    session, so the prefix-hash chains of two sessions never meet."""
    if position == 0:
        return FIRST_TOKEN + session
    return FIRST_TOKEN + (session * 7919 + position * 104729) % (VOCAB - FIRST_TOKEN)


def padded(decode_tokens: int, capture_sizes: list[int]) -> int:
    """Decode tokens padded to the next capture size; eager (unpadded) above the largest
    or with none; no decode, no padding."""
    if decode_tokens == 0:
        return 0
    index = bisect.bisect_left(capture_sizes, decode_tokens)
    return capture_sizes[index] if index < len(capture_sizes) else decode_tokens


class Harness:
    """One case: vLLM's scheduler with the case's knobs, and the requests' records."""

    def __init__(self, case: dict, model_dir: str, vllm: dict) -> None:
        self.case = case
        self.vllm = vllm
        self.block_size = int(case["block_size"])
        self.capture_sizes = sorted(int(s) for s in case.get("capture_sizes") or [])
        self.base, self.per_decode, self.per_prefill, self.per_kv = (
            float(x) for x in case["step_cost"]
        )
        sessions = case["sessions"]
        self.rounds = [[(int(a), int(g), float(w)) for a, g, w in s["rounds"]] for s in sessions]
        self.starts = [float(s.get("start_s", 0.0)) for s in sessions]
        self.prompts = []
        longest = 1
        for rounds in self.rounds:
            prompts, transcript = [], 0
            for new, gen, _ in rounds:
                prompts.append(transcript + new)
                transcript += new + gen
            self.prompts.append(prompts)
            longest = max(longest, transcript)
        self.max_model_len = longest
        self.scheduler = self._scheduler(model_dir, int(case["num_blocks"]))
        self.hasher = vllm["get_request_block_hasher"](self.block_size, vllm["hash_fn"])
        fixed = case.get("fixed_arrivals")
        self.fixed = None if fixed is None else [float(x) for x in fixed]
        self.fixed_index = {}
        index = 0
        for s, rounds in enumerate(self.rounds):
            for k in range(1, len(rounds)):
                self.fixed_index[(s, k)] = index
                index += 1
        self.rows = {}
        for s, rounds in enumerate(self.rounds):
            for k in range(len(rounds)):
                self.rows[(s, k)] = {
                    "session": s,
                    "round": k,
                    "cached_tokens": None,
                    "preemptions": 0,
                    "steps": 0,
                    "arrival_s": None,
                    "first_scheduled_s": None,
                    "finish_s": None,
                }

    def _scheduler(self, model_dir: str, num_blocks: int):
        v = self.vllm
        model = v["ModelConfig"](
            model=model_dir,
            skip_tokenizer_init=True,
            max_model_len=self.max_model_len,
            dtype="float32",
        )
        scheduler_config = v["SchedulerConfig"](
            max_num_seqs=int(self.case["max_num_seqs"]),
            max_num_batched_tokens=int(self.case["max_num_batched_tokens"]),
            max_model_len=self.max_model_len,
            is_encoder_decoder=False,
            enable_chunked_prefill=True,
            async_scheduling=False,
        )
        cache = v["CacheConfig"](block_size=self.block_size, enable_prefix_caching=True)
        cache.num_gpu_blocks = num_blocks
        config = v["VllmConfig"](
            model_config=model, scheduler_config=scheduler_config, cache_config=cache
        )
        text = model.hf_config.get_text_config()
        spec = v["FullAttentionSpec"](
            block_size=self.block_size,
            num_kv_heads=text.num_key_value_heads,
            head_size=text.head_dim,
            dtype=model.dtype,
        )
        kv_cache_config = v["KVCacheConfig"](
            num_blocks=num_blocks,
            kv_cache_tensors=[],
            kv_cache_groups=[v["KVCacheGroupSpec"](["layers"], spec)],
        )
        scheduler = v["Scheduler"](
            vllm_config=config,
            kv_cache_config=kv_cache_config,
            structured_output_manager=v["StructuredOutputManager"](config),
            block_size=self.block_size,
            log_stats=True,
        )
        assert type(scheduler).__name__ == "Scheduler", "the synchronous scheduler"
        assert scheduler.cache_config.enable_prefix_caching
        assert scheduler.block_size == self.block_size
        return scheduler

    def request(self, s: int, k: int):
        prompt = [token(s, p) for p in range(self.prompts[s][k])]
        params = self.vllm["SamplingParams"](max_tokens=self.rounds[s][k][1], ignore_eos=True)
        return self.vllm["Request"](
            request_id=f"{s}:{k}",
            prompt_token_ids=prompt,
            sampling_params=params,
            pooling_params=None,
            block_hasher=self.hasher,
        )

    def run(self) -> dict:
        scheduler = self.scheduler
        pending = [(start, s, 0) for s, start in enumerate(self.starts)]
        heapq.heapify(pending)
        for when, s, k in pending:
            self.rows[(s, k)]["arrival_s"] = when
        live = {}
        t = 0.0
        steps = decode_tokens = prefill_tokens = 0
        device_s = 0.0
        while True:
            while pending and pending[0][0] <= t:
                _, s, k = heapq.heappop(pending)
                request = self.request(s, k)
                live[request.request_id] = (s, k, request)
                scheduler.add_request(request)
            if scheduler.get_num_unfinished_requests() == 0:
                if not pending:
                    break
                t = pending[0][0]
                continue
            output = scheduler.schedule()
            if output.total_num_scheduled_tokens == 0:
                raise RuntimeError(f"case {self.case['id']}: a step scheduled nothing at t={t}")
            details = self.vllm["compute_iteration_details"](output)
            decode, prefill = details.num_generation_tokens, details.num_ctx_tokens
            context = sum(r.num_computed_tokens for r in output.scheduled_new_reqs) + sum(
                output.scheduled_cached_reqs.num_computed_tokens
            )
            step_s = (
                self.base
                + self.per_decode * padded(decode, self.capture_sizes)
                + self.per_prefill * prefill
                + self.per_kv * context
            )
            req_ids = list(output.num_scheduled_tokens)
            sampled = []
            for req_id in req_ids:
                s, k, request = live[req_id]
                row = self.rows[(s, k)]
                row["steps"] += 1
                if row["first_scheduled_s"] is None:
                    row["first_scheduled_s"] = t
                done = request.num_computed_tokens == request.num_tokens
                sampled.append([token(s, request.num_tokens)] if done else [])
            runner_output = self.vllm["ModelRunnerOutput"](
                req_ids=req_ids,
                req_id_to_index={req_id: i for i, req_id in enumerate(req_ids)},
                sampled_token_ids=sampled,
            )
            engine_outputs = scheduler.update_from_output(output, runner_output)
            t = t + step_s
            device_s = device_s + step_s
            steps += 1
            decode_tokens += decode
            prefill_tokens += prefill
            for outputs in engine_outputs.values():
                for out in outputs.outputs:
                    s, k, request = live[out.request_id]
                    row = self.rows[(s, k)]
                    if out.prefill_stats is not None:
                        row["cached_tokens"] = out.prefill_stats.num_cached_tokens
                    if out.finish_reason is None:
                        continue
                    del live[out.request_id]
                    row["finish_s"] = t
                    row["preemptions"] = request.num_preemptions
                    assert request.num_output_tokens == self.rounds[s][k][1]
                    if k + 1 < len(self.rounds[s]):
                        if self.fixed is None:
                            when = t + self.rounds[s][k][2]
                        else:
                            when = self.fixed[self.fixed_index[(s, k + 1)]]
                        self.rows[(s, k + 1)]["arrival_s"] = when
                        heapq.heappush(pending, (when, s, k + 1))
        assert not live, "every request finished"
        rows = [self.rows[key] for key in sorted(self.rows)]
        return {
            "requests": rows,
            "totals": {
                "steps": steps,
                "decode_tokens": decode_tokens,
                "prefill_tokens": prefill_tokens,
                "cached_tokens": sum(row["cached_tokens"] for row in rows),
                "preemptions": sum(row["preemptions"] for row in rows),
                "device_s": device_s,
                "makespan_s": t,
            },
        }


def load_vllm() -> dict:
    """vLLM's classes the harness drives (imported here so the import time is measured
    apart from the cases)."""
    import vllm
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request
    from vllm.v1.structured_output import StructuredOutputManager
    from vllm.v1.utils import compute_iteration_details

    hash_fn = get_hash_fn_by_name(CacheConfig().prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    return {
        "version": vllm.__version__,
        "CacheConfig": CacheConfig,
        "ModelConfig": ModelConfig,
        "SchedulerConfig": SchedulerConfig,
        "VllmConfig": VllmConfig,
        "SamplingParams": SamplingParams,
        "hash_fn": hash_fn,
        "get_request_block_hasher": get_request_block_hasher,
        "Scheduler": Scheduler,
        "FullAttentionSpec": FullAttentionSpec,
        "KVCacheConfig": KVCacheConfig,
        "KVCacheGroupSpec": KVCacheGroupSpec,
        "ModelRunnerOutput": ModelRunnerOutput,
        "Request": Request,
        "StructuredOutputManager": StructuredOutputManager,
        "compute_iteration_details": compute_iteration_details,
    }


def main() -> None:
    batch = json.load(sys.stdin)
    # vLLM logs to stdout; the JSON document is the only thing written there.
    out, sys.stdout = sys.stdout, sys.stderr
    began = time.perf_counter()
    vllm = load_vllm()
    import_s = time.perf_counter() - began
    results = []
    for case in batch["cases"]:
        began = time.perf_counter()
        harness = Harness(case, batch["model_dir"], vllm)
        built, built_cpu = time.perf_counter(), time.process_time()
        result = harness.run()
        result["setup_s"] = built - began  # the VllmConfig and the Scheduler
        result["run_s"] = time.perf_counter() - built  # the steps, wall clock
        result["run_cpu_s"] = time.process_time() - built_cpu  # and CPU time
        result["id"] = case["id"]
        results.append(result)
    json.dump({"vllm_version": vllm["version"], "import_s": import_s, "results": results}, out)
    out.flush()


if __name__ == "__main__":
    main()
