"""Assignment strategies: pure functions of (partitions, members, previous, options).

Every strategy is a stateless object with a ``name`` and ``assign(request) -> result``
(see ``Strategy``); ``strategy_named`` looks one up by its configuration name.
"""

from core.assignment._minimum import minimum_moves
from core.assignment._registry import DEFAULT_STRATEGY, STRATEGIES, strategy_named
from core.assignment._types import (
    AssignmentOptions,
    AssignmentRequest,
    AssignmentResult,
    Strategy,
)

__all__ = [
    "DEFAULT_STRATEGY",
    "STRATEGIES",
    "AssignmentOptions",
    "AssignmentRequest",
    "AssignmentResult",
    "Strategy",
    "minimum_moves",
    "strategy_named",
]
