"""The NATS envelope codec: every envelope survives encode -> decode exactly, through the
header parsing nats-py does on delivery; messages stored with the earlier one-header-per-
field format still decode."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st
from nats.aio.client import Client

from adapters.nats._codec import decode, encode
from adapters.nats._subjects import Subjects
from core.messages import Envelope, MessageKind

SUBJECTS = Subjects("handler.data.partitions", "shoal.dlq")

envelopes = st.builds(
    Envelope,
    message_id=st.text(min_size=1, max_size=40),
    project_id=st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True),
    partition=st.integers(0, 100_000),
    gateway_id=st.text(max_size=40),
    sequence=st.integers(0, 2**63 - 1),
    received_at=st.floats(0, 4e9, allow_nan=False),
    payload=st.binary(max_size=64),
    kind=st.sampled_from(list(MessageKind)),
)


def _over_the_wire(headers: dict[str, str]) -> dict[str, str]:
    """What a subscriber's message carries: the block as sent, parsed by nats-py."""
    block = "".join(f"{name}: {value}\r\n" for name, value in headers.items()).encode()
    return Client._parse_header_lines(block)


@given(envelopes)
def test_every_envelope_survives_encode_and_decode(envelope: Envelope) -> None:
    subject, headers = encode(envelope, SUBJECTS)
    back = decode(
        subject,
        _over_the_wire(headers),
        envelope.payload,
        SUBJECTS.parse(subject),
        fallback_id="fallback",
        fallback_time=0.0,
    )
    assert back == envelope
    assert math.isclose(back.received_at, envelope.received_at, rel_tol=0, abs_tol=0)


def test_a_message_in_the_earlier_per_field_format_still_decodes() -> None:
    headers = {
        "Nats-Msg-Id": "id%201",
        "Shoal-Project": "proj-1",
        "Shoal-Partition": "7",
        "Shoal-Gateway": "gw%20a",
        "Shoal-Sequence": "42",
        "Shoal-Received-At": "1700000000.25",
        "Shoal-Kind": "data",
    }
    subject = "handler.data.partitions.p7.proj-1.data"
    back = decode(
        subject, headers, b"{}", SUBJECTS.parse(subject), fallback_id="f", fallback_time=0.0
    )
    assert back == Envelope(
        message_id="id 1",
        project_id="proj-1",
        partition=7,
        gateway_id="gw a",
        sequence=42,
        received_at=1700000000.25,
        payload=b"{}",
        kind=MessageKind.DATA,
    )


def test_a_broken_envelope_header_falls_back_to_the_subject() -> None:
    subject = "handler.data.partitions.p3.proj-9.data"
    back = decode(
        subject,
        {"Nats-Msg-Id": "m", "Shoal-Envelope": "v9 nonsense"},
        b"x",
        SUBJECTS.parse(subject),
        fallback_id="f",
        fallback_time=5.0,
    )
    assert (back.message_id, back.project_id, back.partition, back.sequence) == (
        "m",
        "proj-9",
        3,
        0,
    )
    assert back.received_at == 5.0
