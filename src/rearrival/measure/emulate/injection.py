"""The prefill-injection study on the emulated stack (paper III-C, docs/DESIGN.md §10 item 5).

Prefill and decode never share a step, so one prefill admitted while others stream stalls
every stream for its whole duration. This drives the engine with background streams and
one injected request and returns the inter-token gaps around the injection.
"""

from __future__ import annotations

import pandas as pd

from rearrival.measure.emulate.driver import Script, check_seed, drive, first_sends
from rearrival.measure.emulate.truth import EmulateError, Truth, default_truth
from rearrival.model.configuration import RblnConfiguration
from rearrival.model.cost.profile import Profile, measured_profile
from rearrival.vocabulary import ARRIVAL_TOLERANCE_S


def run_injection(
    *,
    background_sessions: int,
    injected_prompt_tokens: int,
    inject_at_s: float,
    gen_tokens: int,
    config: RblnConfiguration,
    seed: int,
    background_prompt_tokens: int = 1024,
    window: int = 5,
    truth: Truth | None = None,
    profile: Profile | None = None,
) -> pd.DataFrame:
    """Inter-token gaps of streaming background sessions around one injected prefill.

    Paper Section III-C / docs/DESIGN.md §10 item 5: prefill and decode never share a step, so a
    prefill admitted while others stream stalls every one of them for its whole
    duration. ``background_sessions`` stream ``gen_tokens`` each; at ``inject_at_s``
    the client sends one request of ``injected_prompt_tokens`` (no cached prefix,
    one generated token so only its prefill acts). Returns one row per background
    gap within ``window`` gaps of the one spanning the injection: session, index (the
    token ending the gap), gap_start_s, gap_end_s, gap_s, relative (0 = the gap
    containing the injected prefill), injected_prompt_tokens, injected_prefill_s.
    Choose ``inject_at_s`` after the background prefills (about 0.18 s each for 1,024
    tokens, plus ~85 ms HTTP ingress) so that the gaps before it are plain decode gaps.
    """
    check_seed(seed)
    if not 1 <= background_sessions < config.slots:
        raise EmulateError(
            f"background_sessions must be between 1 and slots - 1 = "
            f"{config.slots - 1} so the injected request is admitted "
            f"at once, got {background_sessions}"
        )
    truth = truth or default_truth()
    profile = profile or measured_profile()
    injected = background_sessions
    sends = (*first_sends(seed, truth, background_sessions), float(inject_at_s))
    script = Script(
        prompts=((background_prompt_tokens,),) * background_sessions + ((injected_prompt_tokens,),),
        gens=((gen_tokens,),) * background_sessions + ((1,),),
        gaps_s=((0.0,),) * (background_sessions + 1),
        first_send_s=sends,
    )
    rec, _ = drive(script, config, truth, seed, profile)
    _, _, tokens, _ = rec.frames()
    injection = rec.requests[(injected, 0)]
    prefill_end = injection["admitted_s"] + injection["prefill_s"]
    tokens = tokens[tokens["session"] != injected]
    gaps = tokens.assign(
        gap_start_s=tokens.groupby("session")["t_s"].shift(), gap_end_s=tokens["t_s"]
    ).dropna(subset=["gap_start_s"])
    # The gap spanning the injection ends with each session's first token emitted
    # after the injected prefill (server time, free of the session's HTTP latency).
    after = gaps[gaps["server_s"] >= prefill_end - ARRIVAL_TOLERANCE_S]
    anchor = after.groupby("session")["index"].min()
    if anchor.empty:
        raise EmulateError(
            f"inject_at_s={inject_at_s} is after the background sessions "
            "stopped streaming; lower inject_at_s or raise gen_tokens"
        )
    gaps = gaps[gaps["session"].isin(anchor.index)]
    relative = gaps["index"] - gaps["session"].map(anchor)
    out = gaps.assign(
        gap_s=gaps["gap_end_s"] - gaps["gap_start_s"],
        relative=relative,
        injected_prompt_tokens=injected_prompt_tokens,
        injected_prefill_s=float(injection["prefill_s"]),
    )
    out = out[relative.abs() <= window]
    columns = [
        "session",
        "index",
        "gap_start_s",
        "gap_end_s",
        "gap_s",
        "relative",
        "injected_prompt_tokens",
        "injected_prefill_s",
    ]
    out = out.sort_values(["session", "index"])
    return (
        out[columns]
        .reset_index(drop=True)
        .astype(
            {
                "session": "int64",
                "index": "int64",
                "relative": "int64",
                "injected_prompt_tokens": "int64",
            }
        )
    )
