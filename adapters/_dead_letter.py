"""The dead-letter hook every transport calls once per dead letter, after storing it.

A dead letter is a message its consumer gave up on with ``Delivery.dead_letter(reason)``:
it cannot be processed (``unprocessable``) or came back after its deliveries ran out
(``max_deliver``, the rule of ``core.retry``). Each transport stores it in its own
dialect (the dead-letter stream, topic or list) and then awaits the hook
(``log_dead_letter`` unless the composition root passes another).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeAlias

from core.messages import Envelope
from core.retry import DeadLetterReason

__all__ = ["DeadLetterHook", "DeadLetterReason", "log_dead_letter"]

log = logging.getLogger("shoal.dead_letters")

DeadLetterHook: TypeAlias = Callable[[Envelope, DeadLetterReason, int], Awaitable[None]]
"""``hook(envelope, reason, attempts)``; awaited once per dead letter, after it is stored."""


async def log_dead_letter(envelope: Envelope, reason: DeadLetterReason, attempts: int) -> None:
    """The default hook: one warning line."""
    log.warning(
        "dead letter: message %s project %s partition %d (%s after %d attempts)",
        envelope.message_id,
        envelope.project_id,
        envelope.partition,
        reason,
        attempts,
    )
