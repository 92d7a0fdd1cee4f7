"""What the gateway does to a request body before publishing: parse, validate, stamp.

Pure: the caller passes the clock reading, the message ids and the first sequence number.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from core.errors import ShoalError
from core.messages import Envelope, MessageKind, is_valid_project_id
from core.partitioning import partition_for

__all__ = [
    "LANDABLE_SINCE",
    "LANDABLE_UNTIL",
    "IngestLimits",
    "InvalidRequestError",
    "announcement",
    "parse_body",
    "stamp",
    "unprocessable",
]


# The landed table dates every row by the UTC day of received_at (years 1..9999): a
# message outside it (a record from another producer) would fail every batch it is in.
LANDABLE_SINCE = -62_135_596_800.0  # 0001-01-01T00:00:00Z
LANDABLE_UNTIL = 253_402_300_800.0  # 10000-01-01T00:00:00Z


class InvalidRequestError(ShoalError, ValueError):
    """The request is malformed; nothing of it was accepted. ``status`` is the HTTP answer."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class IngestLimits:
    max_body_bytes: int = 4 * 1024 * 1024
    max_message_bytes: int = 256 * 1024
    max_messages: int = 10_000


def parse_body(body: bytes, limits: IngestLimits) -> list[bytes]:
    """Split a body into messages: one JSON object, or NDJSON (one JSON object per line).

    Every message must be a JSON object within the size limit; blank lines are skipped.
    Each message is returned as the exact bytes the device sent (no re-encoding).
    Raises ``InvalidRequestError`` (413 for size limits, 400 otherwise) naming the line.
    """
    if len(body) > limits.max_body_bytes:
        raise InvalidRequestError(
            f"body is {len(body)} bytes; the limit is {limits.max_body_bytes}", status=413
        )
    lines = [line.strip() for line in body.split(b"\n")]
    messages = [line for line in lines if line]
    if not messages:
        raise InvalidRequestError("empty body: send one JSON object or NDJSON lines")
    if len(messages) > 1 and _is_one_json_document(body):
        messages = [body.strip()]
    if len(messages) > limits.max_messages:
        raise InvalidRequestError(
            f"{len(messages)} messages in one request; the limit is {limits.max_messages}",
            status=413,
        )
    for number, message in enumerate(messages, start=1):
        if len(message) > limits.max_message_bytes:
            raise InvalidRequestError(
                f"message {number} is {len(message)} bytes; the limit is "
                f"{limits.max_message_bytes}",
                status=413,
            )
        try:
            value = json.loads(message)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidRequestError(f"message {number} is not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise InvalidRequestError(
                f"message {number} is a JSON {type(value).__name__}; expected an object"
            )
    return messages


def _is_one_json_document(body: bytes) -> bool:
    """A pretty-printed single object spans lines but is one message, not NDJSON."""
    try:
        return isinstance(json.loads(body), dict)
    except (ValueError, UnicodeDecodeError):
        return False


def stamp(
    project_id: str,
    payloads: Sequence[bytes],
    *,
    gateway_id: str,
    first_sequence: int,
    message_ids: Sequence[str],
    received_at: float,
    partitions: int,
) -> list[Envelope]:
    """Envelopes for one request: consecutive sequence numbers from ``first_sequence``."""
    if not is_valid_project_id(project_id):
        raise InvalidRequestError(
            f"project id {project_id!r} must match ^[A-Za-z0-9_-]{{1,64}}$ (one subject token)"
        )
    if len(message_ids) != len(payloads):
        raise ValueError("one message id per payload is required")
    partition = partition_for(project_id, partitions)
    return [
        Envelope(
            message_id=message_id,
            project_id=project_id,
            partition=partition,
            gateway_id=gateway_id,
            sequence=first_sequence + offset,
            received_at=received_at,
            payload=payload,
            kind=MessageKind.DATA,
        )
        for offset, (payload, message_id) in enumerate(zip(payloads, message_ids, strict=True))
    ]


def announcement(
    project_id: str, *, gateway_id: str, message_id: str, received_at: float, partitions: int
) -> Envelope:
    """The reference handshake: the first message of a project on a partition says it exists.

    Sequence 0 keeps announcements out of the per-project data sequence the audit checks.
    """
    return Envelope(
        message_id=message_id,
        project_id=project_id,
        partition=partition_for(project_id, partitions),
        gateway_id=gateway_id,
        sequence=0,
        received_at=received_at,
        payload=b"{}",
        kind=MessageKind.ANNOUNCE,
    )


def unprocessable(envelope: Envelope, partition: int) -> str | None:
    """Why a message delivered on ``partition`` can never be processed (it then goes to
    the dead letters at once, since retrying cannot help), or None when it can be.

    Only the message itself counts here: a broken store or disk is never a reason.
    """
    if not is_valid_project_id(envelope.project_id):
        return f"project id {envelope.project_id!r} is not one safe token"
    if envelope.partition != partition:
        return f"it names partition {envelope.partition} but was stored on partition {partition}"
    if not LANDABLE_SINCE <= envelope.received_at < LANDABLE_UNTIL:  # False for NaN too
        return f"received_at {envelope.received_at!r} is not a time the landing table can date"
    return None
