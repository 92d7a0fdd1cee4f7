"""Packs (``core.packing``): every envelope survives packing and unpacking exactly, in its
order; packs are the longest runs within their bounds, in publish order, and the same for
the same input (a re-publish has the same pack ids); anything else is refused."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.messages import Envelope, MessageKind
from core.packing import PackError, decode_pack, encode_pack, is_pack, pack_id, packed, parts_in

envelopes = st.builds(
    Envelope,
    message_id=st.text(min_size=1, max_size=20),
    project_id=st.sampled_from(["a", "b", "dev-7"]),
    partition=st.integers(0, 3),
    gateway_id=st.sampled_from(["", "gw-1", "g w/é"]),
    sequence=st.integers(0, 2**63 - 1),
    received_at=st.floats(0, 4e9, allow_nan=False),
    payload=st.binary(max_size=64),
    kind=st.sampled_from(list(MessageKind)),
)


def _shared(e: Envelope) -> tuple[object, ...]:
    return (e.kind, e.partition, e.project_id, e.gateway_id)


@given(st.lists(envelopes, max_size=40), st.integers(1, 200), st.integers(1, 7))
def test_packs_hold_every_envelope_once_in_order_and_within_bounds(
    batch: list[Envelope], max_bytes: int, max_parts: int
) -> None:
    packs = packed(batch, max_bytes=max_bytes, max_parts=max_parts)
    firsts = {e.message_id: e for e in reversed(batch)}  # each id's first envelope
    assert [id(e) for p in packs for e in p] == [id(e) for e in batch if firsts[e.message_id] is e]
    for pack in packs:
        assert len({_shared(e) for e in pack}) == 1
        assert len(pack) <= max_parts
        assert len(pack) == 1 or sum(len(e.payload) for e in pack) <= max_bytes
    for before, after in itertools.pairwise(packs):
        # cut only where it must be
        assert (
            _shared(before[-1]) != _shared(after[0])
            or len(before) == max_parts
            or sum(len(e.payload) for e in before) + len(after[0].payload) > max_bytes
        )
    assert [list(p) for p in packed(batch, max_bytes=max_bytes, max_parts=max_parts)] == [
        list(p) for p in packs
    ]


@given(st.lists(envelopes, min_size=1, max_size=30))
def test_every_pack_survives_encode_and_decode(batch: list[Envelope]) -> None:
    for pack in packed(batch):
        body = encode_pack(pack)
        assert is_pack(body)
        assert decode_pack(body) == list(pack)
        assert parts_in(body) == len(pack)


def test_a_request_of_one_project_is_one_pack_and_its_id_is_stable() -> None:
    batch = [Envelope(f"m{n}", "dev-1", 5, "gw", n + 1, 1.5, b'{"n": %d}' % n) for n in range(100)]
    packs = packed(batch)
    assert [len(p) for p in packs] == [100]
    assert pack_id(packs[0]) == pack_id(packed(list(batch))[0]) == "pack:100:m0"


def test_packs_are_cut_at_the_byte_and_part_bounds() -> None:
    batch = [Envelope(f"m{n}", "p", 0, "", n, 0.0, b"x" * 10) for n in range(10)]
    assert [len(p) for p in packed(batch, max_bytes=35)] == [3, 3, 3, 1]
    assert [len(p) for p in packed(batch, max_parts=4)] == [4, 4, 2]
    big = Envelope("big", "p", 0, "", 0, 0.0, b"x" * 100)
    assert [len(p) for p in packed([big, *batch[:2]], max_bytes=35)] == [1, 2]
    with pytest.raises(ValueError, match="at least 1"):
        packed(batch, max_parts=0)


def test_encode_refuses_parts_that_do_not_share_a_subject() -> None:
    a = Envelope("m1", "p", 0, "", 1, 0.0, b"{}")
    b = Envelope("m2", "q", 0, "", 1, 0.0, b"{}")
    with pytest.raises(ValueError, match="share"):
        encode_pack([a, b])
    with pytest.raises(ValueError, match="at least one"):
        encode_pack([])


def _good() -> bytes:
    parts: Sequence[Envelope] = [
        Envelope("m1", "p", 0, "", 1, 0.0, b"{}"),
        Envelope("m2", "p", 0, "", 2, 0.0, b"[]"),
    ]
    return encode_pack(parts)


@pytest.mark.parametrize(
    "body",
    [
        b"{}",
        b"SHOAL-PACK 1\n",
        b"SHOAL-PACK 1\nnot json\n{}",
        b'SHOAL-PACK 1\n{"kind":"data"}\n',
        _good()[:-1],
        _good() + b"x",
        _good().replace(b'"data"', b'"other"'),
        _good().replace(b'"sizes":[2,2]', b'"sizes":[2,-2]'),
    ],
)
def test_a_broken_pack_is_refused(body: bytes) -> None:
    with pytest.raises(PackError):
        decode_pack(body)


def test_a_plain_or_broken_body_holds_one_message() -> None:
    assert parts_in(b'{"n": 1}') == parts_in(b"SHOAL-PACK 1\nnot json\n") == 1
