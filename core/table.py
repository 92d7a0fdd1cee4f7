"""The landed table: which files make up the landing zone, and which broker positions of
each partition they hold. This is what makes landing exactly-once.

The landing zone is a table with a commit log (``LandingLog``), the way Delta Lake and
Iceberg make a folder of Parquet files a table. Commit ``v`` is created only if no
commit ``v`` exists (an exclusive create: ``link`` on a disk, ``If-None-Match: *`` on an
object store), so commits are totally ordered and none is lost to a race. A commit
names the data files it adds (written under their final names before it) and the broker
positions of every message it settles: ``position`` is the message's place in its
partition's log (the NATS stream sequence, the Kafka offset), the same on every
redelivery.

The rule, checked against the state every earlier commit made: **a commit may not
settle a position that is already settled.** A writer that finds some of its positions
settled (a redelivery of something another handler landed; a zombie's batch that its
successor landed meanwhile) leaves those messages out, rewrites its file, and tries
again. A file that no commit names is not part of the table: readers list files from
the log, never from the folder.

Positions are kept per **log**: a ``LogKey`` names one partition's log at one broker
(``log_key(subscription.log_id, partition)``), so positions of a recreated stream, or of
another cluster, never meet those of the old one.

Each commit also carries ``floors``: ``floors[k] = F`` says every position of log ``k``
below ``F`` is acknowledged at the broker. A handler acks only what is settled in the table
(landed, or dead-lettered), so a position below the floor is settled, and the state
forgets the positions below it: memory is bounded by what is unacknowledged, not by
history. A floor only rises.

Everything here is pure: no I/O, no clock (``committed_at`` is passed in).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from core.errors import CommitRefusedError
from core.model import Partition

__all__ = [
    "CHECKPOINT_EVERY",
    "Commit",
    "LandedFile",
    "LandingPlan",
    "LogKey",
    "StoredFile",
    "TableState",
    "checkpoint_due",
    "in_date_folder",
    "log_key",
    "pack",
    "plan_landing",
    "unreferenced",
]

LogKey = str
"""One partition's log at one broker: ``{log_id}#{partition}``."""


def log_key(log_id: str, partition: Partition) -> LogKey:
    return f"{log_id}#{partition}"


CHECKPOINT_EVERY = 100  # commits between two checkpoints (a reader applies fewer)


@dataclass(frozen=True, slots=True)
class LandedFile:
    """One data file of the table. ``path`` is relative to the landing zone's root, with
    ``/`` separators (``date=2026-11-25/h1-....parquet``)."""

    path: str
    rows: int


@dataclass(frozen=True, slots=True)
class StoredFile:
    """A file as the landing zone's storage lists it, named or not by the table: ``path``
    as in ``LandedFile``; ``modified``: when it was last written or stamped (seconds since
    the epoch)."""

    path: str
    size: int
    modified: float


@dataclass(frozen=True, slots=True)
class Commit:
    """One entry of the log.

    ``positions[k]``: the positions of log ``k`` this commit settles (its rows, and
    redeliveries or broker-side copies of the same messages), sorted, none settled before.
    ``removed``: paths of files this commit takes out of the table (compaction: the rows
    are in ``added``; no position is settled twice, since a compaction settles none).
    ``commit_id`` is unique per attempt, so a writer whose create timed out can recognise
    its own commit when it reads the log again.
    """

    version: int
    commit_id: str
    writer: str
    committed_at: float
    added: tuple[LandedFile, ...] = ()
    removed: tuple[str, ...] = ()
    positions: Mapping[LogKey, tuple[int, ...]] = field(default_factory=dict)
    floors: Mapping[LogKey, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TableState:
    """The table after commit ``version`` (0: no commit yet).

    ``settled[k]`` holds the settled positions of log ``k`` at or above ``floors[k]`` (every
    position below the floor is settled too). Never mutated: ``apply`` builds a new state
    and shares what did not change.
    """

    version: int = 0
    files: Mapping[str, LandedFile] = field(default_factory=dict)
    floors: Mapping[LogKey, int] = field(default_factory=dict)
    settled: Mapping[LogKey, frozenset[int]] = field(default_factory=dict)

    def is_settled(self, log: LogKey, position: int) -> bool:
        return position < self.floors.get(log, 0) or position in self.settled.get(log, frozenset())

    def apply(self, commit: Commit) -> TableState:
        """The state after ``commit``; ``CommitRefusedError`` (naming why) when the commit
        does not follow from this state."""
        if commit.version != self.version + 1:
            raise CommitRefusedError(
                f"commit {commit.version} does not follow version {self.version}"
            )
        for log, positions in commit.positions.items():
            again = [p for p in positions if self.is_settled(log, p)]
            if again:
                raise CommitRefusedError(
                    f"commit {commit.version} settles {len(again)} position(s) of log "
                    f"{log} again (first {again[0]})"
                )
        files = dict(self.files)
        for path in commit.removed:
            if files.pop(path, None) is None:
                raise CommitRefusedError(
                    f"commit {commit.version} removes {path}: not in the table"
                )
        for landed in commit.added:
            if landed.path in files:
                raise CommitRefusedError(f"commit {commit.version} adds {landed.path} twice")
            files[landed.path] = landed
        floors = dict(self.floors)
        for log, floor in commit.floors.items():
            floors[log] = max(floor, floors.get(log, 0))
        settled = dict(self.settled)
        for log in commit.positions.keys() | commit.floors.keys():
            floor = floors.get(log, 0)
            merged = settled.get(log, frozenset()).union(commit.positions.get(log, ()))
            kept = frozenset(p for p in merged if p >= floor)
            if kept:
                settled[log] = kept
            else:
                settled.pop(log, None)
        return TableState(version=commit.version, files=files, floors=floors, settled=settled)

    def replay(self, commits: Iterable[Commit]) -> TableState:
        """``apply`` each of ``commits`` in turn."""
        state = self
        for commit in commits:
            state = state.apply(commit)
        return state

    def rows(self) -> int:
        return sum(f.rows for f in self.files.values())


def checkpoint_due(version: int) -> bool:
    """True when the writer of commit ``version`` should also save a checkpoint."""
    return version > 0 and version % CHECKPOINT_EVERY == 0


@dataclass(frozen=True, slots=True)
class LandingPlan:
    """What a batch commits: the messages whose rows go into the file (``keep``, by
    message id) and the positions the commit settles (``positions``, sorted)."""

    keep: frozenset[str]
    positions: Mapping[LogKey, tuple[int, ...]]

    @property
    def settles_nothing(self) -> bool:
        return not self.positions


def plan_landing(state: TableState, deliveries: Iterable[tuple[LogKey, int, str]]) -> LandingPlan:
    """The plan for a batch of deliveries, each ``(log, position, message_id)``.

    A message is landed already when any of its positions is settled (a redelivery
    another writer landed, or a second broker copy of it): its row is left out. Every
    position not yet settled is settled by this commit, whether its row is written or its
    message is landed already (so it is never landed later under that position).
    """
    by_message: dict[str, list[tuple[LogKey, int]]] = {}
    for log, position, message_id in deliveries:
        by_message.setdefault(message_id, []).append((log, position))
    keep: set[str] = set()
    positions: dict[LogKey, set[int]] = {}
    for message_id, places in by_message.items():
        fresh = [(p, pos) for p, pos in places if not state.is_settled(p, pos)]
        if len(fresh) == len(places):
            keep.add(message_id)
        for log, position in fresh:
            positions.setdefault(log, set()).add(position)
    return LandingPlan(
        keep=frozenset(keep),
        positions={p: tuple(sorted(s)) for p, s in sorted(positions.items())},
    )


def pack(files: Iterable[LandedFile], target_rows: int) -> list[list[LandedFile]]:
    """Compaction's plan: ``files`` in bins of at most ``target_rows`` rows (a file larger
    than that gets a bin of its own): first fit, largest first, ties by path."""
    bins: list[list[LandedFile]] = []
    room: list[int] = []
    for landed in sorted(files, key=lambda f: (-f.rows, f.path)):
        for i, left in enumerate(room):
            if landed.rows <= left:
                bins[i].append(landed)
                room[i] -= landed.rows
                break
        else:
            bins.append([landed])
            room.append(target_rows - landed.rows)
    return bins


def in_date_folder(path: str) -> bool:
    """Whether ``path`` is a file a ``ZoneFiles`` lists: directly in a ``date=`` folder, a
    data file (``*.parquet``) or a sink's hidden temporary one (``.*.tmp``)."""
    folder, _, name = path.partition("/")
    if not folder.startswith("date=") or not name or "/" in name:
        return False
    return name.endswith(".parquet") or (name.startswith(".") and name.endswith(".tmp"))


def unreferenced(
    state: TableState, stored: Iterable[StoredFile], older_than: float
) -> tuple[list[StoredFile], int]:
    """The garbage among ``stored``: files ``state`` does not name, last modified before
    ``older_than`` (deletable, in path order), and how many unnamed ones are younger (kept:
    a writer may be about to commit them, a reader may still be on them)."""
    deletable: list[StoredFile] = []
    kept = 0
    for found in sorted(stored, key=lambda f: f.path):
        if found.path in state.files:
            continue
        if found.modified < older_than:
            deletable.append(found)
        else:
            kept += 1
    return deletable, kept
