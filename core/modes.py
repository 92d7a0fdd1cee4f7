"""Consumption modes: how the handlers of one group share a partition's messages.

- ``exclusive`` (the default): one owner per partition at a time, handed over through
  the partition's hold, so each project's messages land in publish order.
- ``shared``: several handlers consume one partition together, competing on the
  group's one position (NATS: several pull subscribers of the partition's durable
  consumer). The ``fan-out`` strategy gives a partition its k owners once handlers
  outnumber partitions. Throughput scales past the partition count; what is lost is
  order: two messages of one project may be landed by different handlers, in either
  order, and a redelivery may land after later messages. Exactly-once still holds: the
  landed table refuses a position that another handler already settled.
- ``broadcast``: every handler of the group gets every message, at its own position
  (a durable consumer, or a Kafka offsets group, per handler), and lands it into its own
  table, which it keeps up itself: one copy per handler, in ``{zone}-broadcast/{id}``
  beside the group's zone (``broadcast_zone``). The ``broadcast`` strategy makes every
  handler the owner of every partition.

Pure rules: which mode goes with which strategy and transport, whose position a handler
consumes at, whether partition holds are contended across the group, and what else a
broadcast group needs (stable handler ids, a log that keeps acked messages, no
autoscaling).
"""

from __future__ import annotations

import re
from enum import StrEnum

from core.model import MemberId
from core.ports import TransportFeatures

__all__ = [
    "BROADCAST_STRATEGY",
    "BROADCAST_ZONES",
    "SHARED_STRATEGY",
    "ConsumptionMode",
    "autoscaling_problem",
    "broadcast_id_problem",
    "broadcast_zone",
    "contends_for_holds",
    "mode_problem",
    "position_of",
    "retention_problem",
]

BROADCAST_STRATEGY = "broadcast"
SHARED_STRATEGY = "fan-out"
BROADCAST_ZONES = "-broadcast"
"""The suffix of the folder beside a group's zone that holds its broadcast handlers'
tables."""


class ConsumptionMode(StrEnum):
    EXCLUSIVE = "exclusive"
    SHARED = "shared"
    BROADCAST = "broadcast"


def mode_problem(mode: ConsumptionMode, strategy: str, transport: TransportFeatures) -> str | None:
    """Why ``mode`` cannot run with ``strategy`` on ``transport``; None when it can.

    - exclusive refuses ``fan-out`` (once handlers outnumber partitions it names several
      owners of a partition: all but the holder would wait, then take the hold over from
      a live holder after ``claim_patience``, two consumers of one partition with the
      order silently lost) and ``broadcast`` (every handler owns every partition);
    - shared needs ``fan-out`` (the one strategy that gives a partition several owners)
      and a transport whose subscribers can compete on one position (its
      ``competing_consumers`` feature);
    - broadcast needs the ``broadcast`` strategy (any other divides the partitions, so
      a handler would miss the messages of those it was not given).
    """
    if mode is ConsumptionMode.EXCLUSIVE:
        if strategy in (SHARED_STRATEGY, BROADCAST_STRATEGY):
            return (
                f"strategy {strategy} gives a partition several owners, which the exclusive "
                f"mode cannot honour; use it with consumption mode "
                f"{'shared' if strategy == SHARED_STRATEGY else 'broadcast'}"
            )
        return None
    if mode is ConsumptionMode.SHARED:
        if strategy != SHARED_STRATEGY:
            return (
                f"the shared mode needs strategy {SHARED_STRATEGY} (several owners per "
                f"partition), not {strategy}"
            )
        if transport.competing_consumers is not None:
            return (
                f"the shared mode is not available on {transport.name}: "
                f"{transport.competing_consumers}"
            )
        return None
    if strategy != BROADCAST_STRATEGY:
        return (
            f"the broadcast mode needs strategy {BROADCAST_STRATEGY} (every handler owns "
            f"every partition), not {strategy}"
        )
    return None


def position_of(mode: ConsumptionMode, member_id: MemberId) -> str | None:
    """The name of the position a handler consumes at, beside the group's own: its member
    id in broadcast mode (each handler keeps its own, so it must keep its id across
    restarts), None (the group's one position) otherwise."""
    return member_id if mode is ConsumptionMode.BROADCAST else None


def broadcast_zone(zone: str, position: str) -> str:
    """The table of the broadcast handler at ``position``: ``{zone}-broadcast/{position}``,
    beside the group's zone (a directory or ``s3://bucket/prefix``), never inside it. A
    table in another table's folder loses its files to the outer one's vacuum (delta-rs
    hides only the top-level ``_`` and ``.`` folders from it), so a zone switched from
    broadcast to exclusive would have its leader delete every handler's table.
    ``ValueError`` for a zone at a bucket's root, which has no folder beside it."""
    root = zone.rstrip("/")
    scheme, _, path = root.rpartition("://")
    if scheme and "/" not in path:
        raise ValueError(
            f"the zone {zone} is a bucket's root: a broadcast handler's table goes beside "
            "the zone, so give the zone a prefix (s3://bucket/zone)"
        )
    if not path:
        raise ValueError(f"the zone {zone!r} has no folder to put a broadcast table beside")
    return f"{root}{BROADCAST_ZONES}/{position}"


# A position's name goes into broker names (a NATS consumer name, a Kafka group id):
# letters, digits, '_' and '-' are safe in both.
_POSITION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def broadcast_id_problem(member_id: MemberId, *, chosen: bool) -> str | None:
    """Why ``member_id`` cannot name a broadcast handler's position; None when it can.

    The id must be ``chosen`` (set by the operator, not made up from host and process
    id): a handler restarted under another id would leave its position behind and start
    a new one from the log's beginning, landing everything again into a new table. And it
    must be safe in broker names."""
    if not chosen:
        return (
            "a broadcast handler needs a stable id (SHOAL_HANDLER_ID): its position and "
            "its table are named after it, and a restart under another id would consume "
            "the whole log again"
        )
    if _POSITION_NAME.fullmatch(member_id) is None:
        return (
            f"handler id {member_id!r} names a broadcast position: use 1 to 64 letters, "
            "digits, '_' or '-'"
        )
    return None


def autoscaling_problem(mode: ConsumptionMode) -> str | None:
    """Why the group's handler pool may not be scaled with its load; None when it may.

    A broadcast handler is a subscriber, not capacity: another one adds a copy of
    everything (from the log's beginning), and removing one drops a copy."""
    if mode is ConsumptionMode.BROADCAST:
        return (
            "autoscaling (SHOAL_SCALING_SCALER) adds or removes copies of everything in the "
            "broadcast mode, not capacity: turn it off (SHOAL_SCALING_SCALER=none)"
        )
    return None


def retention_problem(mode: ConsumptionMode, *, deleted_on_ack: bool) -> str | None:
    """Why ``mode`` cannot run on a log whose messages are ``deleted_on_ack``; None when it
    can. Broadcast cannot: the first position to ack a message would take it from the
    others (and a NATS work-queue stream refuses a second consumer of the same subjects,
    err 10100)."""
    if mode is ConsumptionMode.BROADCAST and deleted_on_ack:
        return (
            "the broadcast mode needs a log that keeps acked messages for the other "
            "positions: SHOAL_NATS_RETENTION=limits, not workqueue"
        )
    return None


def contends_for_holds(mode: ConsumptionMode) -> bool:
    """Whether a handler must take a partition's group-wide hold before consuming it.

    Only in exclusive mode: the hold makes the next owner wait for the previous one's
    drain, which is what keeps the order. Shared owners compete on purpose (the broker
    splits the messages, the landed table keeps them exactly once) and a broadcast
    handler's position is its own, so nobody else could consume from it; in both a
    handler keeps its holds to itself."""
    return mode is ConsumptionMode.EXCLUSIVE
