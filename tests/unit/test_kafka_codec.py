"""The Kafka record codec (``adapters.kafka._codec``): one envelope is a plain record, several
of one subject a pack record whose parts ``decode_all`` gives back exactly; a record that only
looks like a pack is one message."""

from __future__ import annotations

import pytest

from adapters.kafka._codec import H_PACK, decode_all, encode
from core.messages import Envelope, MessageKind
from core.packing import encode_pack

PARTITIONS = 8


def _envelope(n: int, *, project: str = "dev-1", payload: bytes | None = None) -> Envelope:
    body = payload if payload is not None else b'{"n": %d}' % n
    return Envelope(f"m{n}", project, 3, "gw 1/ü", n, 1.25 + n, body, MessageKind.DATA)


def _unpack(record_headers: list[tuple[str, bytes]], key: bytes, value: bytes) -> list[Envelope]:
    return decode_all(
        record_headers, key, value, partition=3, fallback_id="t:3:7", fallback_time=9.0
    )


def test_one_envelope_is_a_plain_record_with_its_fields_in_headers() -> None:
    e = _envelope(1)
    record = encode([e], PARTITIONS)
    assert (record.partition, record.key, record.value) == (3, b"dev-1", e.payload)
    assert H_PACK not in dict(record.headers)
    assert _unpack(record.headers, record.key, record.value) == [e]


def test_a_pack_is_one_record_marked_as_a_pack_whose_parts_unpack_exactly() -> None:
    parts = [_envelope(n) for n in range(1, 6)]
    record = encode(parts, PARTITIONS)
    headers = dict(record.headers)
    assert (record.partition, record.key) == (3, b"dev-1")
    assert headers[H_PACK] == b"1"
    assert headers["Shoal-Msg-Id"] == b"pack:5:m1"
    assert _unpack(record.headers, record.key, record.value) == parts


def test_a_record_marked_as_a_pack_that_is_not_one_is_one_foreign_message() -> None:
    value = encode_pack([_envelope(1), _envelope(2)])[:-1]  # cut short
    (got,) = _unpack([(H_PACK, b"1")], b"dev-1", value)
    assert (got.message_id, got.project_id, got.payload, got.received_at) == (
        "t:3:7",
        "dev-1",
        value,
        9.0,
    )


def test_a_plain_payload_that_looks_like_a_pack_is_not_unpacked() -> None:
    e = _envelope(1, payload=encode_pack([_envelope(2), _envelope(3)]))
    record = encode([e], PARTITIONS)
    assert _unpack(record.headers, record.key, record.value) == [e]


@pytest.mark.parametrize(
    ("parts", "complaint"),
    [
        ([], "at least one"),
        ([_envelope(1, project="a.b")], "safe subject token"),
        ([Envelope("", "p", 3, "", 1, 0.0, b"")], "message_id"),
        ([_envelope(1), Envelope("", "dev-1", 3, "gw 1/ü", 2, 0.0, b"")], "message_id"),
        ([Envelope("m1", "p", PARTITIONS, "", 1, 0.0, b"")], "outside"),
        ([_envelope(1), _envelope(2, project="other")], "share"),
    ],
)
def test_encode_refuses_what_cannot_be_a_record(parts: list[Envelope], complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        encode(parts, PARTITIONS)
