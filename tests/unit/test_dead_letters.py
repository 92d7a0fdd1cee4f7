"""``core.dead_letters.split_by_store``: which store acts on which named ids, with several
datacenters' dead-letter stores. An id no store holds refuses the whole request."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.dead_letters import UnknownDeadLetterError, split_by_store

ids = st.sampled_from([f"m{i}" for i in range(12)])
stores = st.dictionaries(st.sampled_from(["east", "west", "north"]), st.frozensets(ids))


@given(held=stores, named=st.lists(ids, max_size=8))
def test_each_named_id_is_acted_on_in_every_store_that_holds_it_or_nothing_is(
    held: dict[str, frozenset[str]], named: list[str]
) -> None:
    unknown = {
        message_id for message_id in named if not any(message_id in h for h in held.values())
    }
    if unknown:
        with pytest.raises(UnknownDeadLetterError) as refused:
            split_by_store(held, named)
        assert all(message_id in str(refused.value) for message_id in unknown)
        return
    split = split_by_store(held, named)
    assert set(split) <= set(held)
    for store, chosen in split.items():
        assert chosen, "a store with nothing to do is left out"
        assert set(chosen) <= held[store]
        assert len(chosen) == len(set(chosen)), "each id once per store"
    for message_id in named:
        holders = {store for store, h in held.items() if message_id in h}
        acting = {store for store, chosen in split.items() if message_id in (chosen or ())}
        assert acting == holders


@given(held=stores)
def test_every_letter_means_every_store(held: dict[str, frozenset[str]]) -> None:
    assert split_by_store(held, None) == dict.fromkeys(held)


def test_the_named_order_is_kept_within_a_store() -> None:
    held = {"east": {"a", "b", "c"}, "west": {"c"}}
    assert split_by_store(held, ["c", "a"]) == {"east": ["c", "a"], "west": ["c"]}
