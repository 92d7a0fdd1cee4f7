"""Idempotent ingest: the rules behind the ``Idempotency-Key`` request header.

Pure: no clock, no I/O. A request that names a key gets an identity derived from the
project, the key and the messages it carries (their fingerprint), not from the gateway
process that serves it: the series id (the envelopes' ``gateway_id``), sequences 1..n
and the message ids are the same in every gateway process, before and after a restart.
A retry re-publishes nothing new: the gateway answers it from the ``IdempotencyStore``
(``IdempotentAnswer``) and, past that, the brokers drop a message id they already hold
within their duplicate windows.

Why the fingerprint is part of the identity (and not only checked): a key reused with
another body must never reuse message ids, or a broker that still remembers the first
ids would drop the new messages as duplicates while the gateway answers 202, and the
audit would see two message ids on one sequence of one series. With the fingerprint in
the identity, another body is another series with other ids; the store refuses it (422)
while it remembers the key, and once it has forgotten it lands as its own series.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass

from core.ingest import InvalidRequestError

__all__ = [
    "IDEMPOTENCY_HEADER",
    "KEY_PATTERN",
    "REPLAYED_HEADER",
    "SERIES_PREFIX",
    "IdempotentAnswer",
    "IdempotentIdentity",
    "check_key",
    "decode_answer",
    "encode_answer",
    "fingerprint",
    "first_answer",
    "identity",
    "is_expired",
    "key_digest",
    "scope",
]

IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
# 1..255 visible ASCII characters (no space, no control character).
KEY_PATTERN = re.compile(r"[\x21-\x7e]{1,255}")
SERIES_PREFIX = "idem-"
_SERIES_HEX = 20
_BASE_HEX = 24


def check_key(value: str) -> str:
    """``value`` when it is a valid idempotency key; ``InvalidRequestError`` (400) if not."""
    if KEY_PATTERN.fullmatch(value) is None:
        raise InvalidRequestError(
            f"{IDEMPOTENCY_HEADER} must be 1 to 255 visible ASCII characters "
            f"(got {len(value)} characters{_first_bad(value)})"
        )
    return value


def _first_bad(value: str) -> str:
    for at, char in enumerate(value):
        if not "\x21" <= char <= "\x7e":
            return f"; character {at + 1} is {char!r}"
    return ""


def _sha256(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:  # length-prefixed: no two part lists hash alike by concatenation
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


def key_digest(project_id: str, key: str) -> str:
    """The key's scope in the store: per project (64 hex characters)."""
    return _sha256(b"shoal-idempotency-key", project_id.encode(), key.encode())


def scope(project_id: str, digest: str) -> str:
    """The store's key for a (project, key digest): ``{project}.{digest}`` (a valid NATS KV
    key and Kafka record key: the project id is one safe token)."""
    return f"{project_id}.{digest}"


def fingerprint(payloads: Sequence[bytes]) -> str:
    """The messages a request carries, as one sha256 (64 hex characters): the same messages
    in the same order have the same fingerprint, however the body was framed or encoded."""
    return _sha256(b"shoal-idempotency-body", *payloads)


@dataclass(frozen=True, slots=True)
class IdempotentIdentity:
    """What a request with an idempotency key is stamped with, in any gateway process."""

    series_id: str  # the envelopes' gateway_id: a series of its own, sequences 1..n
    id_base: str  # message id i is f"{id_base}{i:08x}" (32 hex characters)

    def message_ids(self, count: int) -> list[str]:
        return [f"{self.id_base}{index:08x}" for index in range(count)]


def identity(project_id: str, key: str, body_fingerprint: str) -> IdempotentIdentity:
    """The deterministic identity of (project, key, messages)."""
    digest = _sha256(
        b"shoal-idempotency-identity",
        project_id.encode(),
        key.encode(),
        body_fingerprint.encode(),
    )
    return IdempotentIdentity(
        series_id=SERIES_PREFIX + digest[:_SERIES_HEX],
        id_base=digest[_SERIES_HEX : _SERIES_HEX + _BASE_HEX],
    )


@dataclass(frozen=True, slots=True)
class IdempotentAnswer:
    """What the gateway answered (202) to the first request with a key: enough to answer a
    retry the same way. ``accepted_at`` is the answering gateway's wall clock (seconds
    since the epoch); the record counts for ``window`` seconds after it."""

    project_id: str
    key_digest: str
    fingerprint: str
    series_id: str
    id_base: str
    partition: int
    count: int
    accepted_at: float

    @property
    def scope(self) -> str:
        return scope(self.project_id, self.key_digest)

    @property
    def message_ids(self) -> list[str]:
        return IdempotentIdentity(self.series_id, self.id_base).message_ids(self.count)

    def body(self) -> dict[str, object]:
        """The JSON answer of the original 202 (sequences 1..count of its series)."""
        return {
            "accepted": self.count,
            "gateway_id": self.series_id,
            "partition": self.partition,
            "first_sequence": 1,
            "last_sequence": self.count,
            "message_ids": self.message_ids,
        }


def is_expired(answer: IdempotentAnswer, now: float, window: float) -> bool:
    """True once ``window`` seconds passed since the answer (by the wall clock ``now``)."""
    return now >= answer.accepted_at + window


def first_answer(answers: Iterable[IdempotentAnswer]) -> IdempotentAnswer | None:
    """The answer a retry gets when several stores hold one for its scope (one per
    datacenter): the earliest ``accepted_at``, the one its first request was given; equal
    times are decided by the other fields, so every gateway picks the same one whatever
    order the stores answered in. None when there is none.

    Two answers differ when the key was used with two bodies while the datacenters could
    not see each other (each 202'd once); the retry of the later body is then a 422, as it
    would be with one store."""
    return min(answers, key=_answer_order, default=None)


def _answer_order(answer: IdempotentAnswer) -> tuple[float, tuple[object, ...]]:
    return answer.accepted_at, astuple(answer)


_FIELDS = (
    "project_id",
    "key_digest",
    "fingerprint",
    "series_id",
    "id_base",
    "partition",
    "count",
    "accepted_at",
)


def encode_answer(answer: IdempotentAnswer) -> bytes:
    """The stored form: one small JSON object (about 300 bytes, whatever ``count`` is)."""
    return json.dumps(
        {"v": 1, **{name: getattr(answer, name) for name in _FIELDS}},
        separators=(",", ":"),
    ).encode()


def decode_answer(data: bytes) -> IdempotentAnswer:
    """The answer ``encode_answer`` stored; ``ValueError`` when ``data`` is not one."""
    try:
        raw = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"not an idempotency record: {exc}") from None
    if not isinstance(raw, dict) or raw.get("v") != 1:
        raise ValueError("not an idempotency record (version 1)")
    try:
        answer = IdempotentAnswer(
            project_id=str(raw["project_id"]),
            key_digest=str(raw["key_digest"]),
            fingerprint=str(raw["fingerprint"]),
            series_id=str(raw["series_id"]),
            id_base=str(raw["id_base"]),
            partition=int(raw["partition"]),
            count=int(raw["count"]),
            accepted_at=float(raw["accepted_at"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"idempotency record without a valid field: {exc!r}") from None
    if answer.count < 1 or answer.partition < 0:
        raise ValueError("idempotency record with a count below 1 or a negative partition")
    return answer
