"""The measured profile reproduces the paper's own numbers (docs/DESIGN.md §3)."""

import math

import pytest

from rearrival.model.buckets import select_bucket
from rearrival.model.cost.profile import ProfileError, load_profile, measured_profile


@pytest.fixture(scope="module")
def profile():
    return measured_profile()


@pytest.mark.parametrize(
    ("bucket", "ms"),
    [
        (1, 9.870),
        (2, 10.420),
        (4, 10.825),
        (8, 12.970),  # measured
        (6, 11.8975),
        (10, 14.0425),
        (16, 17.260),  # paper Section V-A
        (3, 10.6225),
        (5, 11.361250),  # interpolated between neighbours
    ],
)
def test_bucket_cost_matches_paper(profile, bucket, ms):
    assert profile.bucket_cost_s(bucket) * 1000 == pytest.approx(ms, abs=1e-9)


def test_decode_step_adds_alpha_and_beta(profile):
    assert profile.decode_step_s(3, 4) * 1000 == pytest.approx(10.825 + 0.501 + 3 * 0.0413)


def test_prefill_model(profile):
    assert profile.prefill_s(0) == 0.0
    assert profile.prefill_s(128) == pytest.approx(0.021206 + 6.399e-7 * 128)
    assert profile.prefill_s(129) == pytest.approx(2 * (0.021206 + 6.399e-7 * 129))
    q = 1500
    assert profile.prefill_s(q) == pytest.approx(math.ceil(q / 128) * (0.021206 + 6.399e-7 * q))


def test_reuse_needs_129_prompt_tokens(profile):
    # the follow-up must keep one token to compute, so 128 cached tokens need L1 >= 129
    assert profile.reusable_tokens(128, 128) == 0
    assert profile.reusable_tokens(128, 129) == 128
    assert profile.reusable_tokens(1000, 1200) == 896
    assert profile.reusable_tokens(1280, 1281) == 1280


def test_kv_memory_matches_table_xv(profile):
    assert profile.kv_bytes_per_token == 147_456 == 144 * 1024
    assert profile.slot_bytes / 1024**3 == 1.125
    assert profile.slot_gib_per_device == 0.28125


def test_compile_model_keeps_every_search_candidate_in_budget(profile):
    # 6 buckets is the largest search candidate: 42.3 + 61.33 * 7 = 471.61 s < 1800 s
    assert profile.compile_seconds(6) == pytest.approx(471.61)
    assert profile.compile_seconds(6) < profile.compile_budget_s
    assert profile.artifact_gib(4) == pytest.approx(8.276 + 4 * 0.806)


def test_select_bucket_is_smallest_holding_n():
    buckets = (1, 2, 4, 8)
    assert [select_bucket(n, buckets) for n in range(1, 9)] == [1, 2, 4, 4, 8, 8, 8, 8]
    with pytest.raises(ValueError):
        select_bucket(9, buckets)


def test_profile_file_errors_name_the_field(tmp_path):
    bad = tmp_path / "p.yaml"
    bad.write_text("decode: {bucket_cost_ms: {1: 9.0, 2: 10.0}}\n")
    with pytest.raises(ProfileError, match=r"p.yaml: missing field '[a-z_.]+'"):
        load_profile(bad)
