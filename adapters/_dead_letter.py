"""The dead-letter hook every transport calls once per dead letter, after storing it.

A dead letter is a message that cannot be processed (``Delivery.dead_letter()``, reason
``unprocessable``) or ran out of deliveries (reason ``max_deliver``). Each transport
stores it in its own dialect (the dead-letter stream, topic or list) and then awaits the
hook (``log_dead_letter`` unless the composition root passes another).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Literal, TypeAlias

from core.messages import Envelope

__all__ = ["DeadLetterHook", "DeadLetterReason", "log_dead_letter"]

log = logging.getLogger("shoal.dead_letters")

DeadLetterReason: TypeAlias = Literal["unprocessable", "max_deliver"]
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
