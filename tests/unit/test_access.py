"""core.access: API keys and the per-key token bucket."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from core.access import (
    AccessDeniedError,
    ApiKey,
    TokenBucket,
    authenticate,
    authorize,
    hash_secret,
    issue_key,
    take,
)

key_ids = st.text("0123456789abcdef", min_size=12, max_size=12)
secrets_ = st.text(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-", min_size=32, max_size=64
)


@given(key_ids, secrets_, st.sampled_from([None, ("dev-1",), ("a", "b")]))
def test_an_issued_token_authenticates_as_its_key_and_only_its_hash_is_kept(
    key_id: str, secret: str, projects: tuple[str, ...] | None
) -> None:
    token, record = issue_key(key_id, secret, projects=projects, created_at=0.0)
    assert secret not in repr(record) and record.secret_sha256 == hash_secret(secret)
    assert authenticate(f"Bearer {token}", {key_id: record}) == record
    assert authenticate(f"bearer   {token}  ", {key_id: record}) == record


@given(key_ids, secrets_, st.integers(min_value=0, max_value=31), st.characters())
@example("0" * 12, "s" * 32, 0, "\ud800")  # a lone surrogate has no UTF-8 to hash
def test_any_change_to_the_secret_is_refused(
    key_id: str, secret: str, position: int, replacement: str
) -> None:
    _, record = issue_key(key_id, secret, projects=None, created_at=0.0)
    forged_secret = secret[:position] + replacement + secret[position + 1 :]
    if forged_secret == secret:
        return
    with pytest.raises(AccessDeniedError) as refused:
        authenticate(f"Bearer shoal_{key_id}_{forged_secret}", {key_id: record})
    assert refused.value.status == 401


def test_authorize_lets_a_key_write_its_projects_and_an_admin_key_any() -> None:
    _, scoped = issue_key("a" * 12, "s" * 32, projects=["dev-1"], created_at=0.0)
    _, admin = issue_key("b" * 12, "s" * 32, projects=None, created_at=0.0)
    authorize(scoped, "dev-1")
    authorize(admin, "anything")
    with pytest.raises(AccessDeniedError) as refused:
        authorize(scoped, "dev-2")
    assert refused.value.status == 403


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"key_id": "ABC"}, "12 lowercase hex"),
        ({"secret_sha256": "00"}, "64 lowercase hex"),
        ({"projects": frozenset()}, "at least one project"),
        ({"projects": frozenset({"no spaces"})}, "must match"),
        ({"rate": 0.0}, "positive"),
        ({"rate": math.inf}, "positive"),
        ({"label": "x" * 201}, "label"),
    ],
)
def test_a_malformed_key_record_cannot_be_made(changes: dict[str, object], says: str) -> None:
    fields: dict[str, object] = {
        "key_id": "0" * 12,
        "secret_sha256": "0" * 64,
        "projects": None,
        "created_at": 0.0,
        **changes,
    }
    with pytest.raises(ValueError, match=says):
        ApiKey(**fields)  # type: ignore[arg-type]


def test_a_short_secret_is_not_issued() -> None:
    with pytest.raises(ValueError, match="32 to 128"):
        issue_key("0" * 12, "short", projects=None, created_at=0.0)


@given(
    st.floats(min_value=0.1, max_value=1000),
    st.lists(st.floats(min_value=0, max_value=5), min_size=1, max_size=200),
)
def test_a_bucket_never_admits_more_than_its_burst_plus_what_refilled(
    rate: float, gaps: list[float]
) -> None:
    burst = max(1.0, 2 * rate)
    bucket: TokenBucket | None = None
    now, admitted = 0.0, 0
    for gap in gaps:
        now += gap
        bucket, wait = take(bucket, now, rate=rate, burst=burst)
        if wait is None:
            admitted += 1
        else:
            assert 0 < wait <= 1 / rate + 1e-9
            assert take(bucket, now + wait + 1e-6, rate=rate, burst=burst)[1] is None
    assert admitted <= burst + rate * now + 1e-6


def test_a_clock_step_back_refills_nothing() -> None:
    bucket, _ = take(None, 100.0, rate=1.0, burst=1.0)
    _, wait = take(bucket, 50.0, rate=1.0, burst=1.0)
    assert wait == pytest.approx(1.0)
