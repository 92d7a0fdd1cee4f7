"""``core.idempotency``: key grammar, deterministic identities, the stored answer."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.idempotency import (
    SERIES_PREFIX,
    IdempotentAnswer,
    check_key,
    decode_answer,
    encode_answer,
    fingerprint,
    first_answer,
    identity,
    is_expired,
    key_digest,
    scope,
)
from core.ingest import InvalidRequestError
from core.messages import is_valid_project_id

_visible = st.characters(min_codepoint=0x21, max_codepoint=0x7E)
keys = st.text(_visible, min_size=1, max_size=255)
projects = st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True)
payload_lists = st.lists(st.binary(max_size=20), min_size=1, max_size=5)


@given(key=keys)
def test_a_key_of_1_to_255_visible_ascii_characters_is_valid(key: str) -> None:
    assert check_key(key) == key


@given(key=st.text(max_size=300))
def test_any_other_key_is_a_400(key: str) -> None:
    valid = 1 <= len(key) <= 255 and all("\x21" <= c <= "\x7e" for c in key)
    if valid:
        assert check_key(key) == key
    else:
        with pytest.raises(InvalidRequestError) as raised:
            check_key(key)
        assert raised.value.status == 400


@pytest.mark.parametrize("key", ["", " ", "a b", "x" * 256, "é", "tab\t", "a\n"])
def test_examples_of_invalid_keys(key: str) -> None:
    with pytest.raises(InvalidRequestError):
        check_key(key)


@given(project=projects, key=keys, payloads=payload_lists)
def test_the_identity_is_the_same_every_time_it_is_derived(
    project: str, key: str, payloads: list[bytes]
) -> None:
    body = fingerprint(payloads)
    first, again = identity(project, key, body), identity(project, key, fingerprint(payloads))
    assert first == again
    assert first.series_id.startswith(SERIES_PREFIX)
    assert len(first.series_id) == len(SERIES_PREFIX) + 20
    ids = first.message_ids(len(payloads))
    assert ids == again.message_ids(len(payloads))
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


@given(
    a=st.tuples(projects, keys, payload_lists),
    b=st.tuples(projects, keys, payload_lists),
)
def test_distinct_requests_get_disjoint_series_and_message_ids(
    a: tuple[str, str, list[bytes]], b: tuple[str, str, list[bytes]]
) -> None:
    (pa, ka, ba), (pb, kb, bb) = a, b
    ia, ib = identity(pa, ka, fingerprint(ba)), identity(pb, kb, fingerprint(bb))
    if (pa, ka, ba) == (pb, kb, bb):
        assert ia == ib
        return
    assert ia.series_id != ib.series_id
    assert not set(ia.message_ids(100)) & set(ib.message_ids(100))


@given(project=projects, key=keys, x=payload_lists, y=payload_lists)
def test_the_same_key_with_other_messages_is_another_series(
    project: str, key: str, x: list[bytes], y: list[bytes]
) -> None:
    same = x == y
    assert (fingerprint(x) == fingerprint(y)) == same
    ix, iy = identity(project, key, fingerprint(x)), identity(project, key, fingerprint(y))
    assert (ix == iy) == same


def test_framing_does_not_hide_a_difference() -> None:
    assert fingerprint([b"ab", b"c"]) != fingerprint([b"a", b"bc"])
    assert key_digest("p", "ab") != key_digest("pa", "b")


@given(project=projects, key=keys)
def test_the_scope_is_one_safe_token_a_dot_and_a_hex_digest(project: str, key: str) -> None:
    digest = key_digest(project, key)
    assert len(digest) == 64 and int(digest, 16) >= 0
    head, tail = scope(project, digest).split(".")
    assert is_valid_project_id(head) and tail == digest


def _answer(**changes: object) -> IdempotentAnswer:
    ident = identity("dev-1", "k", fingerprint([b"{}"]))
    values: dict[str, object] = {
        "project_id": "dev-1",
        "key_digest": key_digest("dev-1", "k"),
        "fingerprint": fingerprint([b"{}"]),
        "series_id": ident.series_id,
        "id_base": ident.id_base,
        "partition": 7,
        "count": 3,
        "accepted_at": 1_000.5,
    }
    values.update(changes)
    return IdempotentAnswer(**values)  # type: ignore[arg-type]


def test_an_answer_round_trips_and_names_the_original_202() -> None:
    answer = _answer()
    assert decode_answer(encode_answer(answer)) == answer
    assert len(encode_answer(answer)) < 400
    body = answer.body()
    assert body["accepted"] == 3
    assert (body["first_sequence"], body["last_sequence"]) == (1, 3)
    assert body["gateway_id"] == answer.series_id
    assert body["message_ids"] == identity("dev-1", "k", answer.fingerprint).message_ids(3)


@pytest.mark.parametrize(
    "data", [b"", b"[]", b'{"v": 2}', b'{"v": 1}', b'{"v":1,"count":"x"}', b"\xff"]
)
def test_a_record_that_is_not_an_answer_is_a_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        decode_answer(data)


def test_an_answer_expires_window_seconds_after_it_was_accepted() -> None:
    answer = _answer(accepted_at=100.0)
    assert not is_expired(answer, 159.9, 60.0)
    assert is_expired(answer, 160.0, 60.0)


answers_of_one_scope = st.lists(
    st.builds(
        _answer,
        fingerprint=st.sampled_from([fingerprint([b"{}"]), fingerprint([b"[1]"])]),
        partition=st.integers(0, 3),
        count=st.integers(1, 3),
        accepted_at=st.floats(1_000.0, 1_010.0, allow_nan=False).map(lambda t: round(t, 1)),
    ),
    max_size=4,
)


@given(answers=answers_of_one_scope, data=st.data())
def test_the_first_answer_is_the_earliest_whatever_order_the_stores_answer_in(
    answers: list[IdempotentAnswer], data: st.DataObject
) -> None:
    chosen = first_answer(answers)
    assert first_answer(data.draw(st.permutations(answers))) == chosen
    if not answers:
        assert chosen is None
        return
    assert chosen in answers
    assert all(chosen.accepted_at <= other.accepted_at for other in answers)


def test_the_first_answer_of_one_key_used_with_two_bodies_is_the_first_body() -> None:
    first, later = _answer(accepted_at=100.0), _answer(fingerprint="f" * 64, accepted_at=100.5)
    assert first_answer([later, first]) == first_answer([first, later]) == first
