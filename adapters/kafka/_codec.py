"""Envelopes <-> Kafka record. The key is always the project id. A record holds one envelope,
or a pack of several (``core.packing``).

One envelope: its fields travel in headers (as on NATS), the value is the device's
payload, untouched. Headers (UTF-8 values; Kafka header values are bytes, so any string
survives as is):

- ``Shoal-Msg-Id``       message_id
- ``Shoal-Project``      project_id
- ``Shoal-Partition``    partition (decimal)
- ``Shoal-Gateway``      gateway_id
- ``Shoal-Sequence``     sequence (decimal)
- ``Shoal-Received-At``  received_at (``repr`` of the float: exact round trip)
- ``Shoal-Kind``         ``announce`` or ``data``

A pack (the envelopes of one publish that share kind, partition, project and gateway):
the value is ``core.packing.encode_pack`` of the parts (their fields and payloads), the
headers are ``Shoal-Pack: 1``, ``Shoal-Msg-Id`` the pack's id (``pack_id``),
``Shoal-Project`` and ``Shoal-Partition`` (so tools that read headers still see where it
belongs). ``decode_all`` gives every part; its parts share the record's offset. A pack of one is
a plain record, so records written before packs decode as they did. A record that says it
is a pack but does not decode as one is taken as one foreign message (``decode``).

Dead letters add ``Shoal-Dead-Reason``, ``Shoal-Dead-Attempts`` and ``Shoal-Source``
(``topic/partition/offset`` of the original record). A part of a pack is dead-lettered
alone, as a plain record: the parts of one pack share ``Shoal-Source``, and each letter is
told apart by its own message id and its offset in the dead-letter topic. A replayed dead
letter carries ``Shoal-Replay`` (its dead-letter offset): subscriptions then tell it from a
duplicate of the original (``dedupe_key``). A record settling dead letters carries
``Shoal-Dead-Settles`` (their offsets, comma-separated) and no envelope.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from adapters._headers import (
    H_DEAD_ATTEMPTS,
    H_DEAD_REASON,
    H_GATEWAY,
    H_KIND,
    H_PACK,
    H_PARTITION,
    H_PROJECT,
    H_RECEIVED_AT,
    H_SEQUENCE,
)
from core.messages import Envelope, MessageKind, is_valid_project_id
from core.packing import PackError, decode_pack, encode_pack, pack_id

__all__ = [
    "H_DEAD_ATTEMPTS",
    "H_DEAD_REASON",
    "H_MSG_ID",
    "H_PACK",
    "H_REPLAY",
    "H_SETTLES",
    "H_SOURCE",
    "Encoded",
    "decode",
    "decode_all",
    "dedupe_key",
    "encode",
    "envelope_headers",
]

H_MSG_ID = "Shoal-Msg-Id"
H_SOURCE = "Shoal-Source"
H_REPLAY = "Shoal-Replay"
H_SETTLES = "Shoal-Dead-Settles"

Headers = list[tuple[str, bytes]]

log = logging.getLogger("shoal.adapters.kafka")


@dataclass(frozen=True, slots=True)
class Encoded:
    partition: int
    key: bytes
    value: bytes
    headers: Headers


def encode(parts: Sequence[Envelope], partitions: int) -> Encoded:
    """The record of ``parts``: one envelope as a plain record, several as a pack (they
    share kind, partition, project and gateway: ``core.packing.packed`` made them).
    ``ValueError`` on an unsafe project id, an empty message id, or a partition outside the
    topic's ``partitions``."""
    if not parts:
        raise ValueError("a record holds at least one message")
    first = parts[0]
    if not is_valid_project_id(first.project_id):
        raise ValueError(f"project_id {first.project_id!r} is not one safe subject token")
    if not 0 <= first.partition < partitions:
        raise ValueError(f"partition {first.partition} is outside 0..{partitions - 1}")
    if not all(part.message_id for part in parts):
        raise ValueError("message_id is empty")
    key = first.project_id.encode()
    if len(parts) == 1:
        return Encoded(first.partition, key, first.payload, envelope_headers(first))
    headers = [
        (H_PACK, b"1"),
        (H_MSG_ID, pack_id(parts).encode()),
        (H_PROJECT, key),
        (H_PARTITION, str(first.partition).encode()),
    ]
    return Encoded(first.partition, key, encode_pack(parts), headers)


def envelope_headers(envelope: Envelope) -> Headers:
    """The headers that carry ``envelope``'s fields (no validation)."""
    return [
        (H_MSG_ID, envelope.message_id.encode()),
        (H_PROJECT, envelope.project_id.encode()),
        (H_PARTITION, str(envelope.partition).encode()),
        (H_GATEWAY, envelope.gateway_id.encode()),
        (H_SEQUENCE, str(envelope.sequence).encode()),
        (H_RECEIVED_AT, repr(float(envelope.received_at)).encode()),
        (H_KIND, envelope.kind.value.encode()),
    ]


def dedupe_key(headers: Iterable[tuple[str, bytes]] | None, message_id: str) -> str:
    """What duplicates are detected by: the message id, told apart per replay."""
    for name, raw in headers or ():
        if name == H_REPLAY:
            return f"{message_id}|replay:{(raw or b'').decode(errors='replace')}"
    return message_id


def decode_all(
    headers: Iterable[tuple[str, bytes]] | None,
    key: bytes | None,
    value: bytes | None,
    *,
    partition: int,
    fallback_id: str,
    fallback_time: float,
) -> list[Envelope]:
    """The envelopes of a stored record: a pack's parts in their order, else the one
    envelope ``decode`` gives (also for a record that claims to be a pack and is not a whole
    one: it is delivered as it is, and dead-lettered by whoever cannot process it)."""
    headers = list(headers or ())
    if (H_PACK, b"1") in headers and value:
        try:
            return decode_pack(value)
        except PackError as exc:
            log.warning("%s is not a whole pack (%s): taken as one message", fallback_id, exc)
    return [
        decode(
            headers,
            key,
            value,
            partition=partition,
            fallback_id=fallback_id,
            fallback_time=fallback_time,
        )
    ]


def decode(
    headers: Iterable[tuple[str, bytes]] | None,
    key: bytes | None,
    value: bytes | None,
    *,
    partition: int,
    fallback_id: str,
    fallback_time: float,
) -> Envelope:
    """The envelope of a stored record. Never raises: a record written by something other
    than ``encode`` gets the record's partition, the key as project, ``fallback_id`` as id,
    sequence 0 and ``fallback_time``."""
    h: dict[str, str] = {}
    for name, raw in headers or ():
        try:
            h[name] = (raw or b"").decode()
        except UnicodeDecodeError:
            continue
    payload = value or b""
    try:
        return Envelope(
            message_id=h[H_MSG_ID],
            project_id=h[H_PROJECT],
            partition=int(h[H_PARTITION]),
            gateway_id=h[H_GATEWAY],
            sequence=int(h[H_SEQUENCE]),
            received_at=float(h[H_RECEIVED_AT]),
            payload=payload,
            kind=MessageKind(h[H_KIND]),
        )
    except (KeyError, ValueError):
        pass
    try:
        project = key.decode() if key else h.get(H_PROJECT, "")
    except UnicodeDecodeError:
        project = h.get(H_PROJECT, "")
    try:
        kind = MessageKind(h.get(H_KIND, "data"))
    except ValueError:
        kind = MessageKind.DATA
    return Envelope(
        message_id=h.get(H_MSG_ID) or fallback_id,
        project_id=project,
        partition=partition,
        gateway_id="",
        sequence=0,
        received_at=fallback_time,
        payload=payload,
        kind=kind,
    )
