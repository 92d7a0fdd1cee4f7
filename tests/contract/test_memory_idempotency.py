"""The IdempotencyStore contract on ``InMemoryIdempotencyStore`` (and its ``AnswerBook``)."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

import pytest

from adapters._idempotency_book import AnswerBook
from adapters.memory import InMemoryIdempotencyStore
from core.ports import IdempotencyStore
from tests.contract._idempotency import IdempotencyStoreContract, StoreFactory, answer


class TestInMemoryIdempotencyStore(IdempotencyStoreContract):
    @pytest.fixture
    def make_store(self) -> StoreFactory:
        books: dict[float, AnswerBook] = {}  # one shared backing per window: one "cluster"

        def make(window: float) -> AbstractAsyncContextManager[IdempotencyStore]:
            book = books.setdefault(window, AnswerBook(window, 1000))
            return InMemoryIdempotencyStore(book=book)

        return make


def test_the_book_keeps_at_most_max_entries_dropping_the_oldest() -> None:
    book = AnswerBook(600.0, 3)
    answers = [answer(key=f"k-{i}", accepted_at=1000.0 + i) for i in range(5)]
    for a in answers:
        book.put(a, 1010.0)
    assert len(book) == 3
    assert book.dropped == 2
    assert [book.get(a.scope, 1010.0) for a in answers] == [None, None, *answers[2:]]


def test_the_book_drops_answers_once_their_window_passed() -> None:
    book = AnswerBook(60.0, 100)
    old, new = answer(key="old", accepted_at=0.0), answer(key="new", accepted_at=50.0)
    book.put(old, 10.0)
    book.put(new, 10.0)
    assert book.get(old.scope, 59.0) == old
    book.put(answer(key="later", accepted_at=61.0), 61.0)  # expires the front on the way
    assert len(book) == 2
    assert book.get(old.scope, 61.0) is None
    assert book.get(new.scope, 109.9) == new
    assert book.get(new.scope, 110.0) is None
    book.put(answer(key="stale", accepted_at=0.0), 200.0)
    assert book.get(answer(key="stale").scope, 200.0) is None


def test_the_book_keeps_the_later_of_two_answers_applied_out_of_order() -> None:
    book = AnswerBook(600.0, 10)
    early, late = answer(count=1, accepted_at=100.0), answer(count=2, accepted_at=200.0)
    book.put(late, 250.0)
    book.put(early, 250.0)
    assert book.get(late.scope, 250.0) == late


def test_a_window_or_size_that_is_not_positive_is_refused() -> None:
    with pytest.raises(ValueError, match="window"):
        AnswerBook(0.0, 1)
    with pytest.raises(ValueError, match="max_entries"):
        AnswerBook(1.0, 0)
