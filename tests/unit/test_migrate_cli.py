"""``shoal migrate``'s runner (``services.cli._migrate.migrate``) over the in-memory route
store and fake source clusters: every step of the plan is stored in order and reported
with its duration and counts; a drain that does not finish stops the migration with the
route left draining, and running it again resumes."""

from __future__ import annotations

import pytest

from adapters.memory import InMemoryRouteStore
from core.errors import RouteError
from core.model import Partition
from core.routing import parse_cluster_map, route_for
from services.cli._migrate import MigrationError, StepDone, migrate

pytestmark = pytest.mark.anyio

CLUSTERS = parse_cluster_map("east=nats://e:4222,west=nats://w:4222")


class Source:
    """A cluster whose consumers ack ``per_check`` messages between two drain checks."""

    def __init__(self, waiting: int, per_check: int) -> None:
        self.waiting, self.per_check = waiting, per_check

    async def drain_mark(self, partition: Partition) -> int:
        return 100

    async def drained(self, partition: Partition, mark: int) -> tuple[bool, int]:
        waiting = self.waiting
        self.waiting = max(0, self.waiting - self.per_check)
        return waiting == 0, waiting


async def run(
    routes: InMemoryRouteStore, sources: dict[str, Source], *, ordered: bool, patience: float = 5
) -> list[StepDone]:
    steps: list[StepDone] = []
    await migrate(
        prefix="acme-",
        target="west",
        ordered=ordered,
        routes=routes,
        clusters=CLUSTERS,
        transports=sources,
        partitions=1,
        settle=0.0,
        drain_timeout=patience,
        report=steps.append,
    )
    return steps


async def test_unordered_steps_are_stored_and_reported() -> None:
    routes = InMemoryRouteStore()
    steps = await run(routes, {"east": Source(3, 1), "west": Source(0, 0)}, ordered=False)
    assert [s.why for s in steps] == [
        "produce to the target; the sources drain",
        "wait until the sources drained",
        "consume the target only",
    ]  # the default route consumes west already: no "consume the target too"
    assert steps[1].detail == "east: 3 messages waiting at the mark, all acked"
    table = await routes.current()
    assert table is not None and table.version == 2
    route = route_for("acme-1", table)
    assert (route.produce, route.consume, route.ordered) == ("west", ("west",), False)


async def test_ordered_steps_hold_the_target_back() -> None:
    routes = InMemoryRouteStore()
    steps = await run(routes, {"east": Source(0, 0), "west": Source(0, 0)}, ordered=True)
    assert "(target held back)" in steps[0].detail
    table = await routes.current()
    assert table is not None and route_for("acme-1", table).ordered


async def test_a_drain_that_does_not_finish_stops_and_a_rerun_resumes() -> None:
    routes = InMemoryRouteStore()
    stuck = Source(5, 0)
    with pytest.raises(MigrationError, match="not drained within"):
        await run(routes, {"east": stuck, "west": Source(0, 0)}, ordered=False, patience=0.3)
    table = await routes.current()
    assert table is not None and route_for("acme-1", table).draining == ("east",)
    stuck.per_check = 5
    steps = await run(routes, {"east": stuck, "west": Source(0, 0)}, ordered=False)
    assert steps[-1].why == "consume the target only"


async def test_moving_where_it_already_is_changes_nothing() -> None:
    routes = InMemoryRouteStore()
    await run(routes, {"east": Source(0, 0), "west": Source(0, 0)}, ordered=False)
    with pytest.raises(RouteError, match="already go to 'west' only"):
        await run(routes, {"east": Source(0, 0), "west": Source(0, 0)}, ordered=False)
    table = await routes.current()
    assert table is not None and table.version == 2
