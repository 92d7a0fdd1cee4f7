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
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote, unquote

from adapters.nats._subjects import ParsedSubject, Subjects
from core.messages import Envelope, MessageKind, is_valid_project_id
from core.model import Partition

__all__ = [
    "H_DEAD_ATTEMPTS",
    "H_DEAD_REASON",
    "H_MSG_ID",
    "decode",
    "encode",
    "envelope_headers",
    "headers_deduplicated_as",
]

H_MSG_ID = "Nats-Msg-Id"
H_REPLAYED_ID = "Shoal-Msg-Id"
H_ENVELOPE = "Shoal-Envelope"
_ENVELOPE_VERSION = "v1"
_KINDS = {kind.value: kind for kind in MessageKind}
# The per-field headers of earlier versions (still decoded).
H_PROJECT = "Shoal-Project"
H_PARTITION = "Shoal-Partition"
H_GATEWAY = "Shoal-Gateway"
H_SEQUENCE = "Shoal-Sequence"
H_RECEIVED_AT = "Shoal-Received-At"
H_KIND = "Shoal-Kind"
H_DEAD_REASON = "Shoal-Dead-Reason"
H_DEAD_ATTEMPTS = "Shoal-Dead-Attempts"


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
            project_id=h[H_PROJECT],
            partition=int(h[H_PARTITION]),
            gateway_id=unquote(h[H_GATEWAY]),
            sequence=int(h[H_SEQUENCE]),
            received_at=float(h[H_RECEIVED_AT]),
            payload=payload,
            kind=MessageKind(h[H_KIND]),
        )
    except (KeyError, ValueError):
        pass
    partition: Partition = parsed.partition if parsed else -1
    return Envelope(
        message_id=unquote(h[H_MSG_ID]) if H_MSG_ID in h else fallback_id,
        project_id=(parsed.project_id if parsed else None) or h.get(H_PROJECT, ""),
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
