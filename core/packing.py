"""Packs: a request's messages stored as one broker message.

The broker is paid per stored message (a publish, an fsync share, a protocol frame, a
header parse, an ack), and a device request carries up to thousands of messages of one
project. So the transports store the envelopes of one publish that share a subject (kind,
partition, project, gateway) as one broker message, a *pack*, as Kafka's record batches
do: the consumer explodes it into one delivery per envelope, all at the pack's position,
and acks the broker message once every part is settled. Each part keeps its own message
id, so the landed table settles parts one by one (``core.table`` keeps the message ids of
each position) and a redelivered pack lands only what did not land.

Packs are runs of consecutive envelopes, so a partition's messages keep their publish
order. A pack is deterministic in its input: the same envelopes in the same order give the same
packs with the same ``pack_id``, so a re-published request is a duplicate the broker or
the consumer drops, as a re-published message is.

Wire format (``encode_pack``): ``SHOAL-PACK 1\\n``, one line of JSON naming the shared
fields and, per part, the message id, sequence, received_at and payload size, then the
payloads back to back. Payloads are not re-encoded.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from core.messages import Envelope, MessageKind

__all__ = [
    "MAX_PACK_BYTES",
    "MAX_PACK_PARTS",
    "PackError",
    "decode_pack",
    "encode_pack",
    "is_pack",
    "pack_id",
    "packed",
    "parts_in",
]

PACK_MAGIC = b"SHOAL-PACK 1\n"
MAX_PACK_BYTES = 512 * 1024  # payload bytes: well inside NATS' and Kafka's 1 MiB default
MAX_PACK_PARTS = 1_000  # so one pack never fills a consumer's whole landing buffer

_KINDS = {kind.value: kind for kind in MessageKind}


class PackError(ValueError):
    """Bytes that start like a pack but are not a whole, well-formed one."""


# What a pack's parts share: kind, partition, project, gateway. A plain tuple: the gateway
# builds one per message it packs, and a frozen dataclass cost 8 % of its CPU.
_Shared = tuple[MessageKind, int, str, str]


def _shared(envelope: Envelope) -> _Shared:
    return (envelope.kind, envelope.partition, envelope.project_id, envelope.gateway_id)


def packed(
    envelopes: Sequence[Envelope],
    *,
    max_bytes: int = MAX_PACK_BYTES,
    max_parts: int = MAX_PACK_PARTS,
) -> list[Sequence[Envelope]]:
    """``envelopes`` cut into packs: runs of consecutive envelopes sharing kind,
    partition, project and gateway, cut again where a pack would pass ``max_bytes`` of
    payload or ``max_parts`` parts (a message larger than ``max_bytes`` is a pack of its
    own). A pack of one is stored as a plain message. Concatenated, the packs are
    ``envelopes`` in their order, each message id once (the broker keeps one message per
    id: a repeat inside one publish is dropped here, as a repeat across publishes is by
    the broker's duplicate window)."""
    if max_bytes < 1 or max_parts < 1:
        raise ValueError("max_bytes and max_parts must be at least 1")
    packs: list[Sequence[Envelope]] = []
    parts: list[Envelope] = []
    key: _Shared | None = None
    held = 0
    seen: set[str] = set()
    for envelope in envelopes:
        if envelope.message_id in seen:
            continue
        seen.add(envelope.message_id)
        size = len(envelope.payload)
        shared = _shared(envelope)
        if parts and (shared != key or len(parts) >= max_parts or held + size > max_bytes):
            packs.append(parts)
            parts, held = [], 0
        parts.append(envelope)
        key = shared
        held += size
    if parts:
        packs.append(parts)
    return packs


def pack_id(parts: Sequence[Envelope]) -> str:
    """The broker's de-duplication id of a pack: its first message id and its size (the
    same input always packs the same way, so a re-publish has the same id)."""
    return f"pack:{len(parts)}:{parts[0].message_id}"


def encode_pack(parts: Sequence[Envelope]) -> bytes:
    """The broker message body of ``parts`` (which ``packed`` grouped: they share kind,
    partition, project and gateway; ``ValueError`` otherwise)."""
    if not parts:
        raise ValueError("a pack holds at least one message")
    shared = _shared(parts[0])
    if any(_shared(part) != shared for part in parts):
        raise ValueError("a pack's messages share kind, partition, project and gateway")
    kind, partition, project_id, gateway_id = shared
    header = {
        "kind": kind.value,
        "partition": partition,
        "project": project_id,
        "gateway": gateway_id,
        "ids": [part.message_id for part in parts],
        "sequences": [part.sequence for part in parts],
        "received_at": [float(part.received_at) for part in parts],
        "sizes": [len(part.payload) for part in parts],
    }
    line = json.dumps(header, separators=(",", ":"), allow_nan=True).encode()
    return b"".join((PACK_MAGIC, line, b"\n", *(part.payload for part in parts)))


def is_pack(body: bytes) -> bool:
    return body.startswith(PACK_MAGIC)


def parts_in(body: bytes) -> int:
    """How many messages a stored body holds (a pack's parts, else 1), from the pack's
    header line alone."""
    if not body.startswith(PACK_MAGIC):
        return 1
    end = body.find(b"\n", len(PACK_MAGIC))
    try:
        ids = json.loads(body[len(PACK_MAGIC) : end if end >= 0 else None])["ids"]
    except (ValueError, KeyError, TypeError):
        return 1
    return len(ids) if isinstance(ids, list) and ids else 1


def decode_pack(body: bytes) -> list[Envelope]:
    """The envelopes of a pack, in their order. ``PackError`` when ``body`` is not a
    whole pack (a consumer then treats the broker message as one foreign message)."""
    if not body.startswith(PACK_MAGIC):
        raise PackError("not a pack: no SHOAL-PACK 1 header")
    start = len(PACK_MAGIC)
    end = body.find(b"\n", start)
    if end < 0:
        raise PackError("a pack header without its end of line")
    try:
        header = json.loads(body[start:end])
        kind = _KINDS[header["kind"]]
        partition, project, gateway = header["partition"], header["project"], header["gateway"]
        ids, sequences, times, sizes = (
            header["ids"],
            header["sequences"],
            header["received_at"],
            header["sizes"],
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise PackError(f"a pack header that does not parse: {exc}") from None
    if not (
        isinstance(partition, int)
        and isinstance(project, str)
        and isinstance(gateway, str)
        and isinstance(ids, list)
        and len(ids) == len(sequences) == len(times) == len(sizes) > 0
        and all(isinstance(size, int) and size >= 0 for size in sizes)
        and all(isinstance(i, str) and i for i in ids)
        and all(isinstance(s, int) for s in sequences)
        and all(isinstance(t, int | float) for t in times)
    ):
        raise PackError("a pack header with missing or mistyped fields")
    at = end + 1
    if at + sum(sizes) != len(body):
        raise PackError(f"a pack of {len(body) - at} payload bytes whose header names {sum(sizes)}")
    envelopes: list[Envelope] = []
    for message_id, sequence, received_at, size in zip(ids, sequences, times, sizes, strict=True):
        envelopes.append(
            Envelope(
                message_id=message_id,
                project_id=project,
                partition=partition,
                gateway_id=gateway,
                sequence=sequence,
                received_at=float(received_at),
                payload=body[at : at + size],
                kind=kind,
            )
        )
        at += size
    return envelopes
