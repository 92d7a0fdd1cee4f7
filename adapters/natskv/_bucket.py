"""``Bucket``: one NATS connection and the coordination bucket, with the few operations the
adapters need, each bounded by ``call_timeout`` (``StoreUnavailableError`` past it or when
NATS fails).

- reads return live entries only: a delete or purge marker (``KV-Operation``), or a
  server-placed expiry marker (``Nats-Marker-Reason: MaxAge``, left when a key's TTL ran
  out), is "no key" (nats-py's ``get`` takes the latter for a value with no data);
- ``create`` is create-if-absent, also over a marker (a plain ``last=0`` is refused while
  the marker is stored: it compares against the marker's revision instead);
- ``publish`` and ``delete`` compare the key's revision when given one (``Nats-Expected-
  Last-Subject-Sequence``); a delete is a purge marker that stays until the key is written
  again. Not one with a TTL: on a file stream of one replica, nats-server revives a value
  removed by a purge (or a TTL) after an unclean shutdown once no marker shadows it any
  more (nats-io/nats-server#8505, open on 2.15.1; a member that left came back after a
  kill -9 in the fault matrix), so the marker must outlive the shutdown. Server-placed expiry
  markers live ``marker_ttl`` (a day by default) for the same reason;
- ``publish_fenced`` writes a key only while another key (the leader's) keeps the revision
  the caller checked: one atomic batch (nats-server >= 2.12, ``allow_atomic`` on the
  bucket's stream) whose first message compares the fence key's revision
  (``Nats-Expected-Last-Subject-Sequence-Subject``) and whose second compares the key's own,
  so a leader deposed after its check cannot write (etcd does it in one transaction);
- ``listing`` reads every live key under a prefix (a KV watcher: last value per subject),
  ``follow`` every message under it from a revision on (an ordered consumer).

TTLs are whole seconds on the wire (``Nats-TTL``): rounded up, so the server never ends a
key before the client-side deadline of the lease that wrote it.
"""

from __future__ import annotations

import json
import logging
import math
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import nats.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js import api as js_api
from nats.js.errors import APIError, NotFoundError
from nats.js.kv import KeyValue as NatsKeyValue

from adapters._nats_connect import close_client, connect, describe
from adapters._nats_durability import check_server_fsync, check_stream
from adapters.natskv._settings import NatsKvSettings
from core.errors import StoreUnavailableError
from core.keyspace import KeyValue, Listing
from core.server_floors import NATS_ATOMIC_BATCH, NATS_KILL_SAFE, NATS_MESSAGE_TTL

__all__ = ["Bucket", "Entry", "is_tombstone"]

_log = logging.getLogger("shoal.adapters.natskv")
T = TypeVar("T")

_WRONG_LAST_SEQUENCE = (10071, 10164)
_KV_OP = "KV-Operation"
_MARKER_REASON = "Nats-Marker-Reason"
_EXPECTED_LAST = "Nats-Expected-Last-Subject-Sequence"
_EXPECTED_LAST_OF = "Nats-Expected-Last-Subject-Sequence-Subject"
_BATCH_ID = "Nats-Batch-Id"
_BATCH_SEQUENCE = "Nats-Batch-Sequence"
_BATCH_COMMIT = "Nats-Batch-Commit"


@dataclass(frozen=True, slots=True)
class Entry:
    key: str
    value: bytes
    revision: int
    headers: Mapping[str, str] = field(default_factory=dict)  # the KV-reserved ones too


def is_tombstone(headers: dict[str, str] | None) -> bool:
    """A delete, purge or server-placed (expiry) marker rather than a value."""
    if not headers:
        return False
    return headers.get(_KV_OP) in ("DEL", "PURGE") or _MARKER_REASON in headers


class Bucket:
    """Connect with ``open``; ``close`` once. Reconnects by itself (nats-py); every
    reconnect bumps ``generation``, so watchers follow anew."""

    def __init__(self, settings: NatsKvSettings) -> None:
        self.settings = settings
        self.name = settings.bucket_name
        self._stream = f"KV_{self.name}"
        self._subject = f"$KV.{self.name}."
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._kv: NatsKeyValue | None = None
        self._direct = False
        self._closed = False
        self.generation = 0

    @property
    def closed(self) -> bool:
        return self._closed

    # --- lifecycle -------------------------------------------------------------------------

    async def open(self) -> None:
        s, ns = self.settings, self.settings.connection()
        await check_server_fsync(
            ns.monitors, request_timeout=ns.request_timeout, require=ns.require_sync_always
        )
        self._nc = await connect(
            ns,
            name=f"{ns.name}-coordination",
            needs=(NATS_KILL_SAFE, NATS_MESSAGE_TTL, NATS_ATOMIC_BATCH),
            allow_reconnect=True,
            max_reconnect_attempts=-1,
            reconnect_time_wait=ns.reconnect_wait,
            error_cb=self._on_error,
            reconnected_cb=self._on_reconnect,
        )
        self._js = self._nc.jetstream(timeout=s.call_timeout)
        try:
            with anyio.fail_after(ns.connect_timeout):
                self._kv = await self._ensure_bucket(self._js)
        except TimeoutError:
            raise StoreUnavailableError(
                f"NATS at {describe(ns)}: bucket {self.name} not ready within "
                f"{ns.connect_timeout} s"
            ) from None
        self._direct = bool(getattr(self._kv, "_direct", False))

    async def _ensure_bucket(self, js: JetStreamContext) -> NatsKeyValue:
        """The bucket, created or brought up to per-key TTLs and atomic batches; then its
        stream as the server keeps it is checked (``check_stream``): storage, replicas, and
        the features that a server too old for them drops without an error."""
        s = self.settings
        try:
            info = await js.stream_info(self._stream)
        except NotFoundError:
            config = js_api.KeyValueConfig(
                bucket=self.name,
                description="shoal coordination: members, leader, assignment, holds, projects",
                history=s.history,
                storage=js_api.StorageType(s.storage),
                replicas=s.replicas,
                limit_marker_ttl=s.marker_ttl,
            )
            try:
                await js.create_key_value(config)
            except APIError as exc:  # created by another process meanwhile
                _log.debug("bucket %s: create raced: %s", self.name, exc)
            info = await js.stream_info(self._stream)
        stream = info.config
        if (
            not stream.allow_msg_ttl
            or not stream.allow_atomic
            or stream.subject_delete_marker_ttl != s.marker_ttl
        ):
            # nats-py cannot ask for atomic batches when it creates a bucket, and an older
            # bucket lacks the rest: without TTLs, TTL writes are refused and expirations
            # are invisible to watchers (or their markers expire too soon, module doc);
            # without atomic batches the fenced assignment write is refused. All three
            # can be changed in place.
            stream.allow_msg_ttl = True
            stream.allow_atomic = True
            stream.subject_delete_marker_ttl = s.marker_ttl
            await js.update_stream(stream)
            _log.info(
                "bucket %s: per-key TTLs, expiry markers and atomic batches switched on",
                self.name,
            )
        wanted = js_api.StreamConfig(
            name=self._stream,
            storage=js_api.StorageType(s.storage),
            num_replicas=s.replicas,
            allow_msg_ttl=True,
            allow_atomic=True,
        )
        check_stream(await js.stream_info(self._stream), wanted)
        return await js.key_value(self.name)

    async def close(self) -> None:
        self._closed = True
        nc, self._nc, self._js, self._kv = self._nc, None, None, None
        if nc is None or nc.is_closed:
            return
        await close_client(nc, self.settings.close_timeout)

    async def _on_error(self, exc: Exception) -> None:
        _log.debug("NATS (coordination %s): %r", self.name, exc)

    async def _on_reconnect(self) -> None:
        self.generation += 1
        _log.info("NATS (coordination %s): reconnected; watchers re-read", self.name)

    # --- calls ------------------------------------------------------------------------------

    def _opened(self) -> tuple[JetStreamContext, NatsKeyValue]:
        if self._js is None or self._kv is None:
            raise StoreUnavailableError("the NATS KV adapter is not open (use 'async with')")
        return self._js, self._kv

    async def _call(self, what: str, call: Callable[[], Awaitable[T]], timeout: float | None) -> T:  # noqa: ASYNC109 (bounds the call)
        # a renewal passes the time its lease has left, which may be shorter
        limit = self.settings.call_timeout if timeout is None else timeout
        try:
            with anyio.fail_after(max(0.0, limit)):
                return await call()
        except TimeoutError as exc:
            raise StoreUnavailableError(
                f"NATS KV {self.name}: {what} not answered within {limit:g} s"
            ) from exc
        except nats.errors.Error as exc:
            if isinstance(exc, APIError) and exc.err_code in _WRONG_LAST_SEQUENCE:
                raise
            raise StoreUnavailableError(f"NATS KV {self.name}: {what}: {exc!r}") from exc

    async def publish(
        self,
        key: str,
        value: bytes,
        *,
        last: int | None,
        ttl: float | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> int | None:
        """Write ``key`` (if its revision is still ``last``, when given): the new revision,
        or None when ``last`` did not match."""
        js, _ = self._opened()
        hdrs = dict(headers or {})
        if last is not None:
            hdrs[_EXPECTED_LAST] = str(last)
        options: dict[str, Any] = {"headers": hdrs or None}
        if ttl is not None:
            options["msg_ttl"] = max(1, math.ceil(ttl))  # whole seconds, never shorter
        try:
            ack = await self._call(
                f"write {key}",
                lambda: js.publish(self._subject + key, value, **options),
                timeout,
            )
        except APIError as exc:
            if exc.err_code in _WRONG_LAST_SEQUENCE:
                return None
            raise
        return int(ack.seq)

    async def latest(self, key: str) -> tuple[Entry | None, int]:
        """The live entry of ``key`` (None when absent, deleted or expired), and the
        revision its next write must compare with (0: no message)."""
        js, _ = self._opened()

        async def get() -> Any:
            try:
                return await js.get_msg(
                    self._stream, subject=self._subject + key, direct=self._direct
                )
            except NotFoundError:
                return None

        msg = await self._call(f"read {key}", get, None)
        if msg is None:
            return None, 0
        if is_tombstone(msg.headers):
            return None, int(msg.seq)
        return Entry(key, msg.data or b"", int(msg.seq), dict(msg.headers or {})), int(msg.seq)

    async def get(self, key: str) -> Entry | None:
        return (await self.latest(key))[0]

    async def create(self, key: str, value: bytes, *, ttl: float | None = None) -> int | None:
        """Write ``key`` if it has no live value: its revision, or None when it has one."""
        last = 0
        for _ in range(3):  # a marker placed or removed between the two calls: once more
            revision = await self.publish(key, value, last=last, ttl=ttl)
            if revision is not None:
                return revision
            entry, last = await self.latest(key)
            if entry is not None:
                return None
        return None

    async def publish_fenced(
        self,
        key: str,
        value: bytes,
        *,
        last: int,
        fence: str,
        fence_revision: int,
        record: tuple[str, bytes],
        headers: Mapping[str, str] | None = None,
    ) -> int | None:
        """``publish`` only while ``fence`` keeps ``fence_revision`` (module doc): None when
        either moved. The batch's first message writes ``record`` (a key nothing needs to
        read: a batch's comparisons ride on its writes); ``headers`` go with ``key``'s."""
        self._opened()
        nc = self._nc
        assert nc is not None  # open
        batch = uuid.uuid4().hex
        check = {
            _BATCH_ID: batch,
            _BATCH_SEQUENCE: "1",
            _EXPECTED_LAST: str(fence_revision),
            _EXPECTED_LAST_OF: self._subject + fence,
        }
        write = {
            **(headers or {}),
            _BATCH_ID: batch,
            _BATCH_SEQUENCE: "2",
            _BATCH_COMMIT: "1",
            _EXPECTED_LAST: str(last),
        }
        timeout = self.settings.call_timeout

        async def send() -> Any:
            opened = await nc.request(self._subject + record[0], record[1], timeout, headers=check)
            if opened.data:  # an empty answer means "batch open"; else an error is expected
                answer = json.loads(opened.data)
                if isinstance(answer, dict) and "error" in answer:
                    return answer
                raise StoreUnavailableError(
                    f"NATS KV {self.name}: write {key}: the batch was not opened "
                    f"({opened.data[:200]!r})"
                )
            committed = await nc.request(self._subject + key, value, timeout, headers=write)
            return json.loads(committed.data)

        answer = await self._call(f"write {key} fenced by {fence}", send, None)
        error = answer.get("error") if isinstance(answer, dict) else None
        if error is None:
            return int(answer["seq"])
        if error.get("err_code") in _WRONG_LAST_SEQUENCE:
            return None
        raise StoreUnavailableError(
            f"NATS KV {self.name}: write {key}: {error.get('description')} "
            f"(err_code {error.get('err_code')})"
        )

    async def delete(self, key: str, *, last: int | None = None) -> int | None:
        """``publish`` a purge marker (module doc)."""
        headers = {_KV_OP: "PURGE", "Nats-Rollup": "sub"}
        return await self.publish(key, b"", last=last, headers=headers)

    async def listing(self, prefix: str) -> Listing:
        """Every live key starting with ``prefix`` (ending with a dot) or equal to it, as
        of the highest revision among the keys' last messages, deletion markers included
        (0 when there is none): any later write to one of them would be its last message.

        Read with a KV watcher (last value per key), to the entry after which the server
        says nothing is pending. Not to nats-py's end-of-initial-values marker: it is put
        first when the consumer info shows nothing pending and nothing received yet, which
        also happens while the one value is in flight (a listing right after a write then
        came back empty)."""
        _, kv = self._opened()
        pattern = prefix + ">" if prefix.endswith(".") else prefix

        async def read() -> Listing:
            entries: dict[str, KeyValue] = {}
            revision = 0
            watcher = await kv.watch(pattern, inactive_threshold=self.settings.call_timeout)
            try:
                sub = watcher._sub
                assert sub is not None  # kv.watch subscribed it
                info = await sub.consumer_info()
                if info.num_pending == 0 and info.delivered.consumer_seq == 0:
                    return Listing((), 0)  # nothing stored, nothing in flight
                async for entry in watcher:
                    if entry is None:  # nats-py's marker (see above): not the end
                        continue
                    revision = max(revision, entry.revision or 0)
                    if entry.operation in ("DEL", "PURGE"):
                        entries.pop(entry.key, None)
                    else:
                        value = entry.value or b""
                        entries[entry.key] = KeyValue(entry.key, value, entry.revision or 0)
                    if not entry.delta:
                        break
            finally:
                await _stop_watcher(watcher)
            return Listing(tuple(entries[key] for key in sorted(entries)), revision)

        return await self._call(f"read {pattern}", read, None)

    async def follow(self, prefix: str, after: int) -> JetStreamContext.PushSubscription:
        """The raw messages under ``prefix`` (ending with a dot) from revision ``after + 1``
        on, deletion and expiry markers included, in order (an ordered consumer); the
        caller unsubscribes it."""
        js, _ = self._opened()
        config = js_api.ConsumerConfig(opt_start_seq=after + 1)

        async def subscribe() -> JetStreamContext.PushSubscription:
            return await js.subscribe(
                self._subject + prefix + ">",
                stream=self._stream,
                ordered_consumer=True,
                deliver_policy=js_api.DeliverPolicy.BY_START_SEQUENCE,
                config=config,
                inactive_threshold=self.settings.call_timeout,
            )

        return await self._call(f"follow {prefix}> after {after}", subscribe, None)

    def key_of(self, subject: str) -> str:
        """The key a message of ``follow`` was written to."""
        return subject.removeprefix(self._subject)

    async def purge_prefix(self, prefix: str) -> None:
        """Remove every message under ``prefix`` (ending with a dot), leaving no marker:
        for records nothing must see deleted."""
        (js, _), subject = self._opened(), self._subject + prefix + ">"
        await self._call(
            f"purge {prefix}>", lambda: js.purge_stream(self._stream, subject=subject), None
        )

    async def history(self) -> tuple[str, int]:
        """Which history the bucket holds (its stream's creation time: another after it was
        deleted and made again) and how far it goes (the last revision)."""
        js, _ = self._opened()
        info = await self._call("stream info", lambda: js.stream_info(self._stream), None)
        return str(info.created), int(info.state.last_seq)


async def _stop_watcher(watcher: NatsKeyValue.KeyWatcher) -> None:
    """Unsubscribe a watcher and delete its consumer, bounded and shielded; a connection
    already gone is fine. Deleted, not left to its inactivity threshold: every listing
    makes one, and with hundreds a second (a leader reading holds while handlers churn)
    nats-server 2.15.1 refused the next with "maximum consumers limit reached" at 1,000
    on the stream."""
    sub = watcher._sub
    with anyio.CancelScope(shield=True), anyio.move_on_after(1):
        try:
            await watcher.stop()  # type: ignore[no-untyped-call]
            if sub is not None:
                await sub._js.delete_consumer(sub._stream, sub._consumer)
        except nats.errors.Error as exc:  # NotFoundError included: it went already
            _log.debug("stopping a KV watcher: %r", exc)
