"""Kafka's log dialect decides every request by replay (``adapters.kafka._kv._Replica``):
the same records give every reader the same outcomes, time is the log's, and a reader
that starts past offset 0 decides nothing until it loaded the snapshot of its start."""

from __future__ import annotations

import base64
import json

import pytest

from adapters.kafka._kv import _Outcome, _Replica
from core.keyspace import KeyValue


def record(op: str, rid: str = "", **fields: object) -> bytes:
    return json.dumps({"op": op, "rid": rid, **fields}).encode()


def put(op: str, rid: str, key: str, value: bytes, **fields: object) -> bytes:
    return record(op, rid, key=key, value=base64.b64encode(value).decode(), **fields)


LOG = [
    (100.0, put("create", "c1", "k", b"1", lease=None)),
    (100.1, put("create", "c2", "k", b"2", lease=None)),  # exists
    (100.2, put("update", "u1", "k", b"3", expected=2, lease=None)),  # 2 = 2*0+2
    (100.3, record("grant", "g1", ttl=1.0)),  # lease 4
    (100.4, put("create", "c3", "l", b"", lease=4)),
    (100.9, record("keep", "k1", lease=4)),  # deadline 101.9
    (101.95, record("tick")),  # ends lease 4, deleting l
    (102.0, record("keep", "k2", lease=4)),
]


def replay(log: list[tuple[float, bytes]]) -> tuple[_Replica, dict[str, _Outcome]]:
    replica = _Replica(history=64)
    outcomes: dict[str, _Outcome] = {}
    for offset, (stamp, raw) in enumerate(log):
        outcomes.update(replica.apply(offset, stamp, raw))
    return replica, outcomes


def test_requests_are_decided_by_their_position_and_time_is_the_logs() -> None:
    replica, outcomes = replay(LOG)
    assert outcomes["c1"] == _Outcome(2)
    assert outcomes["c2"].refused == "conflict"
    assert outcomes["u1"] == _Outcome(6)
    assert outcomes["g1"] == _Outcome(4)
    assert outcomes["c3"] == _Outcome(10)
    assert outcomes["k1"] == _Outcome(0)
    assert outcomes["k2"].refused == "lease"  # ended at the tick, the log's time 101.95
    assert replica.space is not None
    assert replica.space.listing("").entries == (KeyValue("k", b"3", 6),)
    assert replica.space.changes_after(10) is not None
    assert [(c.key, c.value, c.revision) for c in replica.space.changes_after(10) or []] == [
        ("l", None, 13)  # the expiry's revision at offset 6: 2*6+1
    ]


def test_time_never_runs_back_with_the_brokers_clock() -> None:
    log = [
        (100.0, record("grant", "g", ttl=1.0)),  # lease 1, deadline 101
        (101.5, record("tick")),  # ends it
        (99.0, record("keep", "k", lease=1)),  # a clock stepped back changes nothing
    ]
    _, outcomes = replay(log)
    assert outcomes["k"].refused == "lease"


def test_a_reader_starting_past_zero_waits_for_its_starts_snapshot_then_replays() -> None:
    # A compaction at upto=3: the state before offset 3 and the log's time, stored at 5
    # (after two more requests); the records before 3 are then deleted.
    upto = 3
    before, _ = replay(LOG[:upto])
    assert before.space is not None
    snapshot = record("snapshot", upto=upto, clock=before.clock, image=before.space.image())
    log = [*LOG[:5], (100.5, snapshot), *LOG[5:]]
    whole, expected = replay(log)
    reader = _Replica(history=64)
    decided: dict[str, _Outcome] = {}
    for offset in range(upto, len(log)):
        if offset == 5:
            assert decided == {} and reader.space is None  # nothing decided on a guess
        decided.update(reader.apply(offset, *log[offset]))
    assert decided == {rid: expected[rid] for rid in ("g1", "c3", "k1", "k2", "")}
    assert reader.space is not None and whole.space is not None
    assert reader.space.listing("") == whole.space.listing("")


def test_a_snapshot_of_another_start_is_not_loaded() -> None:
    reader = _Replica(history=8)
    assert reader.apply(7, 1.0, record("snapshot", upto=5, clock=0.0, image={})) == []
    assert reader.space is None


def test_a_jump_in_the_offsets_reloads_the_state() -> None:
    replica, _ = replay(LOG[:2])
    assert replica.space is not None
    assert replica.apply(9, 100.0, record("tick")) == []  # records were deleted under it
    assert replica.space is None


def test_a_malformed_record_is_refused_and_changes_nothing() -> None:
    replica, _ = replay(LOG[:1])
    space = replica.space
    assert space is not None
    for raw in (b"{", b"[]", record("create", "x")):
        with pytest.raises(ValueError):
            replica.apply(replica.next, 100.0, raw)
    assert space.listing("").entries == (KeyValue("k", b"1", 2),)
