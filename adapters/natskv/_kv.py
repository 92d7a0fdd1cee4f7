"""``NatsKvCoordinationStore``: the ``CoordinationStore`` port on a JetStream KV bucket.

A key ``a/b`` is the KV key ``k.a.b``; its revision is the stream sequence of its last
message, so update and delete compare it natively (``Nats-Expected-Last-Subject-
Sequence``); they read first, so that a deletion marker's revision is never taken for a
live key's.

Leases are records of their own, ``lease.{id}``, written with the lease's TTL (a per-key
TTL: whole seconds, rounded up), renewed by a revision-compared rewrite, ended by the
server when the TTL runs out (it leaves an expiry marker) or by ``revoke``. A key bound to
a lease carries its id in the ``Shoal-Lease`` header and is written in one atomic batch
(nats-server >= 2.12) whose first message, the binding ``bind.{id}.{key}``, compares the
lease record's revision: no key is ever written on a lease that ended. The bound keys of
an ended lease are deleted by whoever sees the end: ``revoke`` itself, and the sweeper
every open store runs (it follows ``lease.`` as the watch does: after each end it sees,
and after each listing, it deletes the keys still carrying the id of a lease that is no
longer live, then removes the bindings). So a key outlives its expired lease by the
server's expiry delay plus one sweep, and only while no store is open to sweep it.

The watch follows the bucket's stream (an ordered consumer) from the revision after the
last change it yielded; after a reconnect it resumes from there, unless the stream is
another one (deleted and made again) or ends below that revision (it lost writes): then a
``Resync``. Superseded values of one key (the bucket keeps one per key) are coalesced.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncGenerator

import anyio
import nats.errors
from anyio.abc import TaskStatus

from adapters._backoff import Backoff
from adapters._lease import check_ttl
from adapters._lifecycle import Lifecycle
from adapters.natskv._bucket import Bucket, is_tombstone
from adapters.natskv._settings import NatsKvSettings
from core.errors import LeaseLostError, RevisionConflictError, StoreUnavailableError
from core.keyspace import KeyChange, KeyValue, Listing, Resync, check_key, check_prefix

__all__ = ["NatsKvCoordinationStore"]

_log = logging.getLogger("shoal.adapters.natskv")
_DATA = "k."
_LEASES = "lease."
_BINDINGS = "bind."
_LEASE_HEADER = "Shoal-Lease"
_ATTEMPTS = 5  # a write retried while keep-alives or markers move a revision under it
_POLL = 1.0  # how often a watch waiting for a change checks for a reconnect (seconds)


def _kv_key(key: str) -> str:
    return _DATA + key.replace("/", ".")


def _port_key(kv_key: str) -> str:
    return kv_key.removeprefix(_DATA).replace(".", "/")


def _lease_key(lease: int) -> str:
    return f"{_LEASES}{lease}"


class NatsKvCoordinationStore(Lifecycle):
    """``async with`` connects (the bucket made or checked) and starts the lease sweeper;
    leaving stops it and closes the connection."""

    def __init__(self, settings: NatsKvSettings | None = None) -> None:
        self.settings = settings if settings is not None else NatsKvSettings()
        self._bucket = Bucket(self.settings)

    async def _connect(self) -> None:
        await self._bucket.open()
        await self._tasks.start(self._sweep_ended_leases)

    async def _disconnect(self) -> None:
        await self._bucket.close()

    # --- keys ------------------------------------------------------------------------------

    async def get(self, key: str) -> KeyValue | None:
        entry = await self._bucket.get(_kv_key(check_key(key)))
        return None if entry is None else KeyValue(key, entry.value, entry.revision)

    async def list_prefix(self, prefix: str) -> Listing:
        return _port_listing(await self._bucket.listing(_kv_key(check_prefix(prefix))))

    async def create(self, key: str, value: bytes, *, lease: int | None = None) -> int:
        name = _kv_key(check_key(key))
        if lease is not None:
            return await self._write_on_lease(name, value, lease, expected=None)
        revision = await self._bucket.create(name, value)
        if revision is None:
            raise RevisionConflictError(f"NATS KV {key}: exists")
        return revision

    async def update(
        self, key: str, value: bytes, *, revision: int, lease: int | None = None
    ) -> int:
        name = _kv_key(check_key(key))
        if lease is not None:
            return await self._write_on_lease(name, value, lease, expected=revision)
        await self._expect(name, revision)
        written = await self._bucket.publish(name, value, last=revision)
        if written is None:
            raise RevisionConflictError(f"NATS KV {key}: not at revision {revision}")
        return written

    async def delete(self, key: str, *, revision: int) -> int:
        name = _kv_key(check_key(key))
        await self._expect(name, revision)
        deleted = await self._bucket.delete(name, last=revision)
        if deleted is None:
            raise RevisionConflictError(f"NATS KV {key}: not at revision {revision}")
        return deleted

    async def _expect(self, name: str, revision: int) -> None:
        """``RevisionConflictError`` unless ``name`` holds a value written at ``revision``."""
        entry = await self._bucket.get(name)
        if entry is None or entry.revision != revision:
            raise RevisionConflictError(f"NATS KV {name}: not a value at revision {revision}")

    async def _write_on_lease(
        self, name: str, value: bytes, lease: int, *, expected: int | None
    ) -> int:
        """Write ``name`` bound to ``lease`` while the lease record keeps the revision read
        (module doc): absent when ``expected`` is None, else at revision ``expected``."""
        for _ in range(_ATTEMPTS):
            record = await self._bucket.get(_lease_key(lease))
            if record is None:
                raise LeaseLostError(f"NATS KV lease {lease} expired or was revoked")
            current, last = await self._bucket.latest(name)
            if (current is not None) if expected is None else (current is None or last != expected):
                raise RevisionConflictError(f"NATS KV {name}: not absent or at {expected}")
            written = await self._bucket.publish_fenced(
                name,
                value,
                last=last,
                fence=_lease_key(lease),
                fence_revision=record.revision,
                record=(f"{_BINDINGS}{lease}.{name.removeprefix(_DATA)}", b""),
                headers={_LEASE_HEADER: str(lease)},
            )
            if written is not None:
                return written
        raise StoreUnavailableError(f"NATS KV {name}: revisions kept moving ({_ATTEMPTS} tries)")

    # --- leases ----------------------------------------------------------------------------

    async def grant(self, ttl: float) -> int:
        check_ttl(ttl)
        for _ in range(_ATTEMPTS):
            lease = secrets.randbits(62) + 1
            if await self._bucket.create(_lease_key(lease), repr(ttl).encode(), ttl=ttl):
                return lease
        raise StoreUnavailableError(f"NATS KV: no free lease id in {_ATTEMPTS} tries")

    async def keep_alive(self, lease: int) -> None:
        name = _lease_key(lease)
        for _ in range(_ATTEMPTS):
            record = await self._bucket.get(name)
            if record is None:
                raise LeaseLostError(f"NATS KV lease {lease} expired or was revoked")
            ttl = float(record.value)
            if await self._bucket.publish(name, record.value, last=record.revision, ttl=ttl):
                return
        raise StoreUnavailableError(f"NATS KV {name}: its revision kept moving")

    async def revoke(self, lease: int) -> None:
        if await self._bucket.get(_lease_key(lease)) is not None:
            await self._bucket.delete(_lease_key(lease))
        await self._delete_bound_keys(lease)

    async def _delete_bound_keys(self, lease: int) -> None:
        """Delete the keys that still carry ``lease`` (one rewritten since is not its own any
        more), then the bindings."""
        bindings = await self._bucket.listing(f"{_BINDINGS}{lease}.")
        for binding in bindings.entries:
            name = _DATA + binding.key.removeprefix(f"{_BINDINGS}{lease}.")
            entry = await self._bucket.get(name)
            if entry is not None and entry.headers.get(_LEASE_HEADER) == str(lease):
                await self._bucket.delete(name, last=entry.revision)  # None: rewritten since
        await self._bucket.purge_prefix(f"{_BINDINGS}{lease}.")

    async def _delete_keys_of_ended_leases(self) -> None:
        bindings, leases = (
            await self._bucket.listing(_BINDINGS),
            await self._bucket.listing(_LEASES),
        )
        bound = {int(entry.key.split(".")[1]) for entry in bindings.entries}
        live = {int(entry.key.removeprefix(_LEASES)) for entry in leases.entries}
        for lease in sorted(bound - live):
            # A listing may miss a record rewritten while it read; a direct read
            # of the record is the truth a live lease's keys must never be deleted against.
            if await self._bucket.get(_lease_key(lease)) is None:
                _log.info("NATS KV lease %d ended: deleting the keys bound to it", lease)
                await self._delete_bound_keys(lease)

    async def _sweep_ended_leases(self, *, task_status: TaskStatus[None]) -> None:
        """Sweep after each listing and each end of a lease the follower sees; the ends seen
        during a sweep make one sweep more."""
        due = anyio.Event()
        backoff = Backoff(self.settings.retry_interval, self.settings.max_retry_interval)

        async def follow() -> None:
            async for change in self._changes(_LEASES):
                if isinstance(change, Resync) or change.value is None:
                    due.set()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(follow)
            task_status.started()
            while True:
                await due.wait()
                due = anyio.Event()
                try:
                    await self._delete_keys_of_ended_leases()
                    backoff.reset()
                except StoreUnavailableError as exc:
                    _log.warning("NATS KV lease sweeper: %s; sweeping again", exc)
                    due.set()
                    await backoff.sleep()

    # --- watch -----------------------------------------------------------------------------

    async def watch(
        self, prefix: str, *, after: int | None = None
    ) -> AsyncGenerator[KeyChange | Resync, None]:
        async for change in self._changes(_kv_key(check_prefix(prefix)), after):
            if isinstance(change, Resync):
                yield Resync(_port_listing(change.listing))
            else:
                yield KeyChange(_port_key(change.key), change.value, change.revision)

    async def _changes(
        self, prefix: str, after: int | None = None
    ) -> AsyncGenerator[KeyChange | Resync, None]:
        """The port's watch of the bucket's keys under ``prefix`` (ending with a dot)."""
        bucket, settings = self._bucket, self.settings
        backoff = Backoff(settings.retry_interval, settings.max_retry_interval)
        revision = after
        stream: str | None = None  # which stream the revisions are of
        while True:
            generation = bucket.generation
            try:
                if revision is None:
                    listing = await bucket.listing(prefix)
                    revision = listing.revision
                    yield Resync(listing)
                created, last = await bucket.history()
                if created != (stream or created) or last < revision:
                    _log.info("NATS KV watch %s: history since %d lost, listing", prefix, revision)
                    stream, revision = created, None
                    continue
                stream = created
                subscription = await bucket.follow(prefix, revision)
            except StoreUnavailableError as exc:
                if bucket.closed:
                    raise
                _log.warning("NATS KV watch %s: %s; retrying", prefix, exc)
                await backoff.sleep()
                continue
            try:
                # the ordered consumer may be gone with a restarted server: follow anew
                while bucket.generation == generation:
                    try:
                        message = await subscription.next_msg(timeout=_POLL)
                    except nats.errors.TimeoutError:
                        continue
                    sequence = message.metadata.sequence.stream
                    if sequence > revision:
                        revision = sequence
                        value = None if is_tombstone(message.headers) else message.data
                        yield KeyChange(bucket.key_of(message.subject), value, sequence)
                        backoff.reset()
            except nats.errors.Error as exc:
                if bucket.closed:
                    raise StoreUnavailableError(f"NATS KV watch {prefix}: closed") from exc
                _log.warning("NATS KV watch %s: %r; resuming after %d", prefix, exc, revision)
                await backoff.sleep()
            finally:
                with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                    try:
                        await subscription.unsubscribe()
                    except nats.errors.Error as exc:
                        _log.debug("NATS KV watch %s: unsubscribing: %r", prefix, exc)


def _port_listing(listing: Listing) -> Listing:
    entries = (KeyValue(_port_key(e.key), e.value, e.revision) for e in listing.entries)
    return Listing(tuple(sorted(entries, key=lambda entry: entry.key)), listing.revision)
