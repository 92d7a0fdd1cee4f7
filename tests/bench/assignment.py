"""Compute time of every assignment strategy, printed as a table (never asserted).

For P=128/N=4, P=10,000/N=1,000 and P=100,000/N=10,000 it times one assignment from
nothing and one rebalance after one member joins (median of a few repeats), next to a
baseline measured in the same run: one trivial pass over the partitions that builds
the owners tuple and the ``Assignment``. The sticky strategy's targets are < 50 ms at
10,000/1,000 and < 1 s at 100,000/10,000.

A strategy whose single call would take more than ~20 s at a size is skipped there
(and at every larger size), and the table says so.

    python -m tests.bench.assignment
"""

from __future__ import annotations

import functools
import platform
import signal
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

from rich.console import Console
from rich.table import Table

from core.assignment import STRATEGIES, AssignmentRequest, AssignmentResult, Strategy
from core.model import Assignment, MemberId

__all__ = ["SIZES", "STICKY_TARGETS", "main"]


@dataclass(frozen=True, slots=True)
class Size:
    partitions: int
    members: int
    repeats: int

    @property
    def label(self) -> str:
        return f"{self.partitions:,} / {self.members:,}"


SIZES = (Size(128, 4, 11), Size(10_000, 1_000, 7), Size(100_000, 10_000, 3))
STICKY = "sticky"
STICKY_TARGETS = {(10_000, 1_000): 0.050, (100_000, 10_000): 1.0}
TOO_SLOW = 20.0  # seconds for one call: skip the strategy at this size and above
CELL_BUDGET = 12.0  # seconds for all repeats of one strategy at one size: repeat less


class _TooSlow(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Timing:
    empty: float
    join: float
    moved: int
    runs: int

    @property
    def worst(self) -> float:
        return max(self.empty, self.join)


@dataclass(frozen=True, slots=True)
class Skipped:
    reason: str


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Interrupt the (pure Python) code inside after ``seconds`` by raising ``_TooSlow``."""
    if not hasattr(signal, "setitimer"):
        yield
        return

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        raise _TooSlow

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _timed(call: Callable[[], AssignmentResult]) -> tuple[AssignmentResult, float]:
    with _deadline(TOO_SLOW):
        start = time.perf_counter()
        result = call()
        return result, time.perf_counter() - start


def member_ids(count: int) -> tuple[MemberId, ...]:
    return tuple(f"c{i}" for i in range(1, count + 1))


def baseline(size: Size) -> float:
    """Median time of one pass over the partitions building the owners tuple."""
    ids = member_ids(size.members)
    times = []
    for _ in range(max(size.repeats, 5)):
        start = time.perf_counter()
        owners = tuple((ids[p % size.members],) for p in range(size.partitions))
        Assignment(generation=1, owners=owners)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(strategy: Strategy, size: Size) -> Timing | Skipped:
    """Median from-empty and join-one-member times; ``Skipped`` if a call passes 20 s."""
    ids = member_ids(size.members)
    empty_request = AssignmentRequest.of(size.partitions, ids)
    empty_times: list[float] = []
    join_times: list[float] = []
    moved = 0
    repeats = size.repeats
    try:
        while len(join_times) < repeats:
            result, seconds = _timed(functools.partial(strategy.assign, empty_request))
            empty_times.append(seconds)
            join_request = AssignmentRequest.of(
                size.partitions, (*ids, f"c{size.members + 1}"), result.assignment
            )
            joined, seconds = _timed(functools.partial(strategy.assign, join_request))
            join_times.append(seconds)
            moved = joined.moved
            if len(join_times) == 1 and (empty_times[0] + seconds) * repeats > CELL_BUDGET:
                repeats = max(1, int(CELL_BUDGET // (empty_times[0] + seconds)))
    except _TooSlow:
        return Skipped(f"skipped, one call took over {TOO_SLOW:.0f} s (stopped)")
    return Timing(
        statistics.median(empty_times), statistics.median(join_times), moved, len(join_times)
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.2f}"


def _target(name: str, size: Size, timing: Timing | Skipped) -> tuple[str, str]:
    target = STICKY_TARGETS.get((size.partitions, size.members))
    if name != STICKY or target is None:
        return "", ""
    label = f"< {target * 1000:.0f} ms" if target < 1 else f"< {target:.0f} s"
    if isinstance(timing, Skipped):
        return label, "[red]no[/red]"
    return label, "[green]yes[/green]" if timing.worst < target else "[red]NO[/red]"


def main() -> None:
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 140)
    console.print(
        f"shoal assignment bench: Python {platform.python_version()} "
        f"({platform.python_implementation()}, {platform.machine()}), median of the runs.\n"
        "join = rebalance after one member joins, from the strategy's own from-empty result; "
        "baseline = one pass building the owners tuple and the Assignment; "
        "x base = time / baseline.",
        markup=False,
    )
    table = Table(header_style="bold")
    table.add_column("P / N", no_wrap=True)
    table.add_column("strategy", no_wrap=True)
    for heading in ("from empty ms", "x base", "join ms", "x base", "moved on join", "runs"):
        table.add_column(heading, justify="right", no_wrap=True)
    table.add_column("sticky target")
    table.add_column("met")

    notes: list[str] = []
    previous: dict[str, tuple[Size, Timing | Skipped]] = {}
    started = time.perf_counter()
    for size in SIZES:
        base = baseline(size)
        table.add_row(size.label, "[dim]baseline[/dim]", _ms(base), "1.0", _ms(base), "1.0")
        for name, strategy in STRATEGIES.items():
            timing = _predicted_skip(previous.get(name), size) or measure(strategy, size)
            previous[name] = (size, timing)
            target, met = _target(name, size, timing)
            if isinstance(timing, Skipped):
                notes.append(f"{name} at {size.label}: {timing.reason}")
                table.add_row("", name, "skipped", "", "skipped", "", "", "", target, met)
                continue
            table.add_row(
                "",
                name,
                _ms(timing.empty),
                f"{timing.empty / base:,.1f}",
                _ms(timing.join),
                f"{timing.join / base:,.1f}",
                f"{timing.moved:,}",
                str(timing.runs),
                target,
                met,
            )
        table.add_section()
    console.print(table)
    for note in notes:
        console.print(note, markup=False)
    console.print(f"total bench time {time.perf_counter() - started:.1f} s", markup=False)


def _predicted_skip(previous: tuple[Size, Timing | Skipped] | None, size: Size) -> Skipped | None:
    """Skip without running when a smaller size already shows it would pass ``TOO_SLOW``.

    Every strategy does at least one pass over the partitions, so scaling the smaller
    size's time by the partition ratio is a lower bound for this size.
    """
    if previous is None:
        return None
    smaller, timing = previous
    if isinstance(timing, Skipped):
        return Skipped("skipped, too slow at a smaller size")
    estimate = timing.worst * size.partitions / smaller.partitions
    if estimate > TOO_SLOW:
        return Skipped(
            f"skipped, one call would take over {estimate:.0f} s (scaled from {smaller.label})"
        )
    return None


if __name__ == "__main__":
    main()
