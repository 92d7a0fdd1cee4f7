"""The ports: one ``typing.Protocol`` per outside dependency.

Every port is async (anyio on asyncio). Adapters are async context managers: entering
connects and starts whatever background work the adapter owns; leaving stops it and
releases every resource, and is bounded in time. Nothing connects at import time.
Each port has real adapters, and an in-memory one where the services' in-process tests
need it (every port but DeadLetterQueue), all run through one contract suite per port in
``tests/contract``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from core.access import ApiKey
from core.coordination import Hold, Leader, Registration
from core.dead_letters import DeadLetter
from core.idempotency import IdempotentAnswer
from core.keyspace import KeyChange, KeyValue, Listing, Resync
from core.messages import Envelope, LandedRow, LedgerEntry
from core.model import Assignment, MemberId, MemberStats, Partition
from core.replay import StoredMessage, Window
from core.retry import DeadLetterReason
from core.routing import RouteTable
from core.table import DayFiles, LandedFile, LogKey

__all__ = [
    "AcceptanceLedger",
    "ApiKeyStore",
    "AssignmentStore",
    "CoordinationStore",
    "DeadLetterQueue",
    "Delivery",
    "Election",
    "History",
    "HoldStore",
    "IdempotencyStore",
    "LandedTable",
    "LeaderInfo",
    "Leadership",
    "LoadReports",
    "Membership",
    "MembershipLease",
    "ProjectRegistry",
    "RouteStore",
    "Scaler",
    "Sink",
    "Subscription",
    "TableHealth",
    "TableUpkeep",
    "Transport",
    "TransportFeatures",
]


class MembershipLease(Protocol):
    """One member's presence, kept alive in the background by the adapter that made it."""

    @property
    def member_id(self) -> MemberId: ...

    def is_lost(self, margin: float = 0.0) -> bool:
        """True once the lease is known lost, or its deadline (last renewal + TTL) is less
        than ``margin`` seconds away.

        The deadline check needs no I/O, so a process resumed after a pause sees the loss
        before it touches anything, even if no renewal has failed yet. A positive
        ``margin`` asks "will it still hold once I have done something that takes this
        long": the handler passes its write time plus clock slack before a file becomes
        visible.
        """
        ...

    async def wait_lost(self) -> None:
        """Return when the lease is lost (expired, revoked, or renewals failed past the TTL)."""
        ...

    async def leave(self) -> None:
        """Revoke the lease now, so watchers see the member leave at once. Idempotent."""
        ...


class Membership(Protocol):
    """Who is live: presence only. A member's load goes to ``LoadReports``, so a report
    never wakes the watchers of the member set (the leader's rebalance, the handlers)."""

    async def join(self, member_id: MemberId, ttl: float) -> MembershipLease:
        """Register ``member_id`` on a lease of ``ttl`` seconds, renewed every ttl/2 until left.

        Raises ``MemberExistsError`` when a live member already has this id,
        ``StoreUnavailableError`` when the store does not answer in time.
        """
        ...

    async def members(self) -> frozenset[MemberId]:
        """The live members. ``StoreUnavailableError`` when the store does not answer."""
        ...

    def watch(self) -> AsyncIterator[frozenset[MemberId]]:
        """Yield the live member set now and after every join and leave (or expiry).

        Survives a restart of the store: it resumes (or re-reads) and never skips a change
        silently. The caller cancels it to stop.
        """
        ...


class LoadReports(Protocol):
    """Telemetry: each live member's latest load report, read by the scaling loop and the
    dashboard. Every method raises ``StoreUnavailableError`` when the store does not
    answer in time."""

    async def report(self, lease: MembershipLease, stats: MemberStats) -> None:
        """Publish ``stats`` as the latest report of ``lease``'s member (a lease of the same
        backend's ``Membership``). The report goes when the member does: on leave, and at
        the latest one TTL after the member's last report or renewal once it is gone.
        Raises ``LeaseLostError`` when the lease is lost (nothing is written then)."""
        ...

    async def reports(self) -> Mapping[MemberId, MemberStats]:
        """The latest report of every member that reported and has not left since."""
        ...


class Leadership(Protocol):
    """Proof of being the leader. ``term`` is the fencing token: it only ever grows."""

    @property
    def term(self) -> int: ...

    @property
    def fence(self) -> Leader:
        """What a write in this leadership's name carries (``AssignmentStore.publish``): its
        id, term and incarnation. The incarnation tells two leaderships with one term apart
        where a store could hand a term out twice (Redis after losing recent writes: the
        leader key's random token; Kafka: the session's incarnation); empty where terms are
        unique (etcd revisions, the in-memory store)."""
        ...

    @property
    def leader_id(self) -> MemberId: ...

    def is_lost(self) -> bool: ...

    async def wait_lost(self) -> None: ...

    async def resign(self) -> None:
        """Give up leadership now so another candidate is elected at once. Idempotent."""
        ...


@dataclass(frozen=True, slots=True)
class LeaderInfo:
    leader_id: MemberId
    term: int


class Election(Protocol):
    async def campaign(self, candidate_id: MemberId, ttl: float) -> Leadership:
        """Block until ``candidate_id`` is the leader; the leadership lease lives ``ttl`` seconds
        past the last successful renewal. Cancelling the call withdraws the candidacy."""
        ...

    async def leader(self) -> LeaderInfo | None:
        """Who leads now, if anyone."""
        ...


class AssignmentStore(Protocol):
    """The published assignment. Every method raises ``StoreUnavailableError`` when the
    store does not answer in time (a write may or may not have been applied then)."""

    async def publish(self, assignment: Assignment, fence: Leader) -> None:
        """Store ``assignment`` if ``fence`` (``Leadership.fence``) is still the leadership in
        office, term and incarnation, and the stored generation is lower. Raises
        ``FencedError`` otherwise; stores nothing then."""
        ...

    async def current(self) -> Assignment | None:
        """The stored assignment, or None before the first publish."""
        ...

    def watch(self) -> AsyncIterator[Assignment]:
        """Yield the stored assignment (if any) and then every newer one, in order
        (``core.coordination.supersedes``: a higher generation, or a higher publishing term
        where a store that lost its data restarted the count); none is yielded twice."""
        ...


class HoldStore(Protocol):
    """The handoff lock of each partition: who processes it now. Every method raises
    ``StoreUnavailableError`` when the store does not answer in time."""

    async def holds(self) -> Mapping[Partition, Hold]:
        """Every partition currently held, with its holder."""
        ...

    def watch_holds(self) -> AsyncIterator[Mapping[Partition, Hold]]:
        """Yield the whole hold map now and after every change."""
        ...

    async def claim(
        self, partition: Partition, member_id: MemberId, generation: int, replacing: Hold | None
    ) -> bool:
        """Take the hold on ``partition`` if it is free (``replacing`` None) or still exactly
        ``replacing`` (a holder whose lease expired). False, and nothing changed, otherwise."""
        ...

    async def release(self, partition: Partition, member_id: MemberId) -> None:
        """Drop ``member_id``'s hold on ``partition``; no-op when it does not hold it."""
        ...


class ProjectRegistry(Protocol):
    """The projects announced on each partition, each registration living for a TTL
    unless refreshed, at most ``cap`` live ones per partition (``core.coordination``'s
    rules). Times are the caller's wall clock in seconds. Every method raises
    ``StoreUnavailableError`` when the store does not answer in time."""

    async def register(
        self,
        partition: Partition,
        project_ids: Sequence[str],
        *,
        now: float,
        ttl: float,
        cap: int,
    ) -> Registration:
        """Register or refresh each of ``project_ids`` on ``partition`` until ``now + ttl``
        (a refresh never shortens one). A project not live is refused when ``partition``
        already holds ``cap`` live registrations. Says which were added and refused.
        Registrations expired at ``now`` stop counting towards the cap at once; the store
        removes them later (etcd: their lease, about a quarter TTL after the expiry, or a
        sweep when the cap is reached; Redis: the partition's next registration, or its
        key's own expiry; Kafka: the partition's next registration, then compaction)."""
        ...

    async def projects(self, partition: Partition, *, now: float) -> frozenset[str]:
        """The projects registered on ``partition`` and not expired at ``now``."""
        ...


class CoordinationStore(Protocol):
    """Versioned keys, leases and prefix watches: what coordination stores differ in
    (Vitess's topo ``Conn``, Kubernetes' ``storage.Interface``). Keys, prefixes, revisions
    and the values below are ``core.keyspace``'s; ``ValueError`` for a key or prefix that
    breaks its grammar.

    Conditional writes raise ``RevisionConflictError`` when their condition does not hold
    (nothing changed then). A write on a lease raises ``LeaseLostError`` when the lease is
    no longer live (nothing written). A write states the lease of the key each time: a
    write without one unbinds the key from any lease. Every method raises
    ``StoreUnavailableError`` when the store does not answer in time; a write may or may
    not have been applied then (read again).
    """

    async def get(self, key: str) -> KeyValue | None:
        """The key with its revision, or None when absent."""
        ...

    async def list_prefix(self, prefix: str) -> Listing:
        """Every key under ``prefix``, read at one revision."""
        ...

    async def create(self, key: str, value: bytes, *, lease: int | None = None) -> int:
        """Store ``key`` if it is absent (bound to ``lease`` when given): its revision."""
        ...

    async def update(
        self, key: str, value: bytes, *, revision: int, lease: int | None = None
    ) -> int:
        """Store ``key`` if its revision is still ``revision``: the new revision."""
        ...

    async def delete(self, key: str, *, revision: int) -> int:
        """Delete ``key`` if its revision is still ``revision``: the deletion's revision."""
        ...

    async def grant(self, ttl: float) -> int:
        """A new lease of ``ttl`` seconds (``ValueError`` unless positive and finite); the
        store may round it up (etcd: whole seconds, 2 at least; NATS KV: whole seconds).
        It expires, by the store's clock, no sooner than ``ttl`` after the grant or its last
        ``keep_alive``; then the keys bound to it are deleted, each deletion a change that
        watchers see."""
        ...

    async def keep_alive(self, lease: int) -> None:
        """Restart ``lease``'s TTL. ``LeaseLostError`` when it expired or was revoked."""
        ...

    async def revoke(self, lease: int) -> None:
        """End ``lease`` now and delete the keys bound to it. Idempotent: a lease that is
        gone already is fine."""
        ...

    def watch(
        self, prefix: str, *, after: int | None = None
    ) -> AsyncGenerator[KeyChange | Resync, None]:
        """Yield the changes under ``prefix`` in revision order, each once: with ``after``
        None, first a ``Resync`` holding the listing now, then the changes after it; with
        ``after`` (a ``Listing.revision``), the changes after it. When the store cannot
        give every change since the last one yielded (compacted, lost, or a restart
        without its history), it yields a ``Resync`` with a fresh listing and goes on from
        there, so the watcher never misses a state; superseded writes of one key may be
        coalesced into the last. Retries while the store is unreachable; the caller
        closes it to stop."""
        ...


class Delivery(Protocol):
    """One message handed to a consumer. It is settled by ``Subscription.ack`` (in bulk) or
    by ``dead_letter``; one left unsettled past the ack wait (or when its subscription
    closes) is redelivered with the next ``attempt``, without bound: the consumer applies
    the retry budget (``core.retry.deliveries_exhausted``) and dead-letters."""

    @property
    def envelope(self) -> Envelope: ...

    @property
    def attempt(self) -> int:
        """1 on first delivery, 2 on the first redelivery, and so on, counting only the
        message's own failures: a delivery that a subscription closed on purpose gave back
        (a handoff, a lost lease, a partition opened again) is excused and does not count
        (``core.retry.Excusals``); one whose consumer died without a close does."""
        ...

    @property
    def position(self) -> int:
        """The message's place in its partition's log (NATS stream sequence, Kafka
        offset): the same on every redelivery, higher for a later publish to the same
        partition. Messages published together may be stored as one pack
        (``core.packing``) and then share a position; the landed table settles each
        message at its position by its id."""
        ...

    async def dead_letter(self, reason: DeadLetterReason) -> None:
        """Store the message on the dead-letter path with ``reason`` and never redeliver
        it. Idempotent, and a no-op once the delivery was settled. ``PublishError`` or
        ``BrokerUnavailableError`` when the broker did not confirm (then nothing changed:
        it may be retried, or it is redelivered)."""
        ...


class Subscription(Protocol):
    @property
    def log_id(self) -> str:
        """Names the broker log the deliveries' positions belong to: the same for every
        subscription to this stream or topic, another on another cluster (NATS: stream
        name and creation time, kept by a restore from a backup; Kafka: cluster id and
        topic, kept by a re-created topic). A position may so be handed out again: a row
        of the landed table settles only its own message (``core.table``)."""
        ...

    @property
    def ack_wait(self) -> float:
        """Seconds a delivery may stay unsettled before it is redelivered: whoever holds
        deliveries longer must ``keep_alive`` them well within it."""
        ...

    async def fetch(self, max_messages: int, timeout: float) -> Sequence[Delivery]:  # noqa: ASYNC109 (the broker-side pull wait)
        """Up to ``max_messages`` deliveries; an empty sequence when none arrived in ``timeout``.
        ``PositionGoneError`` when the log no longer holds the subscription's position (the
        caller closes it and opens the partition again)."""
        ...

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        """Ack every one of ``deliveries`` (fetched from this subscription) in bulk: one
        round trip to the broker, not one per message. Deliveries already settled, or
        expired and redelivered since, are skipped. The parts of a pack are acked at the
        broker once every part is settled: an acked part whose pack is not may be
        delivered again (the landed table settles it). Raises ``BrokerUnavailableError`` (a
        ``TimeoutError``) when the broker did not confirm in time: then some may come back
        (at-least-once, never lost); ``FencedError`` when a newer ``open()`` of the
        partition superseded this subscription (nothing it settles undoes the newer one's
        acks)."""
        ...

    async def keep_alive(self, deliveries: Sequence[Delivery]) -> None:
        """Tell the broker these deliveries are still being worked on, so their ack
        deadline starts again instead of expiring into a redelivery (NATS's in-progress
        ack). Spends no delivery attempt. Best effort: never raises for a broker that is
        down (the deliveries then expire as usual)."""
        ...

    async def acked_below(self) -> int:
        """A position ``F`` such that every message of the partition below ``F`` is acked
        (or dead-lettered) at the broker, so none of them is delivered again; 0 when unknown.
        It may lag the broker, never lead it. ``BrokerUnavailableError`` when the broker
        did not answer in time."""
        ...

    async def close(self) -> None:
        """Stop fetching. Unacked deliveries are redelivered to the next subscriber, which
        sees them with the attempt they had: the close excuses what it gives back (when the
        broker does not confirm that in time, those deliveries count). Idempotent."""
        ...


@dataclass(frozen=True, slots=True)
class TransportFeatures:
    """What a transport can do beyond the ``Transport`` port, declared by its adapter class
    (``features``): each capability is None where it is built, else why it is not (shown to
    the user who asks for it).

    ``competing_consumers``: several subscribers of one position split its messages (the
    shared consumption mode). ``datacenters``: one cluster per datacenter behind
    ``SHOAL_CLUSTERS`` (multi-datacenter routing, topic migration).
    """

    name: str
    competing_consumers: str | None = None
    datacenters: str | None = None


class Transport(Protocol):
    @property
    def features(self) -> TransportFeatures:
        """What it can do beyond this port (its adapter class declares it)."""
        ...

    async def publish(self, envelopes: Sequence[Envelope]) -> None:
        """Return once the broker has durably stored every envelope (keyed by ``message_id``,
        so a retry with the same envelopes is a no-op). Envelopes that share a subject may
        be stored as one pack (``core.packing``). Raises ``PublishError`` naming how many
        were not stored."""
        ...

    async def open(self, partition: Partition, consumer_id: str) -> Subscription:
        """Subscribe to ``partition``; only one subscription per partition should be open.
        Raises ``BrokerUnavailableError`` when the broker refuses or does not answer."""
        ...

    async def backlog(self, partition: Partition) -> int:
        """Messages stored for ``partition`` and not yet acked (the lag). A pack
        (``core.packing``) is one stored message: NATS counts the stored messages times the
        parts of the oldest unacked one (an estimate when packs differ in size); Kafka
        counts records, a pack once, until every part is settled. Raises
        ``BrokerUnavailableError`` when the broker does not answer."""
        ...

    async def oldest_unacked(self, partition: Partition) -> float | None:
        """When the broker stored the oldest message of ``partition`` that is not acked yet
        (nor dead-lettered), in seconds since the epoch by the broker's clock (NATS: the
        stream message's time; Kafka: the record's timestamp); None when every stored
        message is acked. One bounded read: the caller turns it into an age with its own
        clock. Raises ``BrokerUnavailableError`` when the broker does not answer."""
        ...

    async def trim_landed(self, partitions: int) -> int:
        """Make room in a broker that keeps settled messages under a size cap and refuses
        new ones when full (NATS limits retention with ``max_bytes``): past its trim mark,
        drop the messages of ``partitions`` that every consumer has settled, never one
        that is not; the number dropped. 0 where settling deletes (a work queue) or the
        log's own retention decides (Kafka: it never refuses, it deletes by age and size).
        Raises ``BrokerUnavailableError`` when the broker does not answer."""
        ...

    async def reply_registration(self, partition: Partition, project_id: str, by: str) -> None:
        """Answer a project announcement (the reference's reg.response). Best effort."""
        ...


class DeadLetterQueue(Protocol):
    """The transport's dead-letter store, for operators (``shoal dlq``) and the audit."""

    async def letters(self) -> Sequence[DeadLetter]:
        """Every stored dead letter, oldest first. Raises ``BrokerUnavailableError`` when
        the broker does not answer."""
        ...

    async def replay(self, message_ids: Collection[str] | None) -> int:
        """Put the named letters (every one when None) back on their partitions, each
        message id once and under its own id, then remove them from the store; returns how
        many messages were put back. Raises ``UnknownDeadLetterError`` (nothing changed)
        when an id is not stored, ``PublishError`` when the broker did not confirm (what
        was confirmed is removed; the rest stays)."""
        ...

    async def purge(self, message_ids: Collection[str] | None) -> int:
        """Drop the named letters (every one when None); returns how many stored letters
        were dropped. Raises ``UnknownDeadLetterError`` (nothing changed) when an id is not
        stored."""
        ...


class History(Protocol):
    """The transport's stored messages, read again in log order (``shoal replay``),
    without touching any consumer's progress: nothing is acked, nothing redelivered."""

    def read(
        self, partition: Partition, window: Window, project_id: str | None = None
    ) -> AsyncIterator[StoredMessage]:
        """Yield the messages of ``partition`` inside ``window`` (``core.replay``), oldest
        first, only those of ``project_id`` when given. The iteration ends: at the end
        bound, else at the last message stored when it started. Raises
        ``NotReplayableError`` when the broker does not keep consumed messages,
        ``ValueError`` for a partition the transport does not have,
        ``BrokerUnavailableError`` when the broker does not answer in time."""
        ...


class Sink(Protocol):
    """Writes data files of the landing zone. A file it writes is not part of the table
    until a commit of the ``LandedTable`` adds it."""

    async def write(
        self, rows: Sequence[LandedRow], *, still_valid: Callable[[], bool] | None = None
    ) -> Sequence[LandedFile]:
        """Durably write ``rows`` under final names (one file per UTC date of
        ``received_at``) and return the files; only once they are durable.

        The data is written and synced first; ``still_valid`` is called right before the
        files get their final names, after the slow part: when it returns False nothing
        gets a final name and ``OwnershipLostError`` is raised. Raises ``OSError`` when the
        storage refuses; then no file is left."""
        ...

    async def discard(self, files: Sequence[LandedFile]) -> None:
        """Delete ``files`` (written by ``write`` and never committed). Missing files are
        fine. Raises ``OSError`` when the storage refuses."""
        ...


class LandedTable(Protocol):
    """The landing zone's table (Delta Lake, ``core.table``) as a writer sees it: a snapshot
    of it, read with ``refresh``, and commits planned on that snapshot. Storage errors raise
    ``OSError``. Not for concurrent use by several tasks: one per writer."""

    async def refresh(self) -> int:
        """Read the newest version of the table (creating the table if there is none yet)
        and make it the snapshot the other calls read and commit on; return its version."""
        ...

    def token(self, key: LogKey) -> int | None:
        """The app transaction version of ``key`` in the snapshot (``transaction_app_id``):
        the token of the last commit that landed rows of that log, None when none did."""
        ...

    async def settled(
        self, floors: Mapping[LogKey, int]
    ) -> Mapping[LogKey, Mapping[int, frozenset[str]]]:
        """For each log in ``floors``: the positions at or above its floor that rows of the
        snapshot were delivered at, each with the message ids of those rows."""
        ...

    async def commit(self, files: Sequence[LandedFile], tokens: Mapping[LogKey, int]) -> None:
        """Add ``files`` (written by a ``Sink``) in one commit on the snapshot, setting each
        log's app transaction to its token (``refresh`` to see the new version).
        ``CommitConflictError`` when another commit set one of those app
        transactions after the snapshot (nothing was committed by this call, unless an
        earlier attempt of it was: read the tokens back). ``OSError`` when the storage did
        not confirm: the commit may have landed."""
        ...

    async def holds(self, paths: Collection[str]) -> bool:
        """Whether every one of ``paths`` is a file of the snapshot."""
        ...


@dataclass(frozen=True, slots=True)
class TableHealth:
    """What the table's upkeep looks at: its version, its active data files (and per day,
    how many are below the compaction target), the size of its log, and the active files
    of the days it was asked to check that storage does not hold (``missing``: every
    read of the table fails on them)."""

    version: int
    files: int
    bytes: int
    rows: int
    log_files: int
    log_bytes: int
    days: tuple[DayFiles, ...]
    missing: tuple[str, ...] = ()


class TableUpkeep(Protocol):
    """The landing zone table's maintenance: compaction, checkpoints and log cleanup,
    removal of files no version names. Each call may run while writers commit: none of
    them conflicts with an append. Storage errors raise ``OSError``."""

    async def exists(self) -> bool:
        """Whether there is a table (no handler may have landed anything yet): the other
        calls need one."""
        ...

    async def health(self, small_file_bytes: int, check_days: Sequence[str] = ()) -> TableHealth:
        """The table as it is now; ``DayFiles.small`` counts files below
        ``small_file_bytes``; ``missing`` lists the active files of ``check_days`` that
        storage does not hold."""
        ...

    async def compact(self, days: Sequence[str], target_bytes: int) -> tuple[int, int]:
        """Rewrite the small files of each ``date`` partition in ``days`` into files of
        about ``target_bytes``, in one commit: (files removed, files added). Raises
        ``CommitConflictError``, nothing changed, when another compaction committed after
        the snapshot this one read: of two at once, one commits. It never deletes a file
        a committed version names: after an error it deletes its files only once the
        table, read back, shows its commit did not land."""
        ...

    async def missing(self) -> tuple[int, list[str]]:
        """The newest version, and every active file of it that storage does not hold."""
        ...

    async def repair(self, version: int) -> tuple[list[str], list[str]]:
        """Undo ``version``, a rewrite (``core.table.plan_repair``), in one commit: (files
        restored, files removed). ``ValueError``, nothing changed, when it cannot be
        undone without losing or duplicating rows."""
        ...

    async def checkpoint(self) -> int:
        """Write a checkpoint of the newest version and remove the log entries older than
        the table's log retention that it covers: how many log files were removed."""
        ...

    async def vacuum(
        self, retention_hours: float, *, dry_run: bool = False, enforce: bool = True
    ) -> list[str]:
        """Delete files of the table's folder that no version names any more (compacted
        away, or written for a commit that never landed) and that are older than
        ``retention_hours``: the paths deleted (with ``dry_run``: to be deleted).
        ``ValueError``, nothing deleted, when another table lives inside this one's folder,
        or (``enforce``) when the retention is not above the table's log retention."""
        ...


class AcceptanceLedger(Protocol):
    async def record(self, entry: LedgerEntry) -> None:
        """Append ``entry`` before the gateway answers; it reaches the OS at once and the
        disk within about a second (and at exit). Raises ``OSError`` when it cannot."""
        ...


class ApiKeyStore(Protocol):
    """The gateway's API keys, stored hashed (``core.access``)."""

    async def keys(self) -> Mapping[str, ApiKey]:
        """Every key, revoked ones too, by key id. Cheap enough to ask on every request;
        a change made by another process shows from the next call.
        Raises ``OSError`` (or ``ValueError`` for a malformed store) when the store cannot
        be read at all; after one good read, a bad one keeps the last good keys."""
        ...

    async def add(self, key: ApiKey) -> None:
        """Store a new key; ``ValueError`` when its id is taken (nothing changes)."""
        ...

    async def revoke(self, key_id: str, at: float) -> ApiKey:
        """Mark the key revoked at ``at`` (a key revoked before keeps its time) and return
        it; ``KeyError`` for an unknown id."""
        ...


class IdempotencyStore(Protocol):
    """What the gateways answered to requests with an ``Idempotency-Key``, shared by every
    gateway process and kept ``window`` seconds (the adapter's setting) after each answer's
    ``accepted_at``. Records are looked up by (project, key digest); a later ``remember``
    of the same scope replaces the earlier one."""

    async def recall(self, project_id: str, key_digest: str) -> IdempotentAnswer | None:
        """The answer remembered for the scope within the window (including one another
        gateway remembered before this call started), or None. Raises
        ``StoreUnavailableError`` when the store does not answer in time."""
        ...

    async def remember(self, answer: IdempotentAnswer) -> None:
        """Store ``answer`` durably before returning. Raises ``StoreUnavailableError`` when
        the store does not confirm in time (it may still be stored)."""
        ...


class Scaler(Protocol):
    """The handler pool's size (a Deployment's replicas, or local processes)."""

    async def replicas(self) -> int:
        """How many handlers run now (Kubernetes: the desired count). ``TimeoutError``
        when the platform does not answer in time."""
        ...

    async def scale_to(self, replicas: int) -> None:
        """Ask for ``replicas`` handlers and return without waiting for them (``ValueError``
        below 0). ``TimeoutError`` when the platform does not answer in time."""
        ...


class RouteStore(Protocol):
    """The route table in force (``core.routing``), shared by every gateway, handler and
    ``shoal migrate``, in every cluster. Every method raises ``OSError`` (or ``ValueError``
    for a malformed store) when the store cannot be read."""

    async def current(self) -> RouteTable | None:
        """The stored table; None before the first ``put`` (the default table applies)."""
        ...

    async def put(self, table: RouteTable) -> None:
        """Store ``table`` if it follows the stored one: its version is the stored
        version + 1 (1 when none is stored). Raises ``RouteConflictError`` otherwise; nothing
        changes then. The caller validates the table (``core.routing.validate_table``)."""
        ...

    def watch(self) -> AsyncIterator[RouteTable | None]:
        """Yield the stored table now and every newer one once seen (a file store polls:
        within its poll interval). Versions only grow; none is yielded twice. A read that
        fails after the first is logged and retried, keeping the last good table."""
        ...
