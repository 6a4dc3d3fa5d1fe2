"""vLLM's own scheduler driven in virtual time: the oracle of the ``vllm`` rule set
(docs/DESIGN.md §15), on one engine or a fleet of R replicas behind a router (docs/DESIGN.md §16).

Run as a script by the vLLM environment's python (``rearrival.model.simulator.vllm.oracle``
starts it), never imported by the library: it needs vLLM, which cannot share the project's
environment, and it imports only the standard library and vLLM. It reads a JSON batch of
cases on stdin and writes one JSON document on stdout.

Each case builds R copies of vLLM's real ``Scheduler`` (each with its own ``KVCacheManager``
and ``BlockPool``) from a ``VllmConfig`` with the case's knobs, prefix caching on and the
synchronous scheduler, and no model. A replica calls ``schedule()`` when it starts a step,
fabricates the model's output (one sampled token for every request whose scheduled chunk
reaches the end of its tokens, none for a partial prefill chunk) and calls
``update_from_output`` when the step ends, step cost later (docs/DESIGN.md §15 rule 7, with
the same float expressions as the predictor's cores). The fleet's event order at an instant
t is docs/DESIGN.md §16's: (1) every replica whose step ends at t completes it, in replica order (a
finish sends the session's next round, or on its last round its follower's round 0, at
t + gap); (2) every arrival at or before t is routed, in (time, session, round) order;
(3) every replica with no step in flight adds what was routed to it, in routing order, and
starts its next step at t. With R = 1 this is the single engine, call for call.

Token ids are deterministic. A session that names a prefix starts its transcript with the
prefix's tokens, derived from the prefix id alone (so every session naming it sends them
exactly); the session's own tokens follow, the first of them encoding the session, so no
two sessions share a block past the prefix's full blocks. A request of session s holds the
first tokens of one fixed sequence: round k+1's prompt is round k's prompt, its generated
tokens and its new tokens.

Input: ``{"model_dir": DIR, "cases": [{"id", "block_size", "num_blocks",
"max_num_seqs", "max_num_batched_tokens", "capture_sizes": [...], "step_cost": [base,
per_decode_token, per_prefill_token, per_kv_token], "replicas": R (default 1), "router":
NAME (default "round_robin"), "sessions": [{"start_s" | "after": [j, gap_s], "prefix": ID,
"prefix_tokens": P (both optional), "rounds": [[new_tokens, gen_tokens, gap_after_s],
...]}], "fixed_arrivals": [...] | null}]}``.
Output: ``{"vllm_version", "import_s", "results": [{"id", "requests": [...], "totals":
{...}, "setup_s", "run_s", "run_cpu_s"}]}`` with one request row per (session, round) in
that order (``replica`` and ``first_token_s`` beside the single engine's fields) and the
fleet's totals (summed over replicas; ``replica_device_s`` per replica).
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
# A prefix's first token: above every session's first token (FIRST_TOKEN + session), so a
# prefix's chain never meets a session's own chain nor another prefix's.
PREFIX_FIRST_TOKEN = 1 << 20
ROUTERS = ("round_robin", "least_loaded", "session_affinity", "prefix_aware")


def token(session: int, position: int) -> int:
    """Token ``position`` of session ``session``'s own tokens: the first names the session,
    so the prefix-hash chains of two sessions never meet."""
    if position == 0:
        return FIRST_TOKEN + session
    return FIRST_TOKEN + (session * 7919 + position * 104729) % (VOCAB - FIRST_TOKEN)


def prefix_token(prefix: int, position: int) -> int:
    """Token ``position`` of shared prefix number ``prefix``: a function of the prefix
    alone, so every session naming it sends the same tokens."""
    if position == 0:
        return PREFIX_FIRST_TOKEN + prefix
    return FIRST_TOKEN + (prefix * 6007 + position * 104729) % (VOCAB - FIRST_TOKEN)


def padded(decode_tokens: int, capture_sizes: list[int]) -> int:
    """Decode tokens padded to the next capture size; eager (unpadded) above the largest
    or with none; no decode, no padding."""
    if decode_tokens == 0:
        return 0
    index = bisect.bisect_left(capture_sizes, decode_tokens)
    return capture_sizes[index] if index < len(capture_sizes) else decode_tokens


class Session:
    """One session of a case: its rounds, how its round 0 arrives, its shared prefix."""

    def __init__(self, index: int, row: dict, prefixes: dict) -> None:
        self.index = index
        self.rounds = [(int(a), int(g), float(w)) for a, g, w in row["rounds"]]
        after = row.get("after")
        if after is not None and "start_s" in row:
            raise ValueError(f"session {index}: 'start_s' together with 'after'")
        self.start_s = float(row.get("start_s", 0.0))
        self.after = None if after is None else (int(after[0]), float(after[1]))
        self.prefix_tokens = int(row.get("prefix_tokens", 0))
        if self.prefix_tokens and row.get("prefix") is None:
            raise ValueError(f"session {index}: 'prefix_tokens' without 'prefix'")
        self.prefix = None if row.get("prefix") is None else prefixes[str(row["prefix"])]
        self.prompts, transcript = [], self.prefix_tokens
        for new, gen, _ in self.rounds:
            self.prompts.append(transcript + new)
            transcript += new + gen
        self.transcript = transcript

    def token(self, position: int) -> int:
        """Token ``position`` of the transcript: the prefix's, then the session's own."""
        if position < self.prefix_tokens:
            return prefix_token(self.prefix, position)
        return token(self.index, position - self.prefix_tokens)


class Step:
    """A step in flight on one replica: scheduled at its start, completed at ``end_s``."""

    def __init__(self, output, runner_output, step_s: float, end_s: float, tokens: tuple) -> None:
        self.output = output
        self.runner_output = runner_output
        self.step_s = step_s
        self.end_s = end_s
        self.decode, self.prefill = tokens


class Replica:
    """One engine of the fleet: vLLM's scheduler, what was routed to it and not yet added,
    its outstanding requests (routed and not finished) and its step in flight."""

    def __init__(self, index: int, scheduler) -> None:
        self.index = index
        self.scheduler = scheduler
        self.inbox: list = []  # (arrival_s, session, round, Request) routed, not added
        self.outstanding = 0
        self.step: Step | None = None
        self.steps = self.decode_tokens = self.prefill_tokens = 0
        self.device_s = 0.0

    def cached_blocks(self, request, block_size: int) -> int:
        """Leading full blocks of the request's prompt cached in this replica's pool now,
        by vLLM's own lookup (the coordinator's, which leaves the manager's prefix-cache
        stats and the free queue untouched)."""
        coordinator = self.scheduler.kv_cache_manager.coordinator
        _, hit, _ = coordinator.find_longest_cache_hit(request.block_hashes, request.num_tokens)
        return hit // block_size


class Fleet:
    """One case: R replicas of vLLM's scheduler behind the case's router, and the
    requests' records."""

    def __init__(self, case: dict, model_dir: str, vllm: dict) -> None:
        self.case = case
        self.vllm = vllm
        self.block_size = int(case["block_size"])
        self.capture_sizes = sorted(int(s) for s in case.get("capture_sizes") or [])
        self.base, self.per_decode, self.per_prefill, self.per_kv = (
            float(x) for x in case["step_cost"]
        )
        self.router = case.get("router", "round_robin")
        if self.router not in ROUTERS:
            raise ValueError(f"case {case['id']}: unknown router {self.router!r}")
        rows = case["sessions"]
        ids = sorted({str(row["prefix"]) for row in rows if row.get("prefix") is not None})
        prefixes = {name: number for number, name in enumerate(ids)}
        self.sessions = [Session(i, row, prefixes) for i, row in enumerate(rows)]
        self.followers = {}
        for session in self.sessions:
            if session.after is not None:
                leader = session.after[0]
                assert leader not in self.followers, f"session {leader} has two followers"
                self.followers[leader] = session.index
        self.max_model_len = max(1, *(s.transcript for s in self.sessions))
        replicas = int(case.get("replicas", 1))
        assert replicas >= 1, "a fleet has at least one replica"
        self.replicas = [
            Replica(r, self._scheduler(model_dir, int(case["num_blocks"]))) for r in range(replicas)
        ]
        self.hasher = vllm["get_request_block_hasher"](self.block_size, vllm["hash_fn"])
        fixed = case.get("fixed_arrivals")
        self.fixed = None if fixed is None else [float(x) for x in fixed]
        assert fixed is None or replicas == 1, "fixed arrivals replay one engine's run"
        self.fixed_index = {}
        index = 0
        for session in self.sessions:
            for k in range(1, len(session.rounds)):
                self.fixed_index[(session.index, k)] = index
                index += 1
        self.rows = {}
        for session in self.sessions:
            for k in range(len(session.rounds)):
                self.rows[(session.index, k)] = {
                    "session": session.index,
                    "round": k,
                    "replica": None,
                    "cached_tokens": None,
                    "preemptions": 0,
                    "steps": 0,
                    "arrival_s": None,
                    "first_scheduled_s": None,
                    "first_token_s": None,
                    "finish_s": None,
                }
        self.live = {}
        self.pending: list = []
        self.routed = 0

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
        session = self.sessions[s]
        prompt = [session.token(p) for p in range(session.prompts[k])]
        params = self.vllm["SamplingParams"](max_tokens=session.rounds[k][1], ignore_eos=True)
        return self.vllm["Request"](
            request_id=f"{s}:{k}",
            prompt_token_ids=prompt,
            sampling_params=params,
            pooling_params=None,
            block_hasher=self.hasher,
        )

    def arrive(self, when: float, s: int, k: int) -> None:
        self.rows[(s, k)]["arrival_s"] = when
        heapq.heappush(self.pending, (when, s, k))

    def run(self) -> dict:
        for session in self.sessions:
            if session.after is None:
                self.arrive(session.start_s, session.index, 0)
        while True:
            ends = [r.step.end_s for r in self.replicas if r.step is not None]
            if self.pending:
                ends.append(self.pending[0][0])
            if not ends:
                break
            t = min(ends)
            for replica in self.replicas:  # (1) steps that end at t, in replica order
                if replica.step is not None and replica.step.end_s == t:
                    self.complete(replica, t)
            while self.pending and self.pending[0][0] <= t:  # (2) arrivals, in order
                self.route(*heapq.heappop(self.pending))
            for replica in self.replicas:  # (3) idle replicas add and start a step
                if replica.step is None:
                    self.start(replica, t)
        assert not self.live, "every request finished"
        assert all(r.outstanding == 0 and not r.inbox for r in self.replicas)
        return self.result()

    def route(self, when: float, s: int, k: int) -> None:
        """Assign request (s, k) to a replica by the case's router (docs/DESIGN.md §16; ties to the
        lowest replica index) and put it in that replica's inbox."""
        request = self.request(s, k)
        replicas = self.replicas
        if self.router == "round_robin":
            chosen = replicas[self.routed % len(replicas)]
        elif self.router == "session_affinity" and k > 0:
            chosen = replicas[self.rows[(s, 0)]["replica"]]
        elif self.router == "prefix_aware":
            chosen = min(
                replicas,
                key=lambda r: (-r.cached_blocks(request, self.block_size), r.outstanding, r.index),
            )
        else:  # least_loaded, and session_affinity's round 0
            chosen = min(replicas, key=lambda r: (r.outstanding, r.index))
        self.routed += 1
        chosen.outstanding += 1
        chosen.inbox.append((when, s, k, request))
        self.live[request.request_id] = (s, k, request, chosen)
        self.rows[(s, k)]["replica"] = chosen.index

    def start(self, replica: Replica, t: float) -> None:
        """Add what was routed to an idle replica and schedule its next step at t (vLLM
        allocates and caches the step's full blocks now)."""
        scheduler = replica.scheduler
        # Routing order is (time, session, round) order, except for fixed arrivals, which
        # may lie before the finish that sends them: those join at the step boundary in
        # (time, session, round) order, as on the single engine.
        for *_, request in sorted(replica.inbox, key=lambda item: item[:3]):
            scheduler.add_request(request)
        replica.inbox = []
        if scheduler.get_num_unfinished_requests() == 0:
            return
        output = scheduler.schedule()
        if output.total_num_scheduled_tokens == 0:
            raise RuntimeError(
                f"case {self.case['id']}: replica {replica.index} scheduled nothing at t={t}"
            )
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
            s, k, request, _ = self.live[req_id]
            row = self.rows[(s, k)]
            row["steps"] += 1
            if row["first_scheduled_s"] is None:
                row["first_scheduled_s"] = t
            done = request.num_computed_tokens == request.num_tokens
            sampled.append([self.sessions[s].token(request.num_tokens)] if done else [])
        runner_output = self.vllm["ModelRunnerOutput"](
            req_ids=req_ids,
            req_id_to_index={req_id: i for i, req_id in enumerate(req_ids)},
            sampled_token_ids=sampled,
        )
        replica.step = Step(output, runner_output, step_s, t + step_s, (decode, prefill))

    def complete(self, replica: Replica, t: float) -> None:
        """The step in flight on ``replica`` ends at t: vLLM updates from its output; the
        requests it finished send what follows them."""
        step, replica.step = replica.step, None
        engine_outputs = replica.scheduler.update_from_output(step.output, step.runner_output)
        replica.device_s = replica.device_s + step.step_s
        replica.steps += 1
        replica.decode_tokens += step.decode
        replica.prefill_tokens += step.prefill
        for req_id in step.runner_output.req_ids:
            s, k, request, _ = self.live[req_id]
            row = self.rows[(s, k)]
            if row["first_token_s"] is None and request.num_output_tokens > 0:
                row["first_token_s"] = t
        for outputs in engine_outputs.values():
            for out in outputs.outputs:
                s, k, request, owner = self.live[out.request_id]
                assert owner is replica
                row = self.rows[(s, k)]
                if out.prefill_stats is not None:
                    row["cached_tokens"] = out.prefill_stats.num_cached_tokens
                if out.finish_reason is None:
                    continue
                del self.live[out.request_id]
                replica.outstanding -= 1
                row["finish_s"] = t
                row["preemptions"] = request.num_preemptions
                assert request.num_output_tokens == self.sessions[s].rounds[k][1]
                self.finished(s, k, t)

    def finished(self, s: int, k: int, t: float) -> None:
        """Round k of session s finished at t: its next round arrives after its gap (or at
        its fixed time); after the last round, the session's follower's round 0."""
        rounds = self.sessions[s].rounds
        if k + 1 < len(rounds):
            if self.fixed is None:
                when = t + rounds[k][2]
            else:
                when = self.fixed[self.fixed_index[(s, k + 1)]]
            self.arrive(when, s, k + 1)
        elif s in self.followers:
            follower = self.followers[s]
            self.arrive(t + self.sessions[follower].after[1], follower, 0)

    def result(self) -> dict:
        rows = [self.rows[key] for key in sorted(self.rows)]
        unsent = [(row["session"], row["round"]) for row in rows if row["finish_s"] is None]
        assert not unsent, f"case {self.case['id']}: never sent {unsent[:3]} (an 'after' cycle?)"
        device_s = 0.0
        for replica in self.replicas:
            device_s = device_s + replica.device_s
        return {
            "requests": rows,
            "totals": {
                "steps": sum(r.steps for r in self.replicas),
                "decode_tokens": sum(r.decode_tokens for r in self.replicas),
                "prefill_tokens": sum(r.prefill_tokens for r in self.replicas),
                "cached_tokens": sum(row["cached_tokens"] for row in rows),
                "preemptions": sum(row["preemptions"] for row in rows),
                "device_s": device_s,
                "makespan_s": max(row["finish_s"] for row in rows),
                "replica_device_s": [r.device_s for r in self.replicas],
            },
        }


def load_vllm() -> dict:
    """vLLM's classes the fleet drives (imported here so the import time is measured
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
        fleet = Fleet(case, batch["model_dir"], vllm)
        built, built_cpu = time.perf_counter(), time.process_time()
        result = fleet.run()
        result["setup_s"] = built - began  # the VllmConfigs and the Schedulers
        result["run_s"] = time.perf_counter() - built  # the steps, wall clock
        result["run_cpu_s"] = time.process_time() - built_cpu  # and CPU time
        result["id"] = case["id"]
        results.append(result)
    json.dump({"vllm_version": vllm["version"], "import_s": import_s, "results": results}, out)
    out.flush()


if __name__ == "__main__":
    main()
