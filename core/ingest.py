"""What the gateway does to a request body before publishing: parse, validate, stamp.

Pure: the caller passes the clock reading, the message ids and the first sequence number.
"""

from __future__ import annotations

import json
import math
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from core.errors import ShoalError
from core.messages import Envelope, MessageKind, is_valid_project_id
from core.partitioning import partition_for

__all__ = [
    "ACCEPTED_CONTENT_TYPES",
    "ACCEPTED_ENCODINGS",
    "LANDABLE_SINCE",
    "LANDABLE_UNTIL",
    "IngestLimits",
    "InvalidRequestError",
    "announcement",
    "check_content_type",
    "content_coding",
    "declared_length",
    "gunzip",
    "parse_body",
    "reservation_for",
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
    max_body_bytes: int = 4 * 1024 * 1024  # as sent, and again once decompressed
    max_message_bytes: int = 256 * 1024
    max_messages: int = 10_000


# What a request body may be sent as. Anything JSON-shaped is read the same way (one
# object, an array of objects, or NDJSON); the form type is curl's default for -d.
ACCEPTED_CONTENT_TYPES = frozenset(
    {
        "application/json",
        "application/x-ndjson",
        "application/ndjson",
        "application/jsonl",
        "application/x-jsonlines",
        "text/plain",
        "application/x-www-form-urlencoded",
    }
)
ACCEPTED_ENCODINGS = ("identity", "gzip")


def check_content_type(value: str | None) -> None:
    """Refuse (415) a body type the gateway does not read; no header means JSON."""
    if value is None or not value.strip():
        return
    media = value.split(";", 1)[0].strip().lower()
    if media in ACCEPTED_CONTENT_TYPES or (
        media.startswith("application/") and media.endswith("+json")
    ):
        return
    raise InvalidRequestError(
        f"content type {media!r} is not read here; send JSON or NDJSON "
        f"({', '.join(sorted(ACCEPTED_CONTENT_TYPES))})",
        status=415,
    )


def content_coding(value: str | None) -> str | None:
    """The coding of a ``Content-Encoding`` header: ``"gzip"``, or None for none (identity
    is dropped). At most one gzip layer is read: a repeated coding (``gzip, gzip``) or gzip
    with another is refused (415) before the body is read, so the work of undoing a
    request is bounded by one inflation; so is any coding but gzip."""
    codings = [
        c.strip().lower()
        for c in (value or "").split(",")
        if c.strip().lower() not in ("", "identity")
    ]
    for coding in codings:
        if coding not in ACCEPTED_ENCODINGS:
            raise InvalidRequestError(
                f"content encoding {coding!r} is not read here; send gzip or none", status=415
            )
    if len(codings) > 1:
        raise InvalidRequestError(
            f"content encoding {', '.join(codings)!r} has {len(codings)} layers; "
            "one gzip layer at most is read here",
            status=415,
        )
    return codings[0] if codings else None


def declared_length(value: str | None) -> int | None:
    """A ``Content-Length`` header's number of bytes; None when there is none or it is not
    a plain decimal (the server's HTTP parser refuses such a request anyway)."""
    text = (value or "").strip()
    if not (text.isascii() and text.isdigit()):
        return None
    return int(text)


def reservation_for(declared: int | None, *, gzipped: bool, max_body_bytes: int) -> int:
    """The bytes one ingest request is counted for while it is in flight, from its headers
    alone: ``sent``, its body as sent (``declared``, its Content-Length; ``max_body_bytes``
    when it declares none, as a chunked body, or more: reading stops there), and twice
    what its messages may amount to, because the gateway holds them twice at every step
    (the body and its copy as it is read, the body and the messages parsed from it, the
    messages and the broker messages packed from them, until the broker confirmed):
    ``2 * sent``, or with its one gzip layer ``sent + 2 * max_body_bytes`` (decompression
    stops at the limit)."""
    sent = max_body_bytes if declared is None else min(declared, max_body_bytes)
    return sent + 2 * max_body_bytes if gzipped else 2 * sent


def gunzip(body: bytes, limit: int) -> bytes:
    """``body`` decompressed (one or more gzip members), refused with 413 as soon as the
    output passes ``limit`` bytes: a small body that inflates without bound (a zip bomb)
    costs at most ``limit`` bytes of memory."""
    out = bytearray()
    data = body
    while data:
        inflater = zlib.decompressobj(wbits=31)  # gzip framing only
        try:
            while data:
                out += inflater.decompress(data, limit + 1 - len(out))
                if len(out) > limit:
                    raise InvalidRequestError(
                        f"body is over {limit} bytes once decompressed; the limit is {limit}",
                        status=413,
                    )
                data = inflater.unconsumed_tail
                if inflater.eof:
                    break
        except zlib.error as exc:
            raise InvalidRequestError(f"body is not valid gzip: {exc}") from None
        if not inflater.eof:
            raise InvalidRequestError("body is not valid gzip: it ends inside a member")
        data = inflater.unused_data
    return bytes(out)


def parse_body(body: bytes, limits: IngestLimits) -> list[bytes]:
    """Split a body into messages: one JSON object, a JSON array of objects (a batch), or
    NDJSON (one JSON object per line; blank lines are skipped).

    Strict JSON: ``NaN``, ``Infinity``, numbers too large for a double and duplicate keys
    (at any depth) are refused; the body must be UTF-8. Each message is returned as the
    exact bytes the device sent (no re-encoding). Raises ``InvalidRequestError`` (413 for
    size limits, 400 otherwise) naming the message and the problem.
    """
    if len(body) > limits.max_body_bytes:
        raise InvalidRequestError(
            f"body is {len(body)} bytes; the limit is {limits.max_body_bytes}", status=413
        )
    values: list[object] | None = None  # an array's elements are parsed while split
    if body.lstrip()[:1] == b"[":
        elements = _array_elements(body)
        messages, values = [m for m, _ in elements], [v for _, v in elements]
    else:
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
        what = f"message {number}"
        value = values[number - 1] if values is not None else _strict_json(message, what)
        if not isinstance(value, dict):
            raise InvalidRequestError(
                f"message {number} is a JSON {type(value).__name__}; expected an object"
            )
    return messages


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    value = dict(pairs)
    if len(value) < len(pairs):  # rare: only then is the repeated key looked for
        keys = [key for key, _ in pairs]
        repeated = next(key for at, key in enumerate(keys) if key in keys[:at])
        raise ValueError(f"duplicate key {repeated!r}")
    return value


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of range")
    return value


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_STRICT = json.JSONDecoder(
    object_pairs_hook=_unique_keys, parse_constant=_no_constant, parse_float=_finite
)


def _strict_json(message: bytes, what: str) -> object:
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequestError(f"{what} is not UTF-8: {exc}") from None
    try:
        value = _STRICT.decode(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidRequestError(f"{what} is not valid JSON: {exc}") from None
    _refuse_lone_surrogates(text, value, what)
    return value


def _refuse_lone_surrogates(text: str, value: object, what: str) -> None:
    if _SURROGATE_ESCAPE.search(text):
        try:  # a pair is one character; a lone half is no character at all
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidRequestError(
                f"{what} is not valid JSON: a string holds a lone surrogate escape"
            ) from None


def _array_elements(body: bytes) -> list[tuple[bytes, object]]:
    """The elements of a body that is one JSON array, each as the exact bytes sent and
    its strictly parsed value."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequestError(f"body is not UTF-8: {exc}") from None
    ws = " \t\r\n"
    at = len(text) - len(text.lstrip(ws)) + 1  # past the "["
    elements: list[tuple[bytes, object]] = []
    while True:
        while at < len(text) and text[at] in ws:
            at += 1
        if at < len(text) and text[at] == "]" and not elements:
            at += 1
            break
        what = f"message {len(elements) + 1}"
        try:
            value, end = _STRICT.raw_decode(text, at)
        except (ValueError, RecursionError) as exc:
            raise InvalidRequestError(f"{what} of the array is not valid JSON: {exc}") from None
        piece = text[at:end]
        _refuse_lone_surrogates(piece, value, what)
        elements.append((piece.encode("utf-8"), value))
        at = end
        while at < len(text) and text[at] in ws:
            at += 1
        if at < len(text) and text[at] == ",":
            at += 1
            continue
        if at < len(text) and text[at] == "]":
            at += 1
            break
        raise InvalidRequestError(
            f"the array is not valid JSON: expected ',' or ']' at character {at}"
        )
    if text[at:].strip(ws):
        raise InvalidRequestError(f"the array is not valid JSON: extra data at character {at}")
    if not elements:
        raise InvalidRequestError("empty batch: the array has no messages")
    return elements


def _is_one_json_document(body: bytes) -> bool:
    """A pretty-printed single object spans lines but is one message, not NDJSON."""
    try:
        return isinstance(json.loads(body), dict)
    except (ValueError, UnicodeDecodeError, RecursionError):
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
    try:
        envelope.payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"its payload is not UTF-8 text ({exc.reason} at byte {exc.start})"
    return None
