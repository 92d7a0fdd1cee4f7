"""The landed table's rules: what a batch settles, how the positions it settles map to the
Delta Lake table's own transactions, and when the table needs upkeep. This is what makes
landing exactly-once.

The landing zone is a Delta Lake table. A handler lands a batch as Parquet files and one
Delta commit that adds them. Every row carries the broker position it was delivered at
(``log_id``, ``partition``, ``position``): ``position`` is the message's place in its
partition's log (the NATS stream sequence, the Kafka offset), the same on every
redelivery. A ``LogKey`` names one partition's log at one broker, so positions of a
recreated stream, or of another cluster, never meet those of the old one.

**A place is settled** (a message at a position) when the position is below the broker's
ack floor for its log (a handler acks only what the table holds, or what went to the dead
letters), or when a row of the table holds that message at that position. A batch leaves
out the messages any of whose places is settled (a redelivery of something another
handler, or this one before a crash, landed) and only acks them.

**A position can be handed out again.** A log restored from a backup (a NATS stream keeps
its name and creation time), one that lost its tail (relaxed sync and an OS crash, a Kafka
unclean election), or one deleted and re-created under its name gives new messages
positions that rows of the table already hold. So a row settles only the message it holds:
a new message at a used position is planned as new and lands, and the plan names the
position as ``reused`` for the lander to report. Below the floor no row is consulted; the
lander keeps each floor no higher than the broker's (a floor that goes down is the same
sign of a reused log) and asks the broker again before trusting it for a delivery below.

**Fencing.** Every commit also sets one Delta app transaction per log it lands rows of:
app id ``transaction_app_id(key)``, version a ``token`` unique to that commit. Delta
refuses a commit that sets an app id some other commit set after the snapshot it was
planned on ("concurrent transaction"): so a writer whose view of a log is stale (a zombie
paused past its lease, a shared-mode peer) cannot commit rows of that log, and a writer
that reads a token it did not write knows its view is stale and rebuilds it from the rows.
After an unconfirmed commit (a lost response, a timeout) the writer reads the tokens back:
its own token on any of its logs means its commit landed (``commit_landed``).

Everything here is pure: no I/O, no clock (times are passed in).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from core.model import Partition

__all__ = [
    "COMPACTION_APP_ID",
    "DayFiles",
    "LandedFile",
    "LandingPlan",
    "LogKey",
    "LoggedFile",
    "Place",
    "RepairPlan",
    "Settled",
    "commit_landed",
    "compaction_groups",
    "days_to_compact",
    "log_key",
    "plan_landing",
    "plan_repair",
    "transaction_app_id",
    "vacuum_retention_problem",
]

LogKey = str
"""One partition's log at one broker: ``{log_id}#{partition}``."""

_APP_ID_PREFIX = "shoal/"
COMPACTION_APP_ID = f"{_APP_ID_PREFIX}compaction"
"""The app transaction every compaction sets, one version above the one it read: of two
compactions of one snapshot the table refuses the second (Delta refuses neither by the
files they remove when both remove them without changing data)."""


def log_key(log_id: str, partition: Partition) -> LogKey:
    return f"{log_id}#{partition}"


def transaction_app_id(key: LogKey) -> str:
    """The Delta app transaction a commit that lands rows of ``key`` sets."""
    return f"{_APP_ID_PREFIX}{key}"


@dataclass(frozen=True, slots=True)
class LandedFile:
    """One data file written for the table, not yet part of it until a commit adds it.

    ``path`` is relative to the table's root with ``/`` separators
    (``date=2026-11-25/h1-....parquet``); ``day`` the value of its ``date`` partition;
    ``stats`` the format's column statistics (opaque here: Delta's JSON)."""

    path: str
    rows: int
    size: int = 0
    day: str = ""
    stats: str = ""


@dataclass(frozen=True, slots=True)
class Settled:
    """The settled places of one log: every position below ``floor``; at or above it, the
    messages rows of the table hold at each position (``above``: position -> message ids).
    Memory is bounded by what the broker has not acked yet, not by history."""

    floor: int = 0
    above: Mapping[int, frozenset[str]] = field(default_factory=dict)

    def settles(self, position: int, message_id: str) -> bool:
        return position < self.floor or message_id in self.above.get(position, ())

    def reused(self, position: int, message_ids: Collection[str]) -> bool:
        """Whether rows hold messages at ``position`` and none of ``message_ids`` (what the
        log delivered there now): the log handed the position out again. The parts of a
        pack share a position, so a row of one part is no sign of reuse when the
        redelivered pack brings that part too."""
        held = self.above.get(position)
        return held is not None and held.isdisjoint(message_ids)

    def adding(self, places: Iterable[tuple[int, str]]) -> Settled:
        above = dict(self.above)
        for position, message_id in places:
            if position >= self.floor:
                above[position] = above.get(position, frozenset()) | {message_id}
        return Settled(self.floor, above)

    def raised_to(self, floor: int) -> Settled:
        """Every position below ``floor`` settled too (a floor never goes down: a lower one
        is a new view, built from the rows again)."""
        if floor <= self.floor:
            return self
        return Settled(floor, {p: ids for p, ids in self.above.items() if p >= floor})


Place = tuple[int, str]
"""A message at a position of a log: ``(position, message_id)``."""


@dataclass(frozen=True, slots=True)
class LandingPlan:
    """What a batch commits: the messages whose rows go into the file (``keep``, by
    message id), the places the commit settles (``places``, sorted, by log) and the
    positions where rows hold other messages (``reused``: the log handed them out again)."""

    keep: frozenset[str]
    places: Mapping[LogKey, tuple[Place, ...]]
    reused: Mapping[LogKey, tuple[int, ...]] = field(default_factory=dict)

    @property
    def settles_nothing(self) -> bool:
        return not self.places


def plan_landing(
    settled: Mapping[LogKey, Settled], deliveries: Iterable[tuple[LogKey, int, str]]
) -> LandingPlan:
    """The plan for a batch of deliveries, each ``(log, position, message_id)``.

    A message is landed already when any of its places is settled (a redelivery another
    writer landed, or a second broker copy of it): its row is left out. Every place not
    yet settled is settled by this commit, whether its row is written or its message is
    landed already.
    """
    batch = list(deliveries)
    nothing = Settled()
    landed: set[str] = set()  # messages with a settled place
    fresh: list[tuple[LogKey, int, str]] = []
    for log, position, message_id in batch:
        if settled.get(log, nothing).settles(position, message_id):
            landed.add(message_id)
        else:
            fresh.append((log, position, message_id))
    keep = {message_id for _, _, message_id in fresh} - landed
    places: dict[LogKey, set[Place]] = {}
    for log, position, message_id in fresh:
        places.setdefault(log, set()).add((position, message_id))
    reused: dict[LogKey, set[int]] = {}
    # Only a fresh place at a position rows hold can be a reuse (rare: looked at apart).
    held = {(log, p) for log, p, _ in fresh if p in settled.get(log, nothing).above}
    if held:
        delivered: dict[tuple[LogKey, int], set[str]] = {}
        for log, position, message_id in batch:
            if (log, position) in held:
                delivered.setdefault((log, position), set()).add(message_id)
        for log, position in held:
            if settled[log].reused(position, delivered[log, position]):
                reused.setdefault(log, set()).add(position)
    return LandingPlan(
        keep=frozenset(keep),
        places={k: tuple(sorted(s)) for k, s in sorted(places.items())},
        reused={k: tuple(sorted(s)) for k, s in sorted(reused.items())},
    )


def commit_landed(token: int, tokens_now: Mapping[LogKey, int | None]) -> bool:
    """Whether a commit that set ``token`` on each of the logs in ``tokens_now`` landed, by
    those logs' tokens as the table shows them now: a commit sets its token on all of its
    logs at once, so any one of them showing it proves the commit (another writer may
    have committed some of the logs since)."""
    return any(now == token for now in tokens_now.values())


@dataclass(frozen=True, slots=True)
class DayFiles:
    """One ``date`` partition of the table: how many active files, and how many of those
    are small (below the compaction target)."""

    day: str
    files: int
    small: int


def days_to_compact(days: Iterable[DayFiles], today: str, *, open_day_files: int) -> list[str]:
    """The ``date`` partitions compaction rewrites, in order: a closed day (before
    ``today``) with two or more small files, and the open day once it holds
    ``open_day_files`` small files (writers keep adding to it, so it is merged in steps)."""
    due = []
    for day in sorted(days, key=lambda d: d.day):
        enough = open_day_files if day.day >= today else 2
        if day.small >= enough:
            due.append(day.day)
    return due


def compaction_groups(files: Iterable[tuple[str, int]], target_bytes: int) -> list[tuple[str, ...]]:
    """The groups of one day's files (path, size) that compaction rewrites into one file
    each: the files below ``target_bytes``, smallest first (then by path), packed in
    turn into groups of at most ``target_bytes`` in all. A group of one file is left as
    it is: rewriting it alone would merge nothing."""
    groups: list[list[str]] = []
    total = 0
    small = sorted((f for f in files if f[1] < target_bytes), key=lambda f: (f[1], f[0]))
    for path, size in small:
        if not groups or total + size > target_bytes:
            groups.append([])
            total = 0
        groups[-1].append(path)
        total += size
    return [tuple(group) for group in groups if len(group) > 1]


@dataclass(frozen=True, slots=True)
class LoggedFile:
    """A file one version of the table added or removed, as its log entry says: whether
    the action changed data (an append or a delete, not a rewrite), and its row count
    when the entry carries one."""

    path: str
    data_change: bool
    rows: int | None = None


@dataclass(frozen=True, slots=True)
class RepairPlan:
    """How to undo one rewrite: add back the files it removed (``restore``) and remove the
    files it added that the table still holds (``drop``), in one commit."""

    version: int
    restore: tuple[str, ...]
    drop: tuple[str, ...]


def plan_repair(
    version: int,
    added: Collection[LoggedFile],
    removed: Collection[LoggedFile],
    *,
    active: Collection[str],
    stored: Collection[str],
) -> RepairPlan:
    """The plan that undoes ``version``, a rewrite (a compaction) that may have left the
    table naming files storage no longer holds: its removed files, still ``stored``, come
    back, its added ones go. ``active`` is what the newest version holds. ``ValueError``
    (nothing to change) when undoing it would lose or duplicate rows: it changed data (an
    append: undoing it would drop landed rows), its removed and added files hold different
    row counts, a later version already removed one of its added files (their rows live
    on elsewhere: restoring would land them twice), one of its removed files is gone from
    storage (vacuumed: its rows cannot come back), or there is nothing to undo."""
    changed = sorted(f.path for f in (*added, *removed) if f.data_change)
    if changed:
        raise ValueError(
            f"version {version} changed data ({changed[0]}): repair undoes only a rewrite "
            "(a compaction), never an append or a delete"
        )
    if not removed:
        raise ValueError(f"version {version} removed no file: there is nothing to restore")
    rows_removed = [f.rows for f in removed]
    rows_added = [f.rows for f in added]
    if None not in rows_removed and None not in rows_added:
        before, after = sum(r or 0 for r in rows_removed), sum(r or 0 for r in rows_added)
        if before != after:
            raise ValueError(
                f"version {version} removed files of {before} rows and added files of "
                f"{after}: it is not a rewrite that can be undone"
            )
    active_set = set(active)
    stored_set = set(stored)
    gone = sorted(f.path for f in added if f.path not in active_set)
    if gone:
        raise ValueError(
            f"a later version removed {gone[0]}, which version {version} added: undoing "
            f"{version} would land its rows twice; repair that later version first"
        )
    back = sorted(f.path for f in removed if f.path in active_set)
    if len(back) == len(removed):
        raise ValueError(f"the table holds every file version {version} removed: nothing to do")
    if back:
        raise ValueError(
            f"the table holds {back[0]} again, which version {version} removed: it was "
            "partly undone already; nothing changed"
        )
    lost = sorted(f.path for f in removed if f.path not in stored_set)
    if lost:
        raise ValueError(
            f"{len(lost)} of the files version {version} removed are gone from storage "
            f"(vacuumed), {lost[0]} first: their rows cannot be restored"
        )
    return RepairPlan(
        version,
        restore=tuple(sorted(f.path for f in removed)),
        drop=tuple(sorted(f.path for f in added)),
    )


def vacuum_retention_problem(
    vacuum_retention_hours: float, *, write_timeout: float, lease_ttl: float
) -> str | None:
    """Why a vacuum with this retention could delete a file a handler is about to commit;
    None when it cannot. A handler's file is named by no version between its write and its
    commit, at most ``write_timeout`` seconds (one attempt), and a handler checks its lease
    (``lease_ttl``) before it commits: the retention must be longer than both."""
    floor = write_timeout + lease_ttl
    if vacuum_retention_hours * 3600 <= floor:
        return (
            f"vacuum retention of {vacuum_retention_hours:g} h is not above a handler's "
            f"write timeout and lease ({floor:g} s): a vacuum could delete a file between "
            "its write and its commit"
        )
    return None
