"""The handler's landing buffer: rows of every owned partition gather in one batch that
rolls into one file by row count, size or age (``core.landing``); the file is committed to
the landed table (``core.table``) and only then are the batch's messages acked, in bulk.

Exactly-once (``core.table``): right before writing, the batch is planned against the
table's newest version. For each log (partition) of the batch the lander keeps which
positions are settled; when the log's app transaction token in the table is not the one
its own last commit set (a partition just claimed, or another writer landed rows of it
since, or the broker's ack floor went down), it rebuilds that view from the rows at or
above the broker's ack floor, with their message ids. Messages any of whose places is
settled are left out of the file and only acked; a new message at a position a row holds
(a log that handed it out again: restored, re-created) lands. The commit sets
a fresh token on every log it settles, and Delta refuses it if another commit set one of
them after the version it was planned on: a zombie's or a racing peer's commit is refused
by the table itself. The lander then reads the tokens back: its own token means its
commit landed after all (a lost response); otherwise it discards its files, which no
version names, and plans the batch again.

At most two batches exist: one filling, one landing. While the landing one is still being
written (a slow or failing disk) and the filling one is full, partition workers stop
fetching (``wait_for_room``): memory stays bounded and nothing is nak'd. Buffered messages
are kept alive with in-progress acks, so a batch may wait out a long storage outage
without spending any delivery attempt; only the lease bounds it.

Ownership is checked twice per batch, each time with ``ownership_margin`` seconds to
spare on the lease: right before the file gets its final name (inside the sink, after the
slow write) and right before the ack. A handler paused past its lease writes and acks
nothing more; its messages are redelivered to the partition's next owner. These checks
save work; exactly-once does not rest on them but on the commit rule above.

After acking, the lander asks the broker how far each of the batch's partitions is acked
(``acked_below``, one round every ``floor_interval`` seconds, off the landing path) and
forgets the settled positions below that floor.
"""

from __future__ import annotations

import logging
import secrets
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import anyio

from core.errors import CommitConflictError, OwnershipLostError
from core.landing import RollPolicy, RollReason, roll_reason
from core.messages import LandedRow
from core.model import Partition
from core.ports import Delivery, LandedTable, MembershipLease, Sink, Subscription
from core.retry import retry_delay
from core.table import (
    LandedFile,
    LandingPlan,
    LogKey,
    Settled,
    commit_landed,
    log_key,
    plan_landing,
)
from services.common.logs import fields
from services.handler.metrics import HandlerMetrics

__all__ = ["Lander", "LandingOptions"]

log = logging.getLogger("shoal.handler")

_ROW_OVERHEAD = 160  # bytes a row costs besides its payload (ids, timestamps), for max_bytes
_GAP_WEIGHT = 0.2  # of the latest gap between additions in their moving average


@dataclass(frozen=True, slots=True)
class LandingOptions:
    policy: RollPolicy
    write_timeout: float  # one attempt to write a file; a stalled volume fails it
    ownership_margin: float  # lease time left required before a file becomes visible
    keepalive_interval: float  # in-progress acks for messages buffered this long (at most
    # a third of the shortest ack_wait among the subscriptions, whichever is less)
    retry_base: float  # backoff after a failed write: base, doubling...
    retry_cap: float  # ...up to this
    # First rows fetched this soon after a partition's claim are its handed-over backlog
    # (the previous owner's last pull requests may hold the first messages back a moment).
    handover_window: float = 2.0
    floor_interval: float = 5.0  # seconds between two rounds of acked_below queries


@dataclass(frozen=True, slots=True)
class _Attempt:
    """A commit tried: the token it sets on each log it settles, and what it adds."""

    token: int
    plan: LandingPlan
    rows: list[LandedRow]
    files: Sequence[LandedFile]


@dataclass(eq=False, slots=True)
class _Batch:
    rows: list[LandedRow] = field(default_factory=list)
    size: int = 0
    oldest: float | None = None  # monotonic time of the first message added
    newest: float | None = None  # monotonic time of the last message added
    kept_alive: float = 0.0  # monotonic time of the last in-progress acks
    handover: bool = False  # holds a partition's first rows since its claim: roll early
    pending: dict[Subscription, list[Delivery]] = field(default_factory=dict)
    partitions: dict[Subscription, Partition] = field(default_factory=dict)
    message_ids: set[str] = field(default_factory=set)
    places: list[tuple[LogKey, int, str]] = field(default_factory=list)  # per delivery
    logs: dict[Subscription, LogKey] = field(default_factory=dict)
    unconfirmed: _Attempt | None = None  # a commit of this batch whose outcome is unknown

    def holds(self, subscription: Subscription) -> bool:
        return subscription in self.pending

    def deliveries(self) -> int:
        return sum(len(d) for d in self.pending.values())


class Lander:
    """One per lease: ``run`` in the task group that owns the lease's partitions."""

    def __init__(
        self,
        *,
        sink: Sink,
        table: LandedTable,
        lease: MembershipLease,
        options: LandingOptions,
        metrics: HandlerMetrics,
        on_landed: Callable[[Sequence[LandedRow]], None],
    ) -> None:
        self._sink = sink
        self._table = table
        self._lease = lease
        self._floors: dict[LogKey, int] = {}  # acked_below, as last asked
        self._settled: dict[LogKey, Settled] = {}  # per log: positions the table settles
        self._tokens: dict[LogKey, int | None] = {}  # the token our view of each log is at
        # Subscriptions acked since the last round of acked_below queries.
        self._floor_wanted: weakref.WeakKeyDictionary[Subscription, Partition] = (
            weakref.WeakKeyDictionary()
        )
        self._options = options
        self._metrics = metrics
        self._on_landed = on_landed
        self._keepalive_interval = options.keepalive_interval
        self._last_added: float | None = None
        self._usual_gap = 0.0  # moving average of the time between two additions
        # When each subscription was opened, until its first rows arrive: rows fetched
        # within handover_window of the claim are a moved partition's backlog.
        self._opened: weakref.WeakKeyDictionary[Subscription, float] = weakref.WeakKeyDictionary()
        self._filling = _Batch()
        self._landing: _Batch | None = None
        self._drain_requested = False
        self._changed = anyio.Event()  # something was added, or a drain was requested
        self._rolled = anyio.Event()  # the filling batch was taken: room again
        self._attempted = anyio.Event()  # a landing attempt finished (landed or dropped)

    # -- partition workers -------------------------------------------------------------

    def add(
        self,
        partition: Partition,
        subscription: Subscription,
        deliveries: Sequence[Delivery],
        rows: Sequence[LandedRow],
    ) -> None:
        """Buffer ``rows`` and hold ``deliveries`` (all of them: data, announcements and
        in-batch duplicates) until the file with the rows is durable."""
        if not deliveries:
            return
        batch = self._filling
        batch.newest = time.monotonic()
        if self._last_added is not None:
            gap = batch.newest - self._last_added
            self._usual_gap += (gap - self._usual_gap) * _GAP_WEIGHT
        self._last_added = batch.newest
        if batch.oldest is None:
            batch.oldest = batch.newest
            batch.kept_alive = batch.oldest
        self._keepalive_interval = min(self._keepalive_interval, subscription.ack_wait / 3)
        opened = self._opened.pop(subscription, None)
        if opened is not None and batch.newest - opened <= self._options.handover_window:
            batch.handover = True
        batch.pending.setdefault(subscription, []).extend(deliveries)
        batch.partitions[subscription] = partition
        key = log_key(subscription.log_id, partition)
        batch.logs[subscription] = key
        batch.places.extend((key, d.position, d.envelope.message_id) for d in deliveries)
        for row in rows:
            message_id = row.envelope.message_id
            if message_id in batch.message_ids:
                continue  # a redelivery in the same batch as its first copy: land once
            batch.message_ids.add(message_id)
            batch.rows.append(row)
            batch.size += len(row.envelope.payload) + _ROW_OVERHEAD
        self._metrics.buffered_rows.set(len(batch.rows))
        self._notify()

    def opened(self, subscription: Subscription) -> None:
        """A partition was just claimed and opened: its first rows, if they come within
        ``handover_window`` (a backlog handed over), roll after the policy's
        ``handover_age``."""
        self._opened[subscription] = time.monotonic()

    def has_room(self) -> bool:
        return self.room() > 0

    def room(self) -> int:
        """Rows the filling batch takes before it rolls by row count (0 when it is full by
        rows or bytes): fetches are sized to it, so memory stays near two batches."""
        policy = self._options.policy
        if self._filling.size >= policy.max_bytes:
            return 0
        return max(0, policy.max_rows - len(self._filling.rows))

    async def wait_for_room(self, within: float) -> bool:
        """True once the filling batch has room (at once if it has); False after ``within``
        seconds without room (the caller re-checks whether it should still fetch)."""
        while not self.has_room():
            rolled = self._rolled
            with anyio.move_on_after(within):
                await rolled.wait()
                continue
            return False
        return True

    def holds(self, subscription: Subscription) -> bool:
        """True while deliveries of ``subscription`` wait in a batch."""
        landing = self._landing
        return self._filling.holds(subscription) or (
            landing is not None and landing.holds(subscription)
        )

    async def flush(self, subscription: Subscription) -> None:
        """Land (or, on a lost lease, drop) everything held for ``subscription`` now, and
        return when none of it is buffered any more: the partition may then be released."""
        while self.holds(subscription):
            self._drain_requested = True
            attempted = self._attempted
            self._notify()
            await attempted.wait()

    # -- the landing task --------------------------------------------------------------

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._keep_alive)
            tg.start_soon(self._ask_floors)
            await self._roll_forever()

    async def _roll_forever(self) -> None:
        policy = self._options.policy
        while True:
            batch = self._filling
            reason = roll_reason(
                policy,
                rows=len(batch.rows),
                size=batch.size,
                oldest=batch.oldest,
                now=time.monotonic(),
                newest=batch.newest,
                usual_gap=self._usual_gap,
                handover=batch.handover,
            )
            if reason is None and self._drain_requested and batch.pending:
                reason = RollReason.DRAIN
            if reason is None:
                self._drain_requested = False
                changed = self._changed
                wait = (
                    None
                    if batch.oldest is None
                    else policy.due_at(
                        batch.oldest,
                        newest=batch.newest,
                        usual_gap=self._usual_gap,
                        handover=batch.handover,
                    )
                )
                with anyio.move_on_after(
                    None if wait is None else max(0.0, wait - time.monotonic())
                ):
                    await changed.wait()
                continue
            self._filling = _Batch()
            self._landing = batch
            self._metrics.buffered_rows.set(0)
            self._rolled.set()
            self._rolled = anyio.Event()
            try:
                await self._land(batch, reason)
            finally:
                self._landing = None
                self._attempted.set()
                self._attempted = anyio.Event()

    async def _land(self, batch: _Batch, reason: RollReason) -> None:
        options = self._options
        started = time.monotonic()
        failures = 0
        while True:
            try:
                if not self._still_owned():
                    self._drop(batch, "the lease expires before the file could be written")
                    return
                with anyio.fail_after(options.write_timeout):
                    landed = await self._commit(batch)
                if landed is not None:
                    break
            except OwnershipLostError:
                self._drop(batch, "the lease was about to expire when the file was ready")
                return
            except Exception as exc:  # any storage failure: wait and write again
                failures += 1
                delay = retry_delay(failures, base=options.retry_base, cap=options.retry_cap)
                self._metrics.sink_failures.inc()
                log.error(
                    "landing failed; the batch stays buffered (kept alive, not nak'd) "
                    "and is planned and written again",
                    extra=fields(
                        error=repr(exc),
                        rows=len(batch.rows),
                        messages=batch.deliveries(),
                        failures=failures,
                        retry_in=delay,
                    ),
                )
                await anyio.sleep(delay)
        rows, files = landed
        if not self._still_owned():
            # Committed; without the ack the next owner gets the messages and, finding
            # their positions settled, acks them without landing them again.
            self._drop(batch, "the lease was about to expire after the commit")
            return
        await self._ack(batch)
        elapsed = time.monotonic() - started
        self._metrics.files.inc(len(files))
        if rows:
            self._metrics.file_rows.observe(len(rows))
        self._metrics.landed.inc(len(rows))
        self._on_landed(rows)
        log.debug(
            "landed",
            extra=fields(
                reason=reason.value,
                rows=len(rows),
                already_landed=len(batch.rows) - len(rows),
                files=len(files),
                partitions=len(set(batch.partitions.values())),
                seconds=round(elapsed, 3),
            ),
        )

    async def _commit(self, batch: _Batch) -> tuple[list[LandedRow], Sequence[LandedFile]] | None:
        """Plan against the table, write, commit: the rows landed and their files, or None
        when another writer's commit came first (the files are discarded; plan again)."""
        await self._table.refresh()
        if batch.unconfirmed is not None:
            attempt, batch.unconfirmed = batch.unconfirmed, None
            if await self._landed(attempt):
                return attempt.rows, attempt.files
            with anyio.CancelScope(shield=True):  # nobody else knows these files
                await self._sink.discard(attempt.files)
        plan = await self._plan(batch)
        rows = [r for r in batch.rows if r.envelope.message_id in plan.keep]
        if not rows:
            self._settle(plan, None)
            return rows, ()  # everything landed already (a redelivery): only ack
        files = await self._sink.write(rows, still_valid=self._still_owned)
        if not self._still_owned():
            # Not needed for exactly-once (the table's fence is), but a handler paused past
            # its lease commits nothing. Shielded: woken past its lease, the handler is
            # being cancelled too, and the files are nobody else's to remove.
            with anyio.CancelScope(shield=True):
                await self._sink.discard(files)
            raise OwnershipLostError("the lease was about to expire before the commit")
        attempt = _Attempt(secrets.randbits(62) + 1, plan, rows, files)
        try:
            try:
                await self._table.commit(files, dict.fromkeys(plan.places, attempt.token))
            except CommitConflictError:
                # Told apart even when cancelled meanwhile (a lease lost during the
                # commit), within the write timeout: else the files would stay behind,
                # named by no version, until the vacuum.
                with anyio.CancelScope(shield=True), anyio.fail_after(self._options.write_timeout):
                    return await self._after_conflict(attempt)
        except BaseException:
            batch.unconfirmed = attempt  # resolved by the tokens before the next plan
            raise
        self._settle(plan, attempt.token)
        return rows, files

    async def _after_conflict(
        self, attempt: _Attempt
    ) -> tuple[list[LandedRow], Sequence[LandedFile]] | None:
        """After a refused commit: its rows and files when it landed after all (its answer
        was lost), else None with its files deleted (another writer's commit came first)."""
        await self._table.refresh()
        if await self._landed(attempt):
            return attempt.rows, attempt.files
        log.info(
            "commit refused: another writer landed some of the batch's partitions "
            "first; planning again",
            extra=fields(partitions=len(attempt.plan.places), files=len(attempt.files)),
        )
        await self._sink.discard(attempt.files)
        self._tokens.clear()  # look at every log again
        return None

    async def _plan(self, batch: _Batch) -> LandingPlan:
        """``plan_landing`` against the table, after rebuilding the view of each log whose
        token in the table is not the one the view is at, or whose broker's ack floor went
        down."""
        logs = {key: subscription for subscription, key in batch.logs.items()}
        # Below the view's floor no row is consulted: a delivery there is a late copy of
        # an acked message, or the log handed the position out again. The broker's floor
        # tells them apart (a lower one drops the view); rare, so asked per batch.
        below = {
            key
            for key, position, _ in batch.places
            if key in self._settled and position < self._settled[key].floor
        }
        for key in below:
            await self._floor_of(key, logs[key])
        stale = {
            key
            for key in logs
            if key not in self._tokens or self._table.token(key) != self._tokens[key]
        }
        if stale:
            floors = {key: await self._floor_of(key, logs[key]) for key in stale}
            # A log no commit set a token on has no rows in the table.
            found: dict[LogKey, Mapping[int, frozenset[str]]] = {key: {} for key in stale}
            found.update(
                await self._table.settled(
                    {k: f for k, f in floors.items() if self._table.token(k) is not None}
                )
            )
            for key in stale:
                self._settled[key] = Settled(floors[key], found[key])
                self._tokens[key] = self._table.token(key)
            log.info(
                "partitions' landed positions read from the table",
                extra=fields(logs=len(stale), positions=sum(len(p) for p in found.values())),
            )
        plan = plan_landing(self._settled, batch.places)
        for key, positions in plan.reused.items():
            log.error(
                "positions handed out again: rows of the table hold other messages at "
                "positions this log delivered new ones at (the log was restored from a "
                "backup, lost its tail, or was re-created under its name); the new messages "
                "land",
                extra=fields(
                    log=key, positions=len(positions), first=positions[0], last=positions[-1]
                ),
            )
        return plan

    async def _floor_of(self, key: LogKey, subscription: Subscription) -> int:
        """How far the broker has acked the log (0, the whole log, when it cannot say)."""
        try:
            floor = await subscription.acked_below()
        except Exception as exc:
            log.warning(
                "acked_below not answered: reading the log's positions from its start",
                extra=fields(log=key, error=repr(exc)),
            )
            self._tokens.pop(key, None)  # a floor the broker did not confirm: look again
            return 0
        self._take_floor(key, floor)
        return floor

    def _take_floor(self, key: LogKey, floor: int) -> None:
        """The broker's ack floor of ``key``, as it answered now. A floor never goes down
        in a log that keeps its positions: a lower one means the log was restored,
        truncated or re-created, so the view is dropped and read again from the rows,
        which settle only the messages they hold (``core.table``)."""
        known = self._floors.get(key)
        if known is not None and floor < known:
            log.warning(
                "the broker's ack floor went down (the log was restored from a backup, "
                "lost its tail, or was re-created under its name): reading its landed "
                "positions again; a message new at a used position lands",
                extra=fields(log=key, floor=floor, was=known),
            )
            self._tokens.pop(key, None)
            self._settled.pop(key, None)
        self._floors[key] = floor
        if key in self._settled:
            self._settled[key] = self._settled[key].raised_to(floor)

    def _settle(self, plan: LandingPlan, token: int | None) -> None:
        for key, places in plan.places.items():
            self._settled[key] = self._settled.get(key, Settled()).adding(places)
            if token is not None:
                self._tokens[key] = token

    async def _landed(self, attempt: _Attempt) -> bool:
        """Whether ``attempt``'s commit is in the table's snapshot; when it is, the view
        takes what it settled."""
        tokens = {key: self._table.token(key) for key in attempt.plan.places}
        landed = commit_landed(attempt.token, tokens) or await self._table.holds(
            [f.path for f in attempt.files]
        )
        if landed:
            log.info(
                "an unconfirmed commit landed after all",
                extra=fields(files=len(attempt.files), rows=len(attempt.rows)),
            )
            self._settle(attempt.plan, attempt.token)
            for key, token in tokens.items():
                if token != attempt.token:  # another writer committed since: look again
                    self._tokens.pop(key, None)
        return landed

    async def _ack(self, batch: _Batch) -> None:
        async def ack(subscription: Subscription, deliveries: list[Delivery]) -> None:
            try:
                await subscription.ack(deliveries)
                self._metrics.acked.inc(len(deliveries))
            except Exception as exc:  # committed: a redelivery is acked, not landed again
                log.warning(
                    "ack not confirmed; those messages may be redelivered",
                    extra=fields(
                        partition=batch.partitions[subscription],
                        messages=len(deliveries),
                        error=repr(exc),
                    ),
                )

        async with anyio.create_task_group() as tg:
            for subscription, deliveries in batch.pending.items():
                tg.start_soon(ack, subscription, deliveries)
        self._floor_wanted.update((s, p) for s, p in batch.partitions.items())

    async def _ask_floors(self) -> None:
        """Every ``floor_interval``: how far the broker has acked each partition acked
        since the last round (one request each, off the landing path)."""
        while True:
            await anyio.sleep(self._options.floor_interval)
            wanted, self._floor_wanted = self._floor_wanted, weakref.WeakKeyDictionary()
            for subscription, partition in list(wanted.items()):
                try:
                    floor = await subscription.acked_below()
                except Exception as exc:  # the table keeps more positions until next time
                    log.debug(
                        "acked_below not answered",
                        extra=fields(partition=partition, error=repr(exc)),
                    )
                    continue
                self._take_floor(log_key(subscription.log_id, partition), floor)

    def _still_owned(self) -> bool:
        return not self._lease.is_lost(self._options.ownership_margin)

    def _drop(self, batch: _Batch, why: str) -> None:
        log.warning(
            "batch dropped unwritten or unacked; its messages will be redelivered",
            extra=fields(reason=why, rows=len(batch.rows), messages=batch.deliveries()),
        )
        self._metrics.dropped.inc(batch.deliveries())

    async def _keep_alive(self) -> None:
        while True:
            interval = self._keepalive_interval
            await anyio.sleep(interval / 2)
            now = time.monotonic()
            for batch in (self._landing, self._filling):
                if batch is None or batch.oldest is None or now - batch.kept_alive < interval:
                    continue
                batch.kept_alive = now
                for subscription, deliveries in list(batch.pending.items()):
                    await subscription.keep_alive(list(deliveries))

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()
