"""Dead letters as the operator sees them: what is parked, and which ones a command picks.

A dead letter is a message its consumer gave up on (``core.retry``): it sits in the
transport's dead-letter store until ``replay`` puts it back on its partition or ``purge``
drops it. The rule both transports need lives here once: ``pick`` turns the ids an
operator named into the stored letters, refusing the whole request when one id is
unknown, so a typo changes nothing. With several datacenters each cluster has its own
store, and ``split_by_store`` says which store holds which of the named ids, under the
same rule.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from core.errors import ShoalError
from core.messages import Envelope
from core.retry import DeadLetterReason

_REASONS: dict[str, DeadLetterReason] = {
    "unprocessable": "unprocessable",
    "max_deliver": "max_deliver",
}

__all__ = ["DeadLetter", "UnknownDeadLetterError", "pick", "reason_of", "split_by_store"]


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One stored dead letter. ``position`` is its place in the dead-letter store (a
    stream sequence or a topic offset): unique there, while one message id may be stored
    twice (a copy whose confirmation was lost)."""

    envelope: Envelope
    reason: DeadLetterReason
    attempts: int
    position: int
    dead_at: float  # epoch seconds, as the dead-letter store recorded it


class UnknownDeadLetterError(ShoalError, LookupError):
    """A requested message id is not in the dead-letter store; nothing was changed."""


def pick(letters: Sequence[DeadLetter], message_ids: Collection[str] | None) -> list[DeadLetter]:
    """The letters a command acts on, oldest first: every letter when ``message_ids`` is
    None, else every stored copy of each named id. Raises ``UnknownDeadLetterError``
    naming the ids that are not stored (then nothing may be acted on)."""
    if message_ids is None:
        return sorted(letters, key=lambda letter: letter.position)
    wanted = set(message_ids)
    missing = wanted - {letter.envelope.message_id for letter in letters}
    if missing:
        raise _unknown(missing)
    chosen = [letter for letter in letters if letter.envelope.message_id in wanted]
    return sorted(chosen, key=lambda letter: letter.position)


def _unknown(missing: Collection[str]) -> UnknownDeadLetterError:
    return UnknownDeadLetterError(f"not in the dead-letter store: {', '.join(sorted(missing))}")


def split_by_store(
    held: Mapping[str, Collection[str]], message_ids: Collection[str] | None
) -> dict[str, list[str] | None]:
    """Which of ``message_ids`` each store acts on, given the ids each store ``held``
    (by store name): every store and every letter when ``message_ids`` is None; else each
    store that holds some of the ids, with those ids (an id stored in two stores is acted
    on in both). Raises ``UnknownDeadLetterError`` naming the ids no store holds (then no
    store may be acted on)."""
    if message_ids is None:
        return dict.fromkeys(held)
    wanted = list(dict.fromkeys(message_ids))
    missing = set(wanted).difference(*held.values())
    if missing:
        raise _unknown(missing)
    split: dict[str, list[str] | None] = {}
    for store, ids in held.items():
        mine = [message_id for message_id in wanted if message_id in ids]
        if mine:
            split[store] = mine
    return split


def reason_of(stored: str) -> DeadLetterReason:
    """A reason as a dead-letter store keeps it (text); ``unprocessable`` when unknown."""
    return _REASONS.get(stored, "unprocessable")
