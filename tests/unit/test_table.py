"""``core.table``: which positions a batch settles and which messages it leaves out
(``plan_landing``), the settled places of one log (``Settled``) against a plain set,
a new message at a position a row already holds (a log that handed it out again),
how an unconfirmed commit is recognised (``commit_landed``), which days compaction
rewrites (``days_to_compact``) and which files of a day it merges (``compaction_groups``);
when a rewrite can be undone (``plan_repair``) and how short a vacuum retention may be."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.table import (
    DayFiles,
    LoggedFile,
    Settled,
    commit_landed,
    compaction_groups,
    days_to_compact,
    log_key,
    plan_landing,
    plan_repair,
    transaction_app_id,
    vacuum_retention_problem,
)

LOGS = (log_key("nats:S@t1", 0), log_key("nats:S@t1", 1), log_key("kafka:c/t", 0))
POSITIONS = 40
MESSAGES = "abcdefghij"

positions = st.integers(0, POSITIONS)
places = st.tuples(positions, st.sampled_from(MESSAGES[:3]))


@st.composite
def settled_logs(draw: st.DrawFn) -> Settled:
    """A ``Settled`` reached the way the lander reaches one: a floor and rows found at or
    above it, then additions and raised floors in any order. Rows of several messages may
    share a position (the log handed it out again)."""
    settled = Settled(draw(positions)).adding(draw(st.sets(places)))
    for step in draw(st.lists(st.one_of(st.integers(0, POSITIONS), st.sets(places)))):
        settled = settled.raised_to(step) if isinstance(step, int) else settled.adding(step)
    return settled


def members(settled: Settled) -> set[tuple[int, str]]:
    return {(p, m) for p in range(POSITIONS + 2) for m in MESSAGES[:3] if settled.settles(p, m)}


@given(settled_logs(), st.sets(places))
def test_adding_settles_exactly_the_places_added(
    settled: Settled, added: set[tuple[int, str]]
) -> None:
    after = settled.adding(added)
    assert members(after) == members(settled) | added
    assert after.floor == settled.floor


@given(settled_logs(), positions)
def test_raising_settles_everything_below_and_a_floor_never_goes_down(
    settled: Settled, floor: int
) -> None:
    after = settled.raised_to(floor)
    below = {(p, m) for p in range(floor) for m in MESSAGES[:3]}
    assert members(after) == members(settled) | below
    assert after.floor == max(settled.floor, floor)


@given(settled_logs())
def test_only_positions_at_or_above_the_floor_are_remembered(settled: Settled) -> None:
    assert all(p >= settled.floor for p in settled.above), "memory bounded by the floor"
    assert not Settled().settles(0, "a") and Settled() == Settled(0, {})


@given(settled_logs(), places)
def test_a_row_settles_only_its_own_message_at_its_position(
    settled: Settled, place: tuple[int, str]
) -> None:
    position, message = place
    held = settled.above.get(position, frozenset())
    assert settled.reused(position, {message}) == (bool(held) and message not in held)
    if settled.reused(position, {message}):
        assert not settled.settles(position, message), "a new message at a used position"


@st.composite
def batches(draw: st.DrawFn) -> list[tuple[str, int, str]]:
    """Deliveries ``(log, position, message_id)``: one position holds one message, and a
    message may sit at several positions (a redelivery copy in another log, a duplicate
    the broker kept)."""
    at = draw(st.lists(st.tuples(st.sampled_from(LOGS), positions), unique=True, max_size=30))
    messages = st.sampled_from(MESSAGES)
    deliveries = [(log, position, draw(messages)) for log, position in at]
    return deliveries + draw(st.lists(st.sampled_from(deliveries))) if deliveries else []


@given(st.dictionaries(st.sampled_from(LOGS), settled_logs()), batches())
def test_the_plan_leaves_out_every_landed_message_and_settles_every_unsettled_place(
    settled: dict[str, Settled], batch: list[tuple[str, int, str]]
) -> None:
    plan = plan_landing(settled, batch)

    def is_settled(log: str, position: int, message: str) -> bool:
        return settled.get(log, Settled()).settles(position, message)

    messages = {m for _, _, m in batch}
    left_out = {m for log, position, m in batch if is_settled(log, position, m)}
    assert plan.keep == messages - left_out, "a message any of whose places is settled"
    assert plan.keep | left_out == messages
    unsettled = {(log, p, m) for log, p, m in batch if not is_settled(log, p, m)}
    assert {(log, p, m) for log, ps in plan.places.items() for p, m in ps} == unsettled
    assert all(ps and list(ps) == sorted(set(ps)) for ps in plan.places.values())
    assert plan.settles_nothing == (not unsettled)
    delivered = {(log, p): {m for k, q, m in batch if (k, q) == (log, p)} for log, p, _ in batch}
    reused = {
        (log, p)
        for log, p, _ in unsettled
        if settled.get(log, Settled()).reused(p, delivered[log, p])
    }
    assert {(log, p) for log, ps in plan.reused.items() for p in ps} == reused
    # Once the commit is in, the same batch (a redelivery of it) settles and keeps nothing.
    after = dict(settled)
    for log, ps in plan.places.items():
        after[log] = after.get(log, Settled()).adding(ps)
    again = plan_landing(after, batch)
    assert again.settles_nothing and again.keep == frozenset()


def test_a_message_copied_to_two_logs_is_left_out_when_either_copy_is_settled() -> None:
    first, second = LOGS[0], LOGS[2]
    plan = plan_landing(
        {second: Settled(0, {9: frozenset({"m"})})},
        [(first, 4, "m"), (second, 9, "m"), (first, 5, "n")],
    )
    assert plan.keep == {"n"}
    assert plan.places == {first: ((4, "m"), (5, "n"))}, "its unsettled copy is settled too"
    assert plan.reused == {}


def test_a_new_message_at_a_position_a_row_holds_lands_and_is_named_reused() -> None:
    """A stream restored from a backup hands out positions 3 and 4 again: the rows there
    hold the messages landed before the restore, so the new ones are not taken for them."""
    log = LOGS[0]
    landed = Settled(2, {3: frozenset({"old3"}), 4: frozenset({"old4"})})
    plan = plan_landing({log: landed}, [(log, 3, "new3"), (log, 4, "old4"), (log, 5, "new5")])
    assert plan.keep == {"new3", "new5"}
    assert plan.places == {log: ((3, "new3"), (5, "new5"))}
    assert plan.reused == {log: (3,)}


@given(
    st.integers(1, 2**62),
    st.dictionaries(st.sampled_from(LOGS), st.one_of(st.none(), st.integers(1, 2**62)), max_size=3),
)
def test_a_commit_landed_when_any_of_its_logs_shows_its_token(
    token: int, tokens_now: dict[str, int | None]
) -> None:
    assert commit_landed(token, tokens_now) == (token in tokens_now.values())


def test_a_commit_landed_even_when_another_writer_has_committed_some_of_its_logs_since() -> None:
    assert commit_landed(7, {LOGS[0]: 7, LOGS[1]: 8})
    assert not commit_landed(7, {LOGS[0]: 8, LOGS[1]: None})
    assert not commit_landed(7, {})


def test_every_log_has_an_app_transaction_of_its_own() -> None:
    keys = {log_key(log_id, p) for log_id in ("nats:S@t1", "nats:S@t2", "a#b") for p in (0, 1)}
    assert len({transaction_app_id(k) for k in keys}) == len(keys) == 6


days = st.lists(
    st.builds(
        DayFiles,
        st.sampled_from([f"2026-11-{d:02}" for d in range(20, 30)]),
        st.integers(0, 80),
        st.integers(0, 80),
    ),
    unique_by=lambda d: d.day,
    max_size=10,
)


@given(days, st.sampled_from([f"2026-11-{d:02}" for d in range(19, 31)]), st.integers(2, 60))
def test_closed_days_with_two_small_files_and_an_open_day_with_enough_are_compacted(
    partitions: list[DayFiles], today: str, open_day_files: int
) -> None:
    due = days_to_compact(partitions, today, open_day_files=open_day_files)
    assert due == sorted(due)
    for day in partitions:
        needed = 2 if day.day < today else open_day_files
        assert (day.day in due) == (day.small >= needed), day


def test_a_day_with_one_small_file_is_left_alone() -> None:
    closed = [DayFiles("2026-11-24", 30, 1), DayFiles("2026-11-25", 3, 2)]
    assert days_to_compact(closed, "2026-11-27", open_day_files=50) == ["2026-11-25"]
    assert days_to_compact([DayFiles("2026-11-27", 49, 49)], "2026-11-27", open_day_files=50) == []


def test_a_redelivered_pack_one_part_of_which_landed_is_no_reuse() -> None:
    """A pack's parts share a position: its landed part's row is not a sign that the log
    handed the position out again; new messages at a landed position are."""
    log = LOGS[0]
    settled = {log: Settled(0, {7: frozenset({"a"})})}
    again = plan_landing(settled, [(log, 7, "a"), (log, 7, "b"), (log, 7, "c")])
    assert again.keep == {"b", "c"} and again.reused == {}
    restored = plan_landing(settled, [(log, 7, "x"), (log, 7, "y")])
    assert restored.keep == {"x", "y"} and restored.reused == {log: (7,)}


day_files = st.dictionaries(
    st.text("abcdef", min_size=1, max_size=4), st.integers(0, 120), max_size=30
).map(lambda sizes: list(sizes.items()))


@given(day_files, st.integers(1, 100))
def test_compaction_merges_small_files_in_groups_within_the_target(
    files: list[tuple[str, int]], target: int
) -> None:
    groups = compaction_groups(files, target)
    size = dict(files)
    merged = [path for group in groups for path in group]
    assert len(merged) == len(set(merged)), "a file in two groups"
    assert all(size[path] < target for path in merged), "a file at the target rewritten"
    assert all(len(group) >= 2 for group in groups), "a group that merges nothing"
    assert all(sum(size[p] for p in group) <= target for group in groups)
    assert compaction_groups(list(reversed(files)), target) == groups, "depends on the order"


@given(st.lists(st.integers(0, 49), min_size=2, max_size=30), st.integers(100, 1000))
def test_files_that_fit_the_target_together_become_one(sizes: list[int], target: int) -> None:
    files = [(f"f{i}", size) for i, size in enumerate(sizes)]
    groups = compaction_groups(files, target)
    if sum(sizes) <= target:
        assert sorted(groups[0]) == sorted(path for path, _ in files)
    else:
        assert len(groups) > 1 or sum(len(g) for g in groups) < len(files)


# --- undoing a rewrite (plan_repair) and the vacuum's floor ---------------------------------

paths = st.text("abcdef", min_size=1, max_size=4).map(lambda p: f"date=2026-11-21/{p}.parquet")


@st.composite
def rewrites(draw: st.DrawFn) -> tuple[list[LoggedFile], list[LoggedFile]]:
    """A compaction's log entry: files removed and the files added in their place, the rows
    the same, nothing a data change."""
    names = draw(st.lists(paths, min_size=3, max_size=8, unique=True))
    cut = draw(st.integers(1, len(names) - 1))
    rows = draw(st.lists(st.integers(0, 1000), min_size=cut, max_size=cut))
    removed = [LoggedFile(p, False, r) for p, r in zip(names[:cut], rows, strict=True)]
    added_paths = names[cut:]
    split = [sum(rows) // len(added_paths)] * len(added_paths)
    split[0] += sum(rows) - sum(split)
    added = [LoggedFile(p, False, r) for p, r in zip(added_paths, split, strict=True)]
    return removed, added


@given(rewrites())
def test_a_broken_rewrite_is_undone_whole(
    rewrite: tuple[list[LoggedFile], list[LoggedFile]],
) -> None:
    removed, added = rewrite
    plan = plan_repair(
        7, added, removed, active=[f.path for f in added], stored=[f.path for f in removed]
    )
    assert set(plan.restore) == {f.path for f in removed}
    assert set(plan.drop) == {f.path for f in added}
    assert plan.version == 7


@given(rewrites(), st.data())
def test_a_repair_that_would_lose_or_duplicate_rows_is_refused(
    rewrite: tuple[list[LoggedFile], list[LoggedFile]], data: st.DataObject
) -> None:
    removed, added = rewrite
    active = [f.path for f in added]
    stored = [f.path for f in removed]
    fault = data.draw(st.sampled_from(["append", "rows", "rewritten", "vacuumed", "undone"]))
    match = {
        "append": "changed data",
        "rows": "removed files of",
        "rewritten": "a later version removed",
        "vacuumed": "gone from storage",
        "undone": "holds",
    }[fault]
    if fault == "append":
        added = [LoggedFile(f.path, True, f.rows) for f in added]
    elif fault == "rows":
        added = [LoggedFile(added[0].path, False, (added[0].rows or 0) + 1), *added[1:]]
    elif fault == "rewritten":
        active = active[1:]
    elif fault == "vacuumed":
        stored = stored[1:]
    else:
        active = [*active, removed[0].path]
    with pytest.raises(ValueError, match=match):
        plan_repair(7, added, removed, active=active, stored=stored)


def test_without_row_counts_a_repair_relies_on_the_files() -> None:
    removed = [LoggedFile("date=d/a.parquet", False), LoggedFile("date=d/b.parquet", False)]
    added = [LoggedFile("date=d/c.parquet", False, 10)]
    plan = plan_repair(
        3,
        added,
        removed,
        active=["date=d/c.parquet"],
        stored=["date=d/a.parquet", "date=d/b.parquet"],
    )
    assert plan.restore == ("date=d/a.parquet", "date=d/b.parquet")


@given(st.floats(0.001, 1000.0), st.floats(0.1, 600.0), st.floats(0.1, 600.0))
def test_a_vacuum_retention_must_outlast_a_handlers_write_and_lease(
    hours: float, write_timeout: float, lease_ttl: float
) -> None:
    problem = vacuum_retention_problem(hours, write_timeout=write_timeout, lease_ttl=lease_ttl)
    assert (problem is None) == (hours * 3600 > write_timeout + lease_ttl)
