"""Every exception shoal raises on purpose, in one rooted hierarchy (anyio's habit).

``ShoalError``
  - ``InvalidAssignmentRequest`` (a ``ValueError``): ``NoMembersError``,
    ``DuplicateMemberError``, ``NegativeWeightError``, ``InvalidPartitionCountError``,
    ``ImpossibleFanOutError``
  - ``UnknownStrategyError`` (a ``LookupError``), ``InvalidScalingSettings`` (a ``ValueError``)
  - coordination: ``StoreUnavailableError``, ``LeaseLostError``, ``MemberExistsError``,
    ``FencedError``, ``RevisionConflictError``
  - broker: ``PublishError`` and its ``PublishRefusedError``, ``BrokerUnavailableError``
    (a ``TimeoutError``) and its ``PositionGoneError``, ``DurabilityError``
  - any server: ``IncompatibleServerError``
  - landing: ``OwnershipLostError``, ``CommitConflictError``
  - routing: ``RouteError`` (a ``ValueError``), ``RouteConflictError``

Ports say which of these each method raises; adapters translate their client library's
errors into them.
"""

from __future__ import annotations


class ShoalError(Exception):
    """Base class of every error shoal raises on purpose."""


class InvalidAssignmentRequest(ShoalError, ValueError):
    """An assignment request that no strategy can satisfy; nothing was computed."""


class NoMembersError(InvalidAssignmentRequest):
    """The request names no member to assign partitions to."""


class DuplicateMemberError(InvalidAssignmentRequest):
    """Two members in one request share an id."""


class NegativeWeightError(InvalidAssignmentRequest):
    """A member weight or a partition weight is negative, NaN or infinite."""


class InvalidPartitionCountError(InvalidAssignmentRequest):
    """The partition count is not a positive integer, or disagrees with the previous assignment."""


class ImpossibleFanOutError(InvalidAssignmentRequest):
    """Fan-out would put more owners on a partition than its bound allows."""


class UnknownStrategyError(ShoalError, LookupError):
    """No strategy is registered under the requested name."""


class InvalidScalingSettings(ShoalError, ValueError):
    """Scaling settings that contradict each other (for example min above max)."""


class LeaseLostError(ShoalError):
    """The member's or leader's lease is gone; whatever it guarded must stop."""


class MemberExistsError(ShoalError):
    """A live member already uses this id."""


class FencedError(ShoalError):
    """A write guarded by a term or generation was refused: a newer leader or generation exists."""


class RevisionConflictError(ShoalError):
    """A conditional write of a ``CoordinationStore`` was refused: the key exists (create),
    or it is absent or its revision is not the one given (update, delete). Nothing
    changed; read again and decide again."""


class PublishError(ShoalError):
    """The broker did not confirm every message; the caller must retry or report failure."""


class PublishRefusedError(PublishError):
    """The broker answered that it stored none of the messages (a full stream, a refused
    batch): unlike an unconfirmed publish, nothing of it can turn up later."""


class BrokerUnavailableError(ShoalError, TimeoutError):
    """The broker did not confirm in time (a settlement, a commit, a position read): what
    was asked may or may not have happened; unsettled messages are redelivered."""


class PositionGoneError(BrokerUnavailableError):
    """The partition's log no longer holds the subscription's position (re-created, cut
    short, or aged out below it): the subscription is closed and the partition opened
    again, from what is stored."""


class DurabilityError(ShoalError):
    """The broker would not keep what it acknowledges as durably as configured (no fsync
    of each write, fewer replicas, other storage): refusing to run beats losing acked data."""


class IncompatibleServerError(ShoalError):
    """A server older than the features shoal relies on (``core.server_floors``), or one
    that dropped a setting it was given: refusing to start beats a guarantee that silently
    does not hold."""


class StoreUnavailableError(ShoalError):
    """The coordination store did not answer in time."""


class OwnershipLostError(ShoalError):
    """The writer no longer owns what it was writing (its lease is lost, or about to be):
    nothing was made visible."""


class CommitConflictError(ShoalError):
    """The landed table refused a commit: another commit set one of its app transactions
    (a log's, or the compaction's) after the snapshot it was planned on (``core.table``).
    This attempt committed nothing; an earlier attempt of the same commit may have."""


class RouteError(ShoalError, ValueError):
    """A cluster map, route table or migration request that breaks a routing rule
    (``core.routing``); the message says which. Nothing was changed."""


class RouteConflictError(ShoalError):
    """A route table was not stored: the stored table's version is not the one it follows
    (another change came first). Nothing changed; re-read and plan again."""
