"""Backlog monitoring: the rules behind the leader's backlog alert, the group's totals and
the project volume ranking.

Ages are the caller's clock minus the broker's store time (``Transport.oldest_unacked``);
this module reads no clock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from core.model import Partition

__all__ = [
    "BacklogAlerts",
    "GroupBacklog",
    "ProjectVolume",
    "backlog_alerts",
    "group_backlog",
    "merge_top_projects",
    "top_projects",
    "unacked_age",
]

#: A project and how many of its messages were counted in the window.
ProjectVolume = tuple[str, int]


def unacked_age(stored_at: float | None, now: float) -> float | None:
    """Seconds the oldest unacked message has waited at ``now``; None when there is none.
    Never negative: a broker clock a little ahead of the caller's reads as age 0."""
    return None if stored_at is None else max(now - stored_at, 0.0)


@dataclass(frozen=True, slots=True)
class BacklogAlerts:
    """The outcome of one look at the partitions' oldest unacked ages.

    ``alerting``: the partitions past the threshold after this look; ``raised``: those
    that crossed it in this look; ``cleared``: those that recovered in it (both sorted).
    """

    alerting: frozenset[Partition]
    raised: tuple[Partition, ...]
    cleared: tuple[Partition, ...]


def backlog_alerts(
    ages: Mapping[Partition, float | None],
    threshold: float,
    alerting: frozenset[Partition],
) -> BacklogAlerts:
    """Which partitions alert after a look that read ``ages``, given those that alerted
    before it (``alerting``).

    ``ages[p]`` is the age in seconds of ``p``'s oldest unacked message, or None when
    nothing is unacked. A partition alerts while its age is above ``threshold`` and
    recovers once it is at or below it, or its backlog is empty. A partition missing from
    ``ages`` (its read failed) keeps its state: a broker that does not answer neither
    raises nor clears an alert. Raises ``ValueError`` for a negative threshold.
    """
    if threshold < 0:
        raise ValueError(f"threshold {threshold} is negative")
    now_alerting = set(alerting)
    for partition, age in ages.items():
        if age is not None and age > threshold:
            now_alerting.add(partition)
        else:
            now_alerting.discard(partition)
    after = frozenset(now_alerting)
    return BacklogAlerts(
        alerting=after,
        raised=tuple(sorted(after - alerting)),
        cleared=tuple(sorted(alerting - after)),
    )


@dataclass(frozen=True, slots=True)
class GroupBacklog:
    """One consumer group's backlog over its partitions.

    ``total_lag``: the sum of the lags read (None when none could be read); ``unknown``:
    how many partitions' lag could not be read; ``max_oldest_age``: the oldest unacked
    message's age over the partitions (None when none is known)."""

    total_lag: int | None
    unknown: int
    max_oldest_age: float | None


def group_backlog(lags: Sequence[int | None], ages: Sequence[float | None]) -> GroupBacklog:
    """The group's totals from each partition's lag and oldest unacked age (None: unknown,
    or for an age also nothing unacked)."""
    known = [lag for lag in lags if lag is not None]
    known_ages = [age for age in ages if age is not None]
    return GroupBacklog(
        total_lag=sum(known) if known else None,
        unknown=len(lags) - len(known),
        max_oldest_age=max(known_ages) if known_ages else None,
    )


def top_projects(counts: Mapping[str, int], k: int) -> tuple[ProjectVolume, ...]:
    """The ``k`` projects with the most messages, most first (ties by project id), and
    none with a count of 0 or less. Raises ``ValueError`` for a negative ``k``."""
    if k < 0:
        raise ValueError(f"k {k} is negative")
    ranked = sorted(
        ((project, n) for project, n in counts.items() if n > 0), key=lambda pn: (-pn[1], pn[0])
    )
    return tuple(ranked[:k])


def merge_top_projects(
    rankings: Iterable[Iterable[ProjectVolume]], k: int
) -> tuple[ProjectVolume, ...]:
    """The ``k`` projects with the most messages over several members' rankings, a
    project's counts summed. Exact when each project is counted by one member (a project
    lives on one partition, and a partition has one owner outside handoffs and fan-out);
    otherwise a project may be ranked a little low, never above its real count."""
    total: Counter[str] = Counter()
    for ranking in rankings:
        for project, n in ranking:
            total[project] += n
    return top_projects(total, k)
