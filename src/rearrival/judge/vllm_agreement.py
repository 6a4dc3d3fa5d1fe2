"""The predictor against the real vLLM server, per run (docs/DESIGN.md §15 "Agreement").

For one complete, sealed run of the ``vllm`` backend, the ``vllm`` rule set is re-run on
the run's own plan and configuration with the run's observed send times (each
session's first round when the run sent it, every later round as a fixed arrival,
docs/DESIGN.md §15 rule 6) and a vLLM step-cost profile, and every
request's prefix hit is set beside the one vLLM reported
(``usage.prompt_tokens_details.cached_tokens``, checked against the
``vllm:prompt_tokens_cached_total`` delta when the run was written).

Where the predicted pool had evicted no cached block before a request's first
admission, its predicted hit is what the round before it left cacheable, whatever the
timing: it must agree exactly. A disagreement there is a bug (of the predictor's rules
or of the measurement) and is raised as a :class:`PredictorBugWarning` and counted in
the summary. Where the pool had evicted, which blocks survived depends on the order in
which steps admitted and finished requests, and that order follows the real step times,
which the profile only approximates; each disagreement then says, as far as the records
tell, why: the requests whose admission or finish fell on the other side of its
admission in the run than in the prediction.

The summary adds what the study's report shows per run (paper Section III-D's reuse
question asked of vLLM): the agreeing share, re-arrivals that lost part of their prefix
(observed and predicted), the prefill computed because tool waits let blocks be evicted
(prompt minus cached tokens, against the pool that never evicts: every re-arrival hits
the full blocks of the round before it, ``VllmInputs.cacheable_tokens``), reuse by
round, and device time predicted from the profile against the sum of the iteration
elapsed times vLLM logged, with the backend and the profile named.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rearrival.atomic import atomic_directory, atomic_write_json
from rearrival.errors import RearrivalError
from rearrival.judge.channels import iteration_channel_a
from rearrival.measure.records import RunRecord
from rearrival.measure.records.contract import ROUND_COLUMN
from rearrival.model.configuration import VllmConfiguration, configuration_from_mapping
from rearrival.model.cost.vllm_profile import VllmProfile, VllmStepCost
from rearrival.model.plans.plan import MultiRoundSession, Plan
from rearrival.model.simulator.vllm.blockpool import NO_KEY, BlockPool
from rearrival.model.simulator.vllm.engine import Engine
from rearrival.model.simulator.vllm.inputs import vllm_inputs
from rearrival.model.simulator.vllm.result import VllmResult
from rearrival.model.simulator.vllm.sim import simulate_vllm
from rearrival.parquet import write_frame
from rearrival.vllm_env import NO_ASYNC_FLAG
from rearrival.vocabulary import VLLM

# The two files of a comparison's directory (``write_agreement``); the report reads only
# these (rearrival.report.tables.vllm_agreement).
REQUESTS_FILE = "requests.parquet"
SUMMARY_FILE = "summary.json"

# The most neighbours a reason names; the count of the rest follows.
NAMED_NEIGHBOURS = 4


class AgreementError(RearrivalError):
    """A run, plan or profile the comparison cannot use; names the file and the fix."""


class PredictorBugWarning(UserWarning):
    """A request the predicted pool never evicted before admitting, whose hit differs
    from vLLM's: the rules or the measurement are wrong (module docstring)."""


@dataclass(frozen=True)
class RequestAgreement:
    """One request (session, round): what vLLM reported beside what the predictor says.

    ``cacheable_tokens`` is its hit on a pool that never evicts; ``evictions_before``
    the cached blocks the predicted pool had evicted before its first admission;
    ``reason`` why it disagrees ("" when it agrees)."""

    session: int
    round: int
    prompt_tokens_observed: int
    prompt_tokens_predicted: int
    cached_tokens_observed: int
    cached_tokens_predicted: int
    cacheable_tokens: int
    agree: bool
    evictions_before: int
    preemptions_predicted: int
    send_s: float
    first_token_s_observed: float
    complete_s_observed: float
    first_scheduled_s_predicted: float
    finish_s_predicted: float
    reason: str

    @property
    def label(self) -> str:
        return f"s{self.session}r{self.round}"


@dataclass(frozen=True)
class Agreement:
    """One run compared with its prediction: per-request rows and the run's facts."""

    requests: tuple[RequestAgreement, ...]
    run: dict[str, Any]  # run id, backend, device, vLLM version, configuration, plan
    profile: dict[str, str]  # the profile's identity and what its seconds are
    device_s_predicted: float
    device_s_observed: float
    steps_predicted: int
    steps_observed: int

    def frame(self) -> pd.DataFrame:
        """The per-request table, in (session, round) order."""
        return pd.DataFrame([asdict(r) for r in self.requests])

    def summary(self) -> dict[str, Any]:
        """The run's numbers (module docstring); every count is over its requests."""
        rows = self.requests
        clean = [r for r in rows if r.evictions_before == 0]
        later = [r for r in rows if r.round > 0]
        bound = sum(r.prompt_tokens_predicted - r.cacheable_tokens for r in rows)
        observed_prefill = sum(r.prompt_tokens_observed - r.cached_tokens_observed for r in rows)
        predicted_prefill = sum(r.prompt_tokens_predicted - r.cached_tokens_predicted for r in rows)
        error = (self.device_s_predicted - self.device_s_observed) / self.device_s_observed
        return {
            "run": self.run,
            "profile": self.profile,
            "requests": len(rows),
            "agreeing": sum(r.agree for r in rows),
            "agreeing_share": sum(r.agree for r in rows) / len(rows),
            "no_eviction_requests": len(clean),
            "no_eviction_agreeing": sum(r.agree for r in clean),
            "exact_where_no_eviction": all(r.agree for r in clean),
            "no_eviction_disagreements": [r.label for r in clean if not r.agree],
            "disagreements": [r.label for r in rows if not r.agree],
            "re_arrivals": len(later),
            "re_arrivals_lost_observed": sum(
                r.cached_tokens_observed < r.cacheable_tokens for r in later
            ),
            "re_arrivals_lost_predicted": sum(
                r.cached_tokens_predicted < r.cacheable_tokens for r in later
            ),
            "prompt_tokens": sum(r.prompt_tokens_observed for r in rows),
            "cached_tokens_observed": sum(r.cached_tokens_observed for r in rows),
            "cached_tokens_predicted": sum(r.cached_tokens_predicted for r in rows),
            "cacheable_tokens": sum(r.cacheable_tokens for r in rows),
            "prefill_tokens_observed": observed_prefill,
            "prefill_tokens_predicted": predicted_prefill,
            "prefill_tokens_never_evicting": bound,
            "recomputed_prefill_tokens_observed": observed_prefill - bound,
            "recomputed_prefill_tokens_predicted": predicted_prefill - bound,
            "reuse_by_round": reuse_by_round(rows),
            "device_s_predicted": self.device_s_predicted,
            "device_s_observed": self.device_s_observed,
            "device_s_relative_error": error,
            "steps_predicted": self.steps_predicted,
            "steps_observed": self.steps_observed,
        }


def reuse_by_round(rows: tuple[RequestAgreement, ...]) -> list[dict[str, Any]]:
    """Per round index: prompt tokens, cached tokens observed and predicted, and the
    never-evicting pool's, with each as a share of the prompt tokens."""
    out = []
    for k in sorted({r.round for r in rows}):
        at = [r for r in rows if r.round == k]
        prompt = sum(r.prompt_tokens_observed for r in at)
        entry: dict[str, Any] = {"round": k, "requests": len(at), "prompt_tokens": prompt}
        for name, cached in (
            ("observed", sum(r.cached_tokens_observed for r in at)),
            ("predicted", sum(r.cached_tokens_predicted for r in at)),
            ("never_evicting", sum(r.cacheable_tokens for r in at)),
        ):
            entry[f"cached_{name}"] = cached
            entry[f"reuse_{name}"] = cached / prompt if prompt else 0.0
        out.append(entry)
    return out


# --- what may be compared ---------------------------------------------------------------


def run_configuration(record: RunRecord) -> VllmConfiguration:
    """The configuration a complete, sealed vLLM run recorded, or one-line refusals."""
    where = record.path / "manifest.json"
    manifest = record.manifest
    if manifest["backend"] != VLLM:
        raise AgreementError(
            f"{where}: backend is {manifest['backend']!r}, not vllm; the comparison with the "
            "predictor's vLLM rules needs a run of `rearrival run --backend vllm`"
        )
    if manifest["status"] != "complete":
        raise AgreementError(
            f"{where}: status is {manifest['status']!r} ({manifest['reason']}); a failed or "
            "partial run is never compared, re-run the condition"
        )
    if "files" not in manifest:
        raise AgreementError(
            f"{where}: no 'files' (the sha256 of every file the run wrote), so the run is "
            "not sealed and could have been edited; re-run the condition"
        )
    configuration = configuration_from_mapping(
        manifest["configuration"], name=str(manifest.get("condition", ""))
    )
    if not isinstance(configuration, VllmConfiguration):
        raise AgreementError(
            f"{where}: field 'configuration' is not a vLLM configuration (no substrate: "
            "vllm); re-run the condition with this rearrival version"
        )
    unknown = record.requests["cached_tokens"].isna()
    if unknown.any():
        row = record.requests[unknown].iloc[0]
        raise AgreementError(
            f"{record.path / 'requests.parquet'}: cached_tokens unknown for session "
            f"{int(row['session'])} round {int(row[ROUND_COLUMN])}; vLLM reports them when started "
            "with --enable-prompt-tokens-details, as the vllm backend does: re-run it"
        )
    return configuration


def check_profile(profile: VllmProfile, record: RunRecord) -> None:
    """Refuse a profile measured on another model or device than the run's engine."""
    engine = record.manifest.get("engine") or {}
    model = engine.get("model") or {}
    where = record.path / "manifest.json"
    fix = (
        "calibrate on this run's engine (`rearrival calibrate --backend vllm`) or pass the "
        "profile of the model and device it served"
    )
    name = str(model.get("directory", "")).rstrip("/").rsplit("/", 1)[-1]
    problems = []
    if profile.model_id != name and not profile.model_id.endswith("/" + name):
        problems.append(f"model_id {profile.model_id!r} but the run served {name!r}")
    if profile.model_config_sha256 and profile.model_config_sha256 != model.get("config_sha256"):
        problems.append("a model config.json sha256 other than the run's")
    if profile.kv_bytes_per_token != model.get("kv_bytes_per_token"):
        problems.append(
            f"kv.bytes_per_token {profile.kv_bytes_per_token} but the run's model has "
            f"{model.get('kv_bytes_per_token')}"
        )
    if profile.device != engine.get("device"):
        problems.append(f"device {profile.device!r} but the run ran on {engine.get('device')!r}")
    if problems:
        raise AgreementError(
            f"{profile.name or profile.source}: a profile for another model or device than "
            f"run {record.run_id} ({where}): {'; '.join(problems)}; {fix}"
        )


def check_plan(plan: Plan, record: RunRecord, source: str) -> None:
    """The plan must be the one the run replayed (its sha256 in the manifest)."""
    recorded = record.manifest["plan_sha256"]
    if plan.sha256() != recorded:
        raise AgreementError(
            f"{source}: plan sha256 {plan.sha256()[:12]} is not the one run {record.run_id} "
            f"replayed ({str(recorded)[:12]}, plan_path {record.manifest['plan_path']}); "
            "give that run's plan"
        )


def observed_starts(plan: Plan, requests: pd.DataFrame) -> Plan:
    """The plan with each session's first round sent when the run sent it (the client
    sends at the planned start plus its own few milliseconds): the prediction sees every
    request when the real server did, not only the re-arrivals. A session's shared prefix
    stays (the client sends it first); a renewed session becomes a start at its observed
    send."""
    first = requests[requests[ROUND_COLUMN] == 0].set_index("session")["send_s"]
    return Plan(
        tuple(
            MultiRoundSession(
                s.session,
                s.rounds,
                start_s=float(first.loc[s.session]),
                prefix=getattr(s, "prefix", None),
                prefix_tokens=getattr(s, "prefix_tokens", 0),
            )
            for s in plan.sessions
        ),
        plan.meta,
        plan.prefixes,
    )


def observed_rearrivals(requests: pd.DataFrame) -> list[float]:
    """The send times of every round after a session's first, in (session, round) order:
    the fixed arrivals of the prediction."""
    later = requests[requests[ROUND_COLUMN] > 0].sort_values(["session", ROUND_COLUMN])
    return [float(t) for t in later["send_s"]]


# --- the prediction, with the pool's evictions watched -----------------------------------


class _WatchedPool(BlockPool):
    """The predictor's block pool, counting the cached blocks allocation evicts and
    telling ``on_admit`` that count whenever a waiting request is admitted (a hit is
    taken from the free queue at every admission, before the request allocates)."""

    def __init__(self, num_blocks: int, on_admit: Callable[[int], None]) -> None:
        super().__init__(num_blocks)
        self.evictions = 0
        self.on_admit = on_admit

    def allocate(self, count: int) -> list[int]:
        block = self.next[self.sentinel]
        for _ in range(count):  # the blocks allocate pops, front of the queue first
            self.evictions += self.key[block] != NO_KEY
            block = self.next[block]
        return super().allocate(count)

    def touch(self, blocks: list[int]) -> None:
        self.on_admit(self.evictions)
        super().touch(blocks)


def evictions_before_admission(
    plan: Plan,
    configuration: VllmConfiguration,
    step_cost: VllmStepCost,
    fixed: list[float] | None,
) -> tuple[list[int], VllmResult]:
    """Per request (id order), the cached blocks the predicted pool had evicted before
    its first admission, from the step-by-step ``Engine`` (the rules every core runs),
    and that run's result."""
    inputs = vllm_inputs(plan, configuration.block_size)
    engine = Engine(inputs, configuration, step_cost, fixed)
    before = [-1] * inputs.requests

    def admitted(evictions: int) -> None:
        rid = engine.waiting[0].rid  # the head is the request being admitted
        if before[rid] < 0:
            before[rid] = evictions

    engine.pool = _WatchedPool(configuration.num_blocks, admitted)
    while engine.advance_to_work():
        engine.step()
    return before, VllmResult(inputs, configuration, engine.raw())


# --- why a request disagrees -------------------------------------------------------------


@dataclass(frozen=True)
class Timeline:
    """When each request (id order) was admitted and finished, in the run or in the
    prediction; ``admit`` keys sort ties in one step in queue order."""

    admit: list[tuple[float, ...]]
    finish: list[float]
    finish_frees_by_admission: bool  # a finish at the admission's instant freed in time

    def before(self, when: float, instant: tuple[float, ...]) -> bool:
        return when <= instant[0] if self.finish_frees_by_admission else when < instant[0]


def order_differences(
    rid: int, previous: int | None, run: Timeline, pred: Timeline, labels: list[str]
) -> list[str]:
    """The requests on the other side, in the run than in the prediction, of request
    ``rid``'s admission or of the start of its tool wait (the finish of ``previous``, the
    round before it): admitted before it in one and after it in the other, admitted or
    finished during its wait in one and not in the other. Those are what decide which
    blocks the pool had to give up while it waited."""
    found = []
    for q in range(len(labels)):
        if q in (rid, previous):
            continue
        for what, t_run, t_pred in (
            ("admitted", run.admit[q], pred.admit[q]),
            ("finished", (run.finish[q],), (pred.finish[q],)),
        ):
            if what == "admitted":
                in_run, in_pred = t_run < run.admit[rid], t_pred < pred.admit[rid]
            else:
                in_run = run.before(t_run[0], run.admit[rid])
                in_pred = pred.before(t_pred[0], pred.admit[rid])
            if in_run != in_pred:
                side = "before" if in_run else "after"
                found.append(f"{labels[q]} {what} {side} its admission")
                break
            if previous is not None and in_run:
                waited_run = t_run[0] > run.finish[previous]
                if waited_run != (t_pred[0] > pred.finish[previous]):
                    side = "during" if waited_run else "before"
                    found.append(f"{labels[q]} {what} {side} its tool wait")
                    break
    return found


def disagreement_reason(row: RequestAgreement, neighbours: list[str], device_error: float) -> str:
    """Why one request's hit differs, as far as the records tell (module docstring)."""
    if row.prompt_tokens_observed != row.prompt_tokens_predicted:
        return (
            f"vLLM counted {row.prompt_tokens_observed} prompt tokens, the plan has "
            f"{row.prompt_tokens_predicted}: the replay did not send the plan's prompt"
        )
    if row.cached_tokens_observed > row.cacheable_tokens:
        return (
            f"vLLM hit {row.cached_tokens_observed} tokens, more than the "
            f"{row.cacheable_tokens} the round before left cacheable: a prefix shared with "
            "another session, which the plans never hold"
        )
    if neighbours:
        named = "; ".join(neighbours[:NAMED_NEIGHBOURS])
        more = len(neighbours) - NAMED_NEIGHBOURS
        return (
            f"admitted in a different step relative to its neighbours than predicted: in "
            f"the run {named}{f'; {more} more' if more > 0 else ''}, each the other way "
            f"round in the prediction; real step times differ from the profile's (device "
            f"time {device_error:+.1%}), so the pool gave up other blocks"
        )
    return (
        "not explained by the records: every other request was admitted and finished on "
        "the same side of its admission and of its tool wait in the run as in the prediction"
    )


# --- the comparison ----------------------------------------------------------------------


def _scheduling(engine: dict[str, Any]) -> str:
    """How the server scheduled, from its recorded argv: vLLM's CPU build always
    synchronously, elsewhere synchronously only with --no-async-scheduling."""
    if engine["device"] == "cpu" or NO_ASYNC_FLAG in engine["argv"]:
        return "synchronous"
    return "asynchronous (vLLM's default)"


def compare_run(record: RunRecord, plan: Plan, profile: VllmProfile, source: str) -> Agreement:
    """Compare one sealed vLLM run with the predictor (module docstring). ``plan`` is the
    plan it replayed (``source`` names it in errors), ``profile`` the vLLM profile that
    prices the steps."""
    configuration = run_configuration(record)
    check_profile(profile, record)
    check_plan(plan, record, source)
    requests = record.requests.sort_values(["session", ROUND_COLUMN]).reset_index(drop=True)
    keys = [(s.session, k) for s in plan.sessions for k in range(len(s.rounds))]
    observed_keys = zip(requests["session"], requests[ROUND_COLUMN], strict=True)
    if [(int(s), int(k)) for s, k in observed_keys] != keys:
        raise AgreementError(
            f"{record.path / 'requests.parquet'}: its (session, round) rows are not the "
            f"plan's {len(keys)} requests; the run is not of {source}"
        )
    variant = observed_starts(plan.variant(str(record.manifest["variant"])), requests)
    fixed = observed_rearrivals(requests)
    predicted = simulate_vllm(variant, configuration, profile.step_cost, fixed, source=source)
    before, watched = evictions_before_admission(variant, configuration, profile.step_cost, fixed)
    if watched.run.cached_tokens != predicted.run.cached_tokens:
        raise AssertionError("the step-by-step engine and simulate_vllm disagree: a core bug")
    observed_device = iteration_channel_a(record, None)
    device_error = (predicted.device_s - observed_device.elapsed_s) / observed_device.elapsed_s
    rows = _rows(requests, predicted, before)
    rows = _with_reasons(rows, device_error)
    bugs = [r for r in rows if r.evictions_before == 0 and not r.agree]
    if bugs:
        warnings.warn(
            PredictorBugWarning(
                f"run {record.run_id}: {len(bugs)} request(s) the predicted pool admitted "
                f"before evicting anything disagree with vLLM ({', '.join(r.label for r in bugs)}"
                f"; first: observed {bugs[0].cached_tokens_observed}, predicted "
                f"{bugs[0].cached_tokens_predicted} cached tokens): a bug in the vLLM rules or "
                "the measurement"
            ),
            stacklevel=2,
        )
    engine = record.manifest["engine"]
    return Agreement(
        requests=tuple(rows),
        run={
            "run_id": record.run_id,
            "study": record.manifest["study"],
            "backend": record.manifest["backend"],
            "device": engine["device"],
            "vllm_version": engine["version"],
            "model": Path(str(engine["model"]["directory"])).name,
            "weights": engine["model"]["weights"],
            "scheduling": _scheduling(engine),
            "configuration": configuration.as_dict() | {"id": configuration.id},
            "condition": record.manifest["condition"],
            "variant": record.manifest["variant"],
            "replicate": record.replicate,
            "n": int(record.manifest["n"]),
            "plan_sha256": record.manifest["plan_sha256"],
        },
        profile=profile.identity() | {"seconds": profile.seconds_note()},
        device_s_predicted=predicted.device_s,
        device_s_observed=observed_device.elapsed_s,
        steps_predicted=predicted.run.total_steps,
        steps_observed=observed_device.steps,
    )


def _rows(
    requests: pd.DataFrame, predicted: VllmResult, before: list[int]
) -> list[RequestAgreement]:
    rows = []
    for rid, (obs, pred) in enumerate(
        zip(requests.to_dict("records"), predicted.requests, strict=True)
    ):
        observed_cached = int(obs["cached_tokens"])
        rows.append(
            RequestAgreement(
                session=pred.session,
                round=pred.round,
                prompt_tokens_observed=int(obs["prompt_tokens"]),
                prompt_tokens_predicted=pred.prompt_tokens,
                cached_tokens_observed=observed_cached,
                cached_tokens_predicted=pred.cached_tokens,
                cacheable_tokens=predicted.cacheable_tokens(rid),
                agree=observed_cached == pred.cached_tokens,
                evictions_before=before[rid],
                preemptions_predicted=pred.preemptions,
                send_s=float(obs["send_s"]),
                first_token_s_observed=float(obs["first_token_s"]),
                complete_s_observed=float(obs["complete_s"]),
                first_scheduled_s_predicted=pred.first_scheduled_s,
                finish_s_predicted=pred.finish_s,
                reason="",
            )
        )
    return rows


def _with_reasons(rows: list[RequestAgreement], device_error: float) -> list[RequestAgreement]:
    """Each disagreeing row with its reason. A request's admission is, in the run, when
    its first token reached the client (the step that ended its prefill) and, in the
    prediction, the start of its first step, ties in a step in queue order; a predicted
    step ends where the next begins, so a finish then frees its blocks in time."""
    labels = [r.label for r in rows]
    run = Timeline(
        [(r.first_token_s_observed,) for r in rows], [r.complete_s_observed for r in rows], False
    )
    pred = Timeline(
        [(r.first_scheduled_s_predicted, r.send_s, r.session, r.round) for r in rows],
        [r.finish_s_predicted for r in rows],
        True,
    )
    out = []
    for i, row in enumerate(rows):
        if row.agree:
            out.append(row)
            continue
        previous = i - 1 if row.round else None
        neighbours = order_differences(i, previous, run, pred, labels)
        reason = disagreement_reason(row, neighbours, device_error)
        out.append(RequestAgreement(**(asdict(row) | {"reason": reason})))
    return out


def write_agreement(agreement: Agreement, out_dir: Path) -> Path:
    """The comparison's directory: the per-request table (``REQUESTS_FILE``) and the
    summary (``SUMMARY_FILE``), published together (a killed writer leaves no half)."""
    with atomic_directory(out_dir) as staging:
        write_frame(agreement.frame(), staging / REQUESTS_FILE)
        atomic_write_json(staging / SUMMARY_FILE, agreement.summary())
    return out_dir
