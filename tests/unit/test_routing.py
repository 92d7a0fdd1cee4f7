"""``core.routing``: route lookup, the table's rules, and migration plans, checked over
tables reached by random sequences of migrations from the default table."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.routing import (
    LOCAL,
    ClusterMap,
    DrainStep,
    MigrationStep,
    Route,
    RouteError,
    RouteTable,
    TableStep,
    default_table,
    held_back,
    landing_clusters,
    names_cluster,
    parse_cluster_map,
    plan_migration,
    produce_targets,
    route_for,
    subscribed_clusters,
    tables_of,
    validate_table,
)

EW = parse_cluster_map("east=nats://127.0.0.1:4222|nats://127.0.0.2:4222,west=nats://w:4222")
PREFIXES = ("a", "ab", "abc", "b")
PROJECTS = ("a", "ab", "abc", "abd", "ax", "b", "bz", "c")


def cluster_maps() -> st.SearchStrategy[ClusterMap]:
    return st.integers(2, 4).map(
        lambda n: ClusterMap(tuple((f"dc{i}", (f"nats://10.0.0.{i}:4222",)) for i in range(n)))
    )


@st.composite
def histories(draw: st.DrawFn) -> tuple[ClusterMap, RouteTable, tuple[MigrationStep, ...], str]:
    """A cluster map, a table reached by earlier migrations, and one more plan with its
    prefix."""
    clusters = draw(cluster_maps())
    table = default_table(clusters)
    moves = st.tuples(st.sampled_from(PREFIXES), st.sampled_from(clusters.names), st.booleans())
    for prefix, target, ordered in draw(st.lists(moves, max_size=4)):
        try:
            table = tables_of(plan_migration(table, clusters, prefix, target, ordered=ordered))[-1]
        except RouteError:
            continue
    prefix, target, ordered = draw(moves)
    try:
        plan = plan_migration(table, clusters, prefix, target, ordered=ordered)
    except RouteError:
        route = route_for(prefix, table)
        assert route.produce == target and route.consume == (target,)
        plan = ()
    return clusters, table, plan, prefix


def producible(route: Route, clusters: ClusterMap) -> set[str]:
    """Every cluster some gateway may publish the route's messages to."""
    return {c for local in clusters.names for c in produce_targets(route, local)}


# -- the cluster map and the table's rules ------------------------------------------------


def test_cluster_map_parses_names_and_addresses() -> None:
    assert EW.names == ("east", "west")
    assert EW.addresses("east") == ("nats://127.0.0.1:4222", "nats://127.0.0.2:4222")
    with pytest.raises(RouteError, match="unknown cluster 'north'"):
        EW.addresses("north")


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("east", "not NAME=ADDRESS"),
        ("east=", "has no address"),
        ("east=a,east=b", "named twice"),
        ("e.st=a", "letters, digits"),
    ],
)
def test_cluster_map_refuses_bad_entries(text: str, complaint: str) -> None:
    with pytest.raises(RouteError, match=complaint):
        parse_cluster_map(text)


def test_the_default_table_produces_locally_and_consumes_everywhere() -> None:
    table = default_table(EW)
    validate_table(table, EW)
    route = route_for("anything", table)
    assert produce_targets(route, "west") == ("west", "east")
    assert subscribed_clusters(table) == ("east", "west")
    assert not held_back("anything", "east", table)


def test_longest_prefix_wins() -> None:
    a = Route("a", "east", ("east",))
    ab = Route("ab", "west", ("west",))
    table = RouteTable(1, default_table(EW).default, (a, ab))
    assert route_for("abc", table) is ab
    assert route_for("ax", table) is a
    assert route_for("b", table) is table.default


@pytest.mark.parametrize(
    ("route", "complaint"),
    [
        (Route("a", "east", ()), "consumes no cluster"),
        (Route("a", "north", ("east",)), "unknown cluster 'north'"),
        (Route("a", "east", ("west",)), "does not consume it"),
        (Route("a", "east", ("west", "east")), "not sorted and unique"),
        (Route("a", LOCAL, ("east",)), "must consume every cluster"),
        (Route("a", "east", ("east", "west"), ordered=True), "is ordered"),
        (Route("a", "east", ("east", "west"), draining=("east",)), "not produced to"),
    ],
)
def test_broken_routes_are_refused(route: Route, complaint: str) -> None:
    table = RouteTable(1, default_table(EW).default, (route,))
    with pytest.raises(RouteError, match=complaint):
        validate_table(table, EW)


def test_two_routes_for_one_prefix_are_refused() -> None:
    route = Route("a", "east", ("east",))
    with pytest.raises(RouteError, match="two routes"):
        validate_table(RouteTable(1, default_table(EW).default, (route, route)), EW)


# -- migration requests --------------------------------------------------------------------


def test_unordered_plan_steps() -> None:
    table = tables_of(plan_migration(default_table(EW), EW, "a", "east", ordered=False))[-1]
    plan = plan_migration(table, EW, "a", "west", ordered=False)
    assert [type(step) for step in plan] == [TableStep, TableStep, DrainStep, TableStep]
    consume, produce, drain, only = plan
    assert isinstance(consume, TableStep) and isinstance(produce, TableStep)
    assert isinstance(drain, DrainStep) and isinstance(only, TableStep)
    assert route_for("a1", consume.table) == Route("a", "east", ("east", "west"))
    assert route_for("a1", produce.table) == Route(
        "a", "west", ("east", "west"), draining=("east",)
    )
    assert drain.clusters == ("east",)
    assert route_for("a1", only.table) == Route("a", "west", ("west",))
    assert [t.version for t in tables_of(plan)] == [3, 4, 5]


def test_ordered_plan_holds_the_target_back_until_the_source_drained() -> None:
    table = tables_of(plan_migration(default_table(EW), EW, "a", "east", ordered=True))[-1]
    produce, drain, only = plan_migration(table, EW, "a", "west", ordered=True)
    assert isinstance(produce, TableStep) and isinstance(only, TableStep)
    assert isinstance(drain, DrainStep) and drain.clusters == ("east",)
    assert held_back("a1", "west", produce.table)
    assert not held_back("a1", "east", produce.table)
    assert produce_targets(route_for("a1", produce.table), "east") == ("west",)
    assert not held_back("a1", "west", only.table)
    assert not held_back("b1", "west", produce.table)
    # a reader still on the table before the switch does not take west's a-messages as
    # its own: it reads the stored table (``produce``) before it lands them
    assert not names_cluster("a1", "west", table) and names_cluster("a1", "west", produce.table)


@pytest.mark.parametrize(
    ("prefix", "target", "complaint"),
    [
        ("a", "north", "unknown cluster 'north'"),
        ("", "east", "not empty"),
        ("a.b", "east", "letters, digits"),
    ],
)
def test_bad_migration_requests_are_refused(prefix: str, target: str, complaint: str) -> None:
    with pytest.raises(RouteError, match=complaint):
        plan_migration(default_table(EW), EW, prefix, target, ordered=False)


def test_moving_to_where_it_already_is_is_refused() -> None:
    table = tables_of(plan_migration(default_table(EW), EW, "a", "east", ordered=False))[-1]
    with pytest.raises(RouteError, match="already go to 'east' only"):
        plan_migration(table, EW, "a", "east", ordered=False)


# -- properties ------------------------------------------------------------------------------


@given(histories())
def test_every_table_of_a_plan_is_valid_and_versions_grow_by_one(
    history: tuple[ClusterMap, RouteTable, tuple[MigrationStep, ...], str],
) -> None:
    clusters, table, plan, _ = history
    version = table.version
    for stored in tables_of(plan):
        validate_table(stored, clusters)
        version += 1
        assert stored.version == version


@given(histories())
def test_no_step_strands_an_accepted_message(
    history: tuple[ClusterMap, RouteTable, tuple[MigrationStep, ...], str],
) -> None:
    """A cluster leaves a project's consume list only after a drain step for it, and only
    when no gateway may still publish that project to it."""
    clusters, before, plan, prefix = history
    drained: set[str] = set()
    for step in plan:
        if isinstance(step, DrainStep):
            assert step.prefix == prefix
            drained.update(step.clusters)
            continue
        for project in PROJECTS:
            old, new = route_for(project, before), route_for(project, step.table)
            if not project.startswith(prefix):
                assert old == new  # other projects are not touched
            assert producible(old, clusters) <= set(old.consume)
            for gone in set(old.consume) - set(new.consume):
                assert gone in drained and gone not in producible(old, clusters)
        before, drained = step.table, set()


@given(histories())
def test_a_plan_ends_on_the_target_only(
    history: tuple[ClusterMap, RouteTable, tuple[MigrationStep, ...], str],
) -> None:
    _, _, plan, prefix = history
    if plan:
        last = route_for(prefix, tables_of(plan)[-1])
        assert last.consume == (last.produce,) and not last.draining
        assert landing_clusters(last) == (last.produce,)
        assert subscribed_clusters(tables_of(plan)[-1])


@given(histories())
def test_an_ordered_route_never_lands_its_target_beside_another_cluster(
    history: tuple[ClusterMap, RouteTable, tuple[MigrationStep, ...], str],
) -> None:
    _, _, plan, prefix = history
    for table in tables_of(plan):
        route = route_for(prefix, table)
        if route.ordered:
            assert produce_targets(route, "dc0") == (route.produce,)
            landing = landing_clusters(route)
            assert route.produce not in landing or landing == (route.produce,)
