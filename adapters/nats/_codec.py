"""Envelope <-> NATS message: the envelope's fields travel in headers, the body is the payload.

Two headers (free-text ids are percent-encoded so any string survives):

- ``Nats-Msg-Id``     message_id (JetStream drops a second publish inside the window)
- ``Shoal-Msg-Id``    only on dead-letter copies and replays: the message_id, while
  ``Nats-Msg-Id`` names that one copy or replay (the message id alone would be dropped as a
  duplicate inside the window when a replayed message dies again)
- ``Shoal-Envelope``  ``v1 KIND PARTITION SEQUENCE RECEIVED_AT GATEWAY PROJECT``, separated
  by single spaces: kind ``announce`` or ``data``, partition and sequence in decimal,
  received_at the ``repr`` of the float (an exact round trip), the gateway id (possibly
  empty) and the project id (a safe subject token: never empty, no spaces).

One header rather than one per field: nats-py parses every header of every delivered
message in Python, character by character (measured: with seven it was the handler's
largest single cost). Messages stored by earlier versions, one ``Shoal-*`` header per field,
still decode.

A pack (``core.packing``: several envelopes of one publish sharing a subject) is one
message with ``Shoal-Pack: 1``, the pack's id in ``Nats-Msg-Id`` and ``encode_pack``'s
body; ``decode_all`` explodes it. A pack of one is a plain message.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from urllib.parse import quote, unquote

from adapters import _headers as shoal
from adapters.nats._subjects import ParsedSubject, Subjects
from core.messages import Envelope, MessageKind, is_valid_project_id
from core.model import Partition
from core.packing import PackError, decode_pack, encode_pack, pack_id

__all__ = [
    "H_MSG_ID",
    "decode",
    "decode_all",
    "encode",
    "encode_packed",
    "envelope_headers",
    "headers_deduplicated_as",
]

log = logging.getLogger("shoal.adapters.nats")

H_MSG_ID = "Nats-Msg-Id"
H_REPLAYED_ID = "Shoal-Msg-Id"
H_ENVELOPE = "Shoal-Envelope"
_ENVELOPE_VERSION = "v1"
_KINDS = {kind.value: kind for kind in MessageKind}


def encode(envelope: Envelope, subjects: Subjects) -> tuple[str, dict[str, str]]:
    """The subject and headers for ``envelope``; raises ``ValueError`` on an unsafe project_id."""
    if not is_valid_project_id(envelope.project_id):
        raise ValueError(f"project_id {envelope.project_id!r} is not one safe subject token")
    if envelope.partition < 0:
        raise ValueError(f"partition {envelope.partition} is negative")
    if not envelope.message_id:
        raise ValueError("message_id is empty")
    subject = subjects.for_kind(envelope.kind, envelope.partition, envelope.project_id)
    return subject, envelope_headers(envelope)


def encode_packed(
    parts: Sequence[Envelope], subjects: Subjects
) -> tuple[str, dict[str, str], bytes]:
    """The subject, headers and body of one stored message for ``parts`` (one pack of
    ``core.packing.packed``; a plain message when it holds one envelope); raises
    ``ValueError`` as ``encode`` does."""
    subject, headers = encode(parts[0], subjects)
    if len(parts) == 1:
        return subject, headers, parts[0].payload
    if not all(part.message_id for part in parts):
        raise ValueError("message_id is empty")
    return (
        subject,
        {H_MSG_ID: quote(pack_id(parts), safe=""), shoal.H_PACK: "1"},
        encode_pack(parts),
    )


def envelope_headers(envelope: Envelope) -> dict[str, str]:
    """The headers that carry ``envelope``'s fields (no validation)."""
    fields = (
        _ENVELOPE_VERSION,
        envelope.kind.value,
        str(envelope.partition),
        str(envelope.sequence),
        repr(float(envelope.received_at)),
        quote(envelope.gateway_id, safe=""),  # may be empty: never last (values are stripped)
        envelope.project_id,
    )
    return {H_MSG_ID: quote(envelope.message_id, safe=""), H_ENVELOPE: " ".join(fields)}


def headers_deduplicated_as(envelope: Envelope, dedupe_id: str) -> dict[str, str]:
    """``envelope``'s headers with ``dedupe_id`` as the id JetStream deduplicates on; the
    message id travels in ``Shoal-Msg-Id``."""
    headers = envelope_headers(envelope)
    headers[H_REPLAYED_ID] = headers[H_MSG_ID]
    headers[H_MSG_ID] = quote(dedupe_id, safe="")
    return headers


def decode_all(
    subject: str,
    headers: Mapping[str, str] | None,
    payload: bytes,
    parsed: ParsedSubject | None,
    *,
    fallback_id: str,
    fallback_time: float,
) -> list[Envelope]:
    """The envelopes of a stored message: a pack's parts, else the one ``decode`` reads.
    Never raises: a broken pack is one foreign message (which the handler dead-letters)."""
    if headers and shoal.H_PACK in headers:
        try:
            return decode_pack(payload)
        except PackError as exc:
            log.warning("a stored pack does not decode (%s): read as one message", exc)
    return [
        decode(
            subject, headers, payload, parsed, fallback_id=fallback_id, fallback_time=fallback_time
        )
    ]


def decode(
    subject: str,
    headers: Mapping[str, str] | None,
    payload: bytes,
    parsed: ParsedSubject | None,
    *,
    fallback_id: str,
    fallback_time: float,
) -> Envelope:
    """The envelope of a stored message. Never raises: a message published by something
    other than ``encode`` (missing or broken headers) gets its partition, project and kind
    from the subject, ``fallback_id`` as id, sequence 0 and ``fallback_time``."""
    h = headers or {}
    packed = h.get(H_ENVELOPE)
    if packed is not None:
        try:
            return _unpack(unquote(h.get(H_REPLAYED_ID) or h[H_MSG_ID]), packed, payload)
        except (KeyError, ValueError):
            pass
    try:
        return Envelope(
            message_id=unquote(h[H_MSG_ID]),
            project_id=h[shoal.H_PROJECT],
            partition=int(h[shoal.H_PARTITION]),
            gateway_id=unquote(h[shoal.H_GATEWAY]),
            sequence=int(h[shoal.H_SEQUENCE]),
            received_at=float(h[shoal.H_RECEIVED_AT]),
            payload=payload,
            kind=MessageKind(h[shoal.H_KIND]),
        )
    except (KeyError, ValueError):
        pass
    partition: Partition = parsed.partition if parsed else -1
    return Envelope(
        message_id=unquote(h[H_MSG_ID]) if H_MSG_ID in h else fallback_id,
        project_id=(parsed.project_id if parsed else None) or h.get(shoal.H_PROJECT, ""),
        partition=partition,
        gateway_id="",
        sequence=0,
        received_at=fallback_time,
        payload=payload,
        kind=parsed.kind if parsed else MessageKind.DATA,
    )


def _unpack(message_id: str, packed: str, payload: bytes) -> Envelope:
    version, kind, partition, sequence, received_at, gateway, project = packed.split(" ")
    if version != _ENVELOPE_VERSION or not project:
        raise ValueError(f"not a {_ENVELOPE_VERSION} envelope header: {packed!r}")
    return Envelope(
        message_id=message_id,
        project_id=project,
        partition=int(partition),
        gateway_id=unquote(gateway),
        sequence=int(sequence),
        received_at=float(received_at),
        payload=payload,
        kind=_KINDS[kind],
    )
