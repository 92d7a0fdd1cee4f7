"""The oldest server each guarantee needs, and the refusal when a server is older.

An older nats-server does not refuse what it cannot do: it decodes a stream configuration
leniently and drops ``allow_atomic`` and ``allow_msg_ttl`` without an error, so a batch
publish is confirmed by its last message only and a key written with a TTL never expires.
A process that connects therefore compares the version the server reports with the
features it is about to rely on, and refuses to start below them (etcd and Kafka refuse an
incompatible on-disk or protocol version the same way). The adapters also check that the
settings came back from the server; this module only holds the floors and the wording.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "ETCD",
    "NATS_ATOMIC_BATCH",
    "NATS_KILL_SAFE",
    "NATS_MESSAGE_TTL",
    "REDIS",
    "Feature",
    "Version",
    "parse_version",
    "refusal",
]

_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True, order=True)
class Version:
    major: int
    minor: int
    patch: int = 0

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


def parse_version(text: str) -> Version | None:
    """The release a server reports (``2.12.1``, ``v3.5.17``, ``2.12.0-RC.2``, ``7.4``);
    None when ``text`` names none. A pre-release counts as its release."""
    found = _VERSION.search(text)
    if found is None:
        return None
    major, minor, patch = found.groups()
    return Version(int(major), int(minor), int(patch or 0))


@dataclass(frozen=True)
class Feature:
    """Something shoal relies on, the first release that has it, and the releases in
    between that must be avoided (a known data-loss bug)."""

    name: str
    since: Version
    broken: tuple[tuple[Version, Version], ...] = ()  # inclusive ranges

    def held_by(self, version: Version) -> bool:
        return version >= self.since and not any(lo <= version <= hi for lo, hi in self.broken)

    def requirement(self) -> str:
        avoid = "".join(f", not {lo}-{hi}" for lo, hi in self.broken)
        return f"{self.name} (>= {self.since}{avoid})"


NATS_KILL_SAFE = Feature("streams that survive kill -9", Version(2, 10, 23))
NATS_MESSAGE_TTL = Feature("per-message TTL and expiry markers", Version(2, 11, 0))
NATS_ATOMIC_BATCH = Feature("atomic batch publish", Version(2, 12, 0))
ETCD = Feature(
    "no lost or inconsistent writes after a crash",
    Version(3, 4, 22),
    broken=((Version(3, 5, 0), Version(3, 5, 2)),),
)
REDIS = Feature("scripts replicated by their effects only", Version(7, 0, 0))


def refusal(server: str, reported: str, needs: Iterable[Feature]) -> str | None:
    """Why ``server`` (named as the log should show it) reporting version ``reported``
    cannot serve ``needs``, in one line; None when it can."""
    version = parse_version(reported)
    wanted = tuple(needs)
    if version is None:
        missing = wanted
        said = f"reports no version ({reported!r})"
    else:
        missing = tuple(f for f in wanted if not f.held_by(version))
        said = f"is {version}"
    if not missing:
        return None
    return f"{server} {said}; shoal needs {', '.join(f.requirement() for f in missing)}"
