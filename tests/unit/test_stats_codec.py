"""The member stats every coordination backend stores (``adapters._json``): the project
ranking survives the wire, and reports of either version decode by the other."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from adapters._json import dumps, loads_object, stats_from_json, stats_to_json
from core.model import MemberStats

stats = st.builds(
    MemberStats,
    cpu=st.floats(0, 400, allow_nan=False),
    project_count=st.integers(0, 10**6),
    last_message_id=st.text(max_size=20),
    rate=st.floats(0, 10**6, allow_nan=False),
    top_projects=st.lists(
        st.tuples(st.text(min_size=1, max_size=12), st.integers(1, 10**6)), max_size=10
    ).map(tuple),
)


@given(stats)
def test_stats_survive_the_wire(value: MemberStats) -> None:
    raw = dumps(stats_to_json(value))
    assert stats_from_json(loads_object(raw, "member stats")) == value


def test_a_report_without_a_ranking_decodes_with_none() -> None:
    older = {"cpu": 1.5, "project_count": 2, "last_message_id": "m", "rate": 0.5}
    assert stats_from_json(older) == MemberStats(1.5, 2, "m", 0.5, ())


def test_a_report_with_a_ranking_keeps_every_older_field() -> None:
    wire = json.loads(dumps(stats_to_json(MemberStats(cpu=2.0, top_projects=(("p", 3),)))))
    assert wire["top_projects"] == [["p", 3]]
    # An older reader's model knows only these and ignores the rest (extra="ignore").
    assert {"cpu", "project_count", "last_message_id", "rate"} <= wire.keys()
