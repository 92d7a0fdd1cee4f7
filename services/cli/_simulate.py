"""``shoal simulate``: replay one membership change under several strategies, side by side.

Composition only: it names the members, builds the requests, calls the strategies and
``minimum_moves`` from core, times them and lays the numbers out. Every assignment rule
(balance, stickiness, validation of the request) lives in core.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from core.assignment import (
    DEFAULT_STRATEGY,
    AssignmentOptions,
    AssignmentRequest,
    AssignmentResult,
    minimum_moves,
    strategy_named,
)
from core.model import Assignment, MemberId, Partition

__all__ = [
    "DEFAULT_STRATEGIES",
    "FAN_OUT",
    "Outcome",
    "Scenario",
    "SimulationError",
    "fewest_moves_line",
    "load_weights",
    "outcomes_table",
    "parse_strategies",
    "scenario_of",
    "simulate",
    "to_json",
]

DEFAULT_STRATEGIES = ("modulo", "range", "consistent-hash", "sticky", "weighted")
FAN_OUT = "fan-out"
MEMBER_PREFIX = "c"

_PARTITION_KEY = re.compile(r"[0-9]+")


class SimulationError(ValueError):
    """The simulation's input does not make sense; the message is one line for the user."""


@dataclass(frozen=True, slots=True)
class Scenario:
    """P partitions, the members before, and who joins, leaves or crashes."""

    partitions: int
    initial: tuple[MemberId, ...]
    joined: tuple[MemberId, ...] = ()
    left: tuple[MemberId, ...] = ()
    crashed: tuple[MemberId, ...] = ()

    @property
    def final(self) -> tuple[MemberId, ...]:
        """The members after the change: survivors in their order, then the joiners."""
        gone = set(self.left) | set(self.crashed)
        return tuple(m for m in self.initial if m not in gone) + self.joined

    def describe(self) -> str:
        """One line, e.g. ``128 partitions, 4 consumers (c1..c4); c5 joins -> 5 consumers``."""
        changes = [f"{m} joins" for m in self.joined]
        changes += [f"{m} leaves" for m in self.left]
        changes += [f"{m} crashes" for m in self.crashed]
        before = f"{self.partitions} partitions, {_count(self.initial)} ({_span(self.initial)})"
        if not changes:
            return f"{before}; no membership change"
        return f"{before}; {', '.join(changes)} -> {_count(self.final)}"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one strategy did with the scenario."""

    strategy: str
    before: Assignment
    after: Assignment
    moved: int
    minimum: int
    max_load: int
    min_load: int
    seconds: float

    @property
    def even(self) -> bool:
        """Partition counts of the live members differ by at most one."""
        return self.max_load - self.min_load <= 1

    @property
    def exclusive(self) -> bool:
        """One owner per partition at most: the assignments ``minimum`` is defined for."""
        return all(len(owners) <= 1 for owners in self.after.owners)


def scenario_of(
    partitions: int,
    consumers: int,
    join: int | None = None,
    leave: Sequence[str] = (),
    crash: Sequence[str] = (),
) -> Scenario:
    """Name members ``c1..cN`` (joiners ``c{N+1}..``) and check the change is possible.

    ``join=None`` means one joiner when nobody leaves or crashes (so that the default
    scenario shows something), else none. The partition count is left for core to
    validate. Raises ``SimulationError``.
    """
    if join is None:
        join = 0 if leave or crash else 1
    if consumers < 1:
        raise SimulationError(f"--consumers must be at least 1, got {consumers}")
    if join < 0:
        raise SimulationError(f"--join must be 0 or more, got {join}")
    initial = tuple(f"{MEMBER_PREFIX}{i}" for i in range(1, consumers + 1))
    joined = tuple(f"{MEMBER_PREFIX}{i}" for i in range(consumers + 1, consumers + join + 1))
    seen: set[str] = set()
    for option, ids in (("--leave", leave), ("--crash", crash)):
        for member in ids:
            if member not in initial:
                raise SimulationError(
                    f"{option} {member}: no such consumer; the consumers are {_span(initial)}"
                )
            if member in seen:
                raise SimulationError(f"{member} is named more than once in --leave/--crash")
            seen.add(member)
    result = Scenario(partitions, initial, joined, tuple(leave), tuple(crash))
    if not result.final:
        raise SimulationError(
            "every consumer leaves and none joins: nobody is left to own the partitions"
        )
    return result


def parse_strategies(names: str, fan_out: bool = False) -> tuple[str, ...]:
    """``"a,b"`` -> ``("a", "b")`` in order, without repeats; ``fan_out`` adds fan-out.

    An unknown name raises core's ``UnknownStrategyError``, which lists the valid ones.
    """
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    if fan_out:
        wanted.append(FAN_OUT)
    if not wanted:
        raise SimulationError("--strategies names no strategy")
    for name in wanted:
        strategy_named(name)
    return tuple(dict.fromkeys(wanted))


def load_weights(path: Path) -> dict[Partition, float]:
    """Read a JSON object ``{"partition": weight, ...}``, or the file ``shoal analytics
    weights`` writes (the same object under ``"weights"``); raises ``SimulationError``.

    Ranges (partition < P, weight finite and >= 0) are core's to check.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise SimulationError(f"cannot read weights file {path}: {reason}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SimulationError(
            f"weights file {path} is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    if isinstance(data, dict) and isinstance(data.get("weights"), dict):
        data = data["weights"]
    if not isinstance(data, dict):
        raise SimulationError(
            f"weights file {path} must hold one JSON object partition -> weight, "
            f"not {type(data).__name__}"
        )
    weights: dict[Partition, float] = {}
    for key, value in data.items():
        if not _PARTITION_KEY.fullmatch(key):
            raise SimulationError(
                f"weights file {path}: key {key!r} is not a partition number (0, 1, 2, ...)"
            )
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SimulationError(
                f"weights file {path}: weight of partition {key} is {value!r}, not a number"
            )
        weights[int(key)] = float(value)
    return weights


def simulate(
    scenario: Scenario,
    strategies: Iterable[str],
    options: AssignmentOptions | None = None,
    *,
    clock: Callable[[], float] = time.perf_counter,
    repeats: int = 5,
    time_budget: float = 0.5,
) -> tuple[Outcome, ...]:
    """Run every strategy: ``before`` from nothing, then ``after`` from ``before``.

    Only the ``after`` computation is timed: the median of up to ``repeats`` runs, fewer
    once a strategy has spent ``time_budget`` seconds. Core's
    ``InvalidAssignmentRequest`` propagates unchanged.
    """
    options = options if options is not None else AssignmentOptions()
    outcomes: list[Outcome] = []
    for name in strategies:
        strategy = strategy_named(name)
        first = AssignmentRequest.of(scenario.partitions, scenario.initial, options=options)
        before = strategy.assign(first).assignment
        request = AssignmentRequest.of(scenario.partitions, scenario.final, before, options)
        times: list[float] = []
        result: AssignmentResult | None = None
        while result is None or (len(times) < repeats and sum(times) < time_budget):
            start = clock()
            result = strategy.assign(request)
            times.append(clock() - start)
        owned = result.assignment.by_member()
        loads = [len(owned.get(member, ())) for member in scenario.final]
        outcomes.append(
            Outcome(
                strategy=name,
                before=before,
                after=result.assignment,
                moved=result.moved,
                minimum=minimum_moves(request),
                max_load=max(loads),
                min_load=min(loads),
                seconds=statistics.median(times),
            )
        )
    return tuple(outcomes)


def to_json(scenario: Scenario, outcomes: Iterable[Outcome]) -> dict[str, object]:
    """The ``--json`` document; every live member is listed, owning nothing or not."""
    return {
        "scenario": {
            "description": scenario.describe(),
            "partitions": scenario.partitions,
            "members_before": list(scenario.initial),
            "members_after": list(scenario.final),
            "joined": list(scenario.joined),
            "left": list(scenario.left),
            "crashed": list(scenario.crashed),
        },
        "strategies": {
            o.strategy: {
                "before": _partitions_of(o.before, scenario.initial),
                "after": _partitions_of(o.after, scenario.final),
                "moved": o.moved,
                "minimum": o.minimum,
                "max_load": o.max_load,
                "min_load": o.min_load,
                "seconds": o.seconds,
            }
            for o in outcomes
        },
    }


def outcomes_table(outcomes: Iterable[Outcome]) -> Table:
    """Strategy, moved, minimum, max load, min load, ms: one row per strategy."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("strategy")
    for heading in ("moved", "minimum", "max load", "min load", "ms"):
        table.add_column(heading, justify="right")
    for o in outcomes:
        at_minimum = o.even and o.exclusive and o.moved == o.minimum
        moved = f"[green]{o.moved}[/green]" if at_minimum else str(o.moved)
        minimum = str(o.minimum) if o.exclusive else "n/a"
        loads = (str(o.max_load), str(o.min_load))
        if not o.even:
            loads = (f"[yellow]{o.max_load}[/yellow]", f"[yellow]{o.min_load}[/yellow]")
        table.add_row(o.strategy, moved, minimum, *loads, f"{o.seconds * 1000:.2f}")
    return table


def fewest_moves_line(outcomes: Sequence[Outcome]) -> str:
    """Which strategy moved the fewest partitions while keeping loads within one."""
    even = [o for o in outcomes if o.even]
    if not even:
        return "No strategy kept the loads within one partition of each other."
    fewest = min(o.moved for o in even)
    best = [o for o in even if o.moved == fewest]
    names = ", ".join(
        f"{o.strategy} (the default)" if o.strategy == DEFAULT_STRATEGY else o.strategy
        for o in best
    )
    at_minimum = all(o.exclusive and o.minimum == fewest for o in best)
    at_minimum_note = " (the minimum possible)" if at_minimum else ""
    return (
        f"Fewest moves while balanced (loads within one): {names}, "
        f"{fewest} partition{'s' if fewest != 1 else ''} moved{at_minimum_note}."
    )


def _partitions_of(
    assignment: Assignment, members: Iterable[MemberId]
) -> dict[MemberId, list[Partition]]:
    owned = assignment.by_member()
    return {member: list(owned.get(member, ())) for member in sorted(members, key=_member_order)}


def _member_order(member: MemberId) -> tuple[int, str]:
    digits = member.removeprefix(MEMBER_PREFIX)
    return (int(digits), member) if digits.isdigit() else (0, member)


def _count(members: Sequence[MemberId]) -> str:
    return f"{len(members)} consumer{'s' if len(members) != 1 else ''}"


def _span(members: Sequence[MemberId]) -> str:
    if len(members) <= 3:
        return ", ".join(members)
    return f"{members[0]}..{members[-1]}"
