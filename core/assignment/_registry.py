"""Strategies by their configuration name."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from core.assignment._broadcast import BroadcastStrategy
from core.assignment._consistent_hash import ConsistentHashStrategy
from core.assignment._fan_out import FanOutStrategy
from core.assignment._modulo import ModuloStrategy
from core.assignment._range import RangeStrategy
from core.assignment._sticky import StickyStrategy
from core.assignment._types import Strategy
from core.assignment._weighted import WeightedStrategy
from core.errors import UnknownStrategyError

DEFAULT_STRATEGY = "sticky"

STRATEGIES: Mapping[str, Strategy] = MappingProxyType(
    {
        s.name: s
        for s in (
            ModuloStrategy(),
            RangeStrategy(),
            ConsistentHashStrategy(),
            StickyStrategy(),
            FanOutStrategy(),
            WeightedStrategy(),
            BroadcastStrategy(),
        )
    }
)


def strategy_named(name: str) -> Strategy:
    """Return the strategy registered as ``name``; ``UnknownStrategyError`` lists the valid ones."""
    try:
        return STRATEGIES[name]
    except KeyError:
        valid = ", ".join(sorted(STRATEGIES))
        raise UnknownStrategyError(f"unknown strategy {name!r}; valid: {valid}") from None
