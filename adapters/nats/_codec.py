"""Envelope <-> NATS message: the envelope's fields travel in headers, the body is the payload.

Headers (string values; free-text ids are percent-encoded so any string survives):

- ``Nats-Msg-Id``        message_id (JetStream drops a second publish inside the window)
- ``Shoal-Project``      project_id
- ``Shoal-Partition``    partition (decimal)
- ``Shoal-Gateway``      gateway_id
- ``Shoal-Sequence``     sequence (decimal)
- ``Shoal-Received-At``  received_at (``repr`` of the float: exact round trip)
- ``Shoal-Kind``         ``announce`` or ``data``
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
]

H_MSG_ID = "Nats-Msg-Id"
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
    return {
        H_MSG_ID: quote(envelope.message_id, safe=""),
        H_PROJECT: envelope.project_id,
        H_PARTITION: str(envelope.partition),
        H_GATEWAY: quote(envelope.gateway_id, safe=""),
        H_SEQUENCE: str(envelope.sequence),
        H_RECEIVED_AT: repr(float(envelope.received_at)),
        H_KIND: envelope.kind.value,
    }


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
