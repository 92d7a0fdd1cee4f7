"""What a process knows of the group, from its own sessions and from DescribeGroups.

The group's state is the last completed rebalance's ``Broadcast``: every session receives
it in SyncGroup, and anyone can read it with DescribeGroups (each member's assignment
carries it) when the group is ``Stable``. Between rebalances DescribeGroups still lists
the members present, so a member that left (LeaveGroup) or was expired is dropped at once,
before the next rebalance completes: the view is the freshest broadcast, filtered by the
latest member list taken after it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import anyio

from adapters.kafka._aiokafka import KafkaError
from adapters.kafka._coord_aiokafka import ConsumerProtocol
from adapters.kafka._coord_codec import Broadcast, decode_broadcast
from core.errors import StoreUnavailableError

__all__ = ["GroupSnapshot", "GroupView", "describe_group"]

_EMPTY_STATES = {"Empty", "Dead"}

_RETRY_WAIT = 0.1  # between DescribeGroups asked again after a retriable error


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    state: str
    members: frozenset[str]  # Kafka member ids present now
    broadcast: Broadcast | None  # the rebalance they completed (Stable groups only)
    sent_at: float  # time.monotonic() when the DescribeGroups request was sent

    @property
    def rebalancing(self) -> bool:
        """Members are present but mid-rebalance: DescribeGroups shows no broadcast then."""
        return self.state != "Stable" and self.state not in _EMPTY_STATES


async def describe_group(admin: Any, group_id: str, bound: float) -> GroupSnapshot:
    """One DescribeGroups of ``group_id``, asked again within ``bound`` while the broker
    answers with a retriable error (a new broker creates its offsets topic, and so finds
    a group's coordinator, a moment after the first request). Raises
    ``StoreUnavailableError``."""
    sent = time.monotonic()
    last: KafkaError | None = None
    try:
        with anyio.fail_after(bound):
            while True:
                try:
                    responses = await admin.describe_consumer_groups([group_id])
                    break
                except KafkaError as exc:
                    if not exc.retriable:
                        raise
                    last = exc
                    await anyio.sleep(_RETRY_WAIT)
    except TimeoutError as exc:
        raise StoreUnavailableError(
            f"Kafka: DescribeGroups {group_id} unanswered within {bound:g} s"
            + ("" if last is None else f" (last: {last!r})")
        ) from exc
    except KafkaError as exc:
        raise StoreUnavailableError(f"Kafka: DescribeGroups {group_id}: {exc!r}") from exc
    for response in responses:
        for group in response.groups:
            error_code, name, state = int(group[0]), str(group[1]), str(group[2])
            if name != group_id:
                continue
            if error_code:
                raise StoreUnavailableError(
                    f"Kafka: DescribeGroups {group_id}: error code {error_code}"
                )
            members = group[5]
            present = frozenset(str(m[0]) for m in members)
            broadcast = None
            if state == "Stable":
                broadcast = _freshest(m[-1] for m in members)
            return GroupSnapshot(state, present, broadcast, sent)
    return GroupSnapshot("Dead", frozenset(), None, sent)


def _freshest(assignments: Any) -> Broadcast | None:
    best: Broadcast | None = None
    for raw in assignments:
        if not raw:
            continue
        try:
            assignment = ConsumerProtocol.ASSIGNMENT.decode(bytes(raw))
            broadcast = decode_broadcast(bytes(assignment.user_data or b""))
        except (ValueError, TypeError, KeyError, IndexError):
            continue  # not one of ours
        if best is None or broadcast.kgen > best.kgen:
            best = broadcast
    return best


class GroupView:
    """The freshest broadcast known, and the latest member list taken after it."""

    def __init__(self) -> None:
        self._best: Broadcast | None = None
        self._best_at = -math.inf
        self._present: frozenset[str] | None = None
        self._present_at = -math.inf

    def offer(self, broadcast: Broadcast | None, at: float) -> None:
        if broadcast is None:
            return
        if self._best is None or broadcast.kgen > self._best.kgen:
            self._best, self._best_at = broadcast, at

    def observe(self, snapshot: GroupSnapshot) -> None:
        self.offer(snapshot.broadcast, snapshot.sent_at)
        if snapshot.sent_at >= self._present_at:
            empty = snapshot.state in _EMPTY_STATES or not snapshot.members
            self._present = frozenset() if empty else snapshot.members
            self._present_at = snapshot.sent_at

    def current(self) -> Broadcast | None:
        best = self._best
        if best is None:
            return None
        if self._present is not None and self._present_at >= self._best_at:
            return best.present(self._present)
        return best
