"""``core.table``: the landed table's rule (no position is settled twice), floors, and the
landing plan, against a plain model: the set of every position ever settled."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.errors import CommitRefusedError
from core.table import (
    CHECKPOINT_EVERY,
    Commit,
    LandedFile,
    StoredFile,
    TableState,
    checkpoint_due,
    in_date_folder,
    pack,
    plan_landing,
    unreferenced,
)

LOGS = ("nats:S@t1#0", "nats:S@t1#1", "kafka:c/t#0")
POSITIONS = 40


def commit(
    version: int,
    *,
    added: tuple[LandedFile, ...] = (),
    removed: tuple[str, ...] = (),
    positions: Mapping[str, tuple[int, ...]] | None = None,
    floors: Mapping[str, int] | None = None,
) -> Commit:
    return Commit(
        version=version,
        commit_id=f"c{version}",
        writer="w",
        committed_at=0.0,
        added=added,
        removed=removed,
        positions=positions or {},
        floors=floors or {},
    )


positions_of = st.dictionaries(
    st.sampled_from(LOGS),
    st.sets(st.integers(1, POSITIONS), min_size=1, max_size=8).map(lambda s: tuple(sorted(s))),
    max_size=len(LOGS),
)
floors_of = st.dictionaries(st.sampled_from(LOGS), st.integers(0, POSITIONS), max_size=2)


@given(st.lists(st.tuples(positions_of, floors_of), max_size=25))
def test_a_commit_is_refused_exactly_when_it_settles_a_settled_position(
    attempts: list[tuple[dict[str, tuple[int, ...]], dict[str, int]]],
) -> None:
    state = TableState()
    model: set[tuple[str, int]] = set()  # every (log, position) settled so far
    for positions, floors in attempts:
        wanted = {(p, x) for p, xs in positions.items() for x in xs}
        attempt = commit(state.version + 1, positions=positions, floors=floors)
        if wanted & model:
            with pytest.raises(CommitRefusedError, match="again"):
                state.apply(attempt)
            continue
        state = state.apply(attempt)
        model |= wanted
        # A floor says: everything below it is settled (acked at the broker).
        model |= {(p, x) for p, f in floors.items() for x in range(1, f)}
        for p in LOGS:
            for x in range(1, POSITIONS + 1):
                assert state.is_settled(p, x) == ((p, x) in model)
            assert all(x >= state.floors.get(p, 0) for x in state.settled.get(p, ()))


def test_floors_only_rise_and_forget_the_positions_below_them() -> None:
    log, other = LOGS[0], LOGS[2]
    state = TableState().apply(commit(1, positions={log: (3, 5, 9)}, floors={log: 6}))
    assert state.settled == {log: frozenset({9})}
    state = state.apply(commit(2, floors={log: 2}))
    assert state.floors == {log: 6}
    assert state.is_settled(log, 1) and state.is_settled(log, 5) and not state.is_settled(log, 6)
    assert not state.is_settled(other, 1), "logs never share positions"
    state = state.apply(commit(3, floors={log: 10}))
    assert state.settled == {} and state.floors == {log: 10}


def test_versions_files_and_removals_must_follow_from_the_state() -> None:
    a, b = LandedFile("date=2026-11-25/a.parquet", 3), LandedFile("date=2026-11-25/b.parquet", 4)
    state = TableState().apply(commit(1, added=(a, b)))
    with pytest.raises(CommitRefusedError, match="does not follow"):
        state.apply(commit(3))
    with pytest.raises(CommitRefusedError, match="twice"):
        state.apply(commit(2, added=(a,)))
    with pytest.raises(CommitRefusedError, match="not in the table"):
        state.apply(commit(2, removed=("date=2026-11-25/c.parquet",)))
    merged = LandedFile("date=2026-11-25/ab.parquet", 7)
    swapped = state.apply(commit(2, removed=(a.path, b.path), added=(merged,)))
    assert swapped.files == {merged.path: merged} and swapped.rows() == state.rows() == 7
    assert state.files == {a.path: a, b.path: b}  # states are values: the old one stands


deliveries_of = st.lists(
    st.tuples(st.sampled_from(LOGS), st.integers(1, POSITIONS), st.sampled_from("abcdefgh")),
    max_size=30,
)


@given(positions_of, deliveries_of)
def test_the_plan_leaves_out_landed_messages_and_settles_every_other_position(
    already: dict[str, tuple[int, ...]], deliveries: list[tuple[str, int, str]]
) -> None:
    # A message id stands for one message: keep its positions consistent.
    position_of: dict[tuple[str, int], str] = {}
    batch = []
    for p, x, message in deliveries:
        batch.append((p, x, position_of.setdefault((p, x), message)))
    state = TableState().apply(commit(1, positions=already))
    plan = plan_landing(state, batch)
    for p, x, m in batch:
        settled = state.is_settled(p, x)
        assert (x in plan.positions.get(p, ())) == (not settled)
        if settled:
            assert m not in plan.keep, "a message with a settled position is landed already"
    for m in plan.keep:
        assert all(not state.is_settled(p, x) for p, x, mm in batch if mm == m)
    assert all(list(xs) == sorted(set(xs)) for xs in plan.positions.values())
    after = state.apply(commit(2, positions=plan.positions))  # never refused
    assert all(after.is_settled(p, x) for p, x, _ in batch)
    assert plan_landing(after, batch).settles_nothing
    assert plan_landing(after, batch).keep == frozenset()


def test_checkpoints_fall_every_hundred_commits() -> None:
    assert [v for v in range(0, 3 * CHECKPOINT_EVERY + 1) if checkpoint_due(v)] == [
        CHECKPOINT_EVERY,
        2 * CHECKPOINT_EVERY,
        3 * CHECKPOINT_EVERY,
    ]


def test_pack_first_fit_largest_first() -> None:
    files = [LandedFile(f"d/f{i}.parquet", rows) for i, rows in enumerate([5, 3, 9, 4, 12])]
    assert [[f.rows for f in b] for b in pack(files, 10)] == [[12], [9], [5, 4], [3]]
    assert pack([], 10) == []


@given(st.lists(st.integers(1, 50), max_size=40), st.integers(1, 60))
def test_pack_keeps_every_file_once_and_bins_within_the_target(
    sizes: list[int], target: int
) -> None:
    files = [LandedFile(f"d/f{i}.parquet", rows) for i, rows in enumerate(sizes)]
    bins = pack(files, target)
    assert sorted(f.path for b in bins for f in b) == sorted(f.path for f in files)
    for b in bins:
        assert len(b) == 1 or sum(f.rows for f in b) <= target
    # First fit: no two bins of several files could have been one.
    small = [sum(f.rows for f in b) for b in bins]
    assert sum(1 for n in small if n * 2 <= target) <= 1 or target < 2


def test_what_a_zone_listing_holds() -> None:
    assert in_date_folder("date=2026-11-21/h1-ab.parquet")
    assert in_date_folder("date=2026-11-21/.h1-ab.tmp")
    for other in (
        "date=2026-11-21/sub/h1.parquet",
        "date=2026-11-21/notes.txt",
        "date=2026-11-21/h1.tmp",  # a temporary file is hidden
        "date=2026-11-21/",
        "_shoal/log/00000000000000000001.json",
        "h1.parquet",
        "day=2026-11-21/h1.parquet",
    ):
        assert not in_date_folder(other), other


stored_files = st.lists(
    st.builds(
        StoredFile,
        st.sampled_from([f"date=2026-11-2{d}/f{n}.parquet" for d in (1, 2) for n in range(6)]),
        st.integers(0, 10_000),
        st.floats(0, 100, allow_nan=False),
    ),
    unique_by=lambda f: f.path,
    max_size=12,
)


@given(stored_files, st.data(), st.floats(0, 100, allow_nan=False))
def test_garbage_is_every_unnamed_file_older_than_the_cut_and_nothing_named(
    stored: list[StoredFile], data: st.DataObject, older_than: float
) -> None:
    named = data.draw(st.sets(st.sampled_from([f.path for f in stored]))) if stored else set()
    state = TableState(files={p: LandedFile(p, 1) for p in named})
    deletable, kept = unreferenced(state, stored, older_than)
    assert deletable == sorted(
        (f for f in stored if f.path not in named and f.modified < older_than),
        key=lambda f: f.path,
    )
    assert kept == sum(1 for f in stored if f.path not in named and f.modified >= older_than)
    assert not {f.path for f in deletable} & named
