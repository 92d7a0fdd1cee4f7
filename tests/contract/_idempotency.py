"""The IdempotencyStore contract, written once and run against every adapter.

An adapter's test module subclasses ``IdempotencyStoreContract`` and supplies a
``make_store`` fixture: ``make_store(window)`` returns a fresh, unentered store over the
test's one shared backing (a bucket, a topic): each instance is one gateway process.

The port's promise, as the gateway relies on it: an answer remembered by one gateway is
recalled by every gateway (already running or started later) for ``window`` seconds
after its ``accepted_at``, then no more; a later answer of the same scope replaces it;
scopes do not mix.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import ClassVar

import anyio
import pytest

from core.idempotency import IdempotentAnswer, fingerprint, identity, key_digest
from core.ports import IdempotencyStore

LIMIT = 20.0  # seconds any single check may take

StoreFactory = Callable[[float], AbstractAsyncContextManager[IdempotencyStore]]


def answer(
    project: str = "dev-1", key: str = "k-1", *, count: int = 3, accepted_at: float | None = None
) -> IdempotentAnswer:
    body = fingerprint([b'{"n": %d}' % i for i in range(count)])
    ident = identity(project, key, body)
    return IdempotentAnswer(
        project_id=project,
        key_digest=key_digest(project, key),
        fingerprint=body,
        series_id=ident.series_id,
        id_base=ident.id_base,
        partition=5,
        count=count,
        accepted_at=time.time() if accepted_at is None else accepted_at,
    )


class IdempotencyStoreContract:
    """Subclass as ``Test<Adapter>IdempotencyStore`` and provide ``make_store``."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]

    @pytest.fixture
    def make_store(self) -> StoreFactory:
        raise NotImplementedError

    async def test_nothing_is_recalled_for_a_key_never_remembered(
        self, make_store: StoreFactory
    ) -> None:
        with anyio.fail_after(LIMIT):
            async with make_store(600.0) as store:
                assert await store.recall("dev-1", key_digest("dev-1", "never")) is None

    async def test_an_answer_is_recalled_after_it_was_remembered(
        self, make_store: StoreFactory
    ) -> None:
        first = answer()
        with anyio.fail_after(LIMIT):
            async with make_store(600.0) as store:
                await store.remember(first)
                assert await store.recall(first.project_id, first.key_digest) == first

    async def test_every_gateway_recalls_what_another_remembered(
        self, make_store: StoreFactory
    ) -> None:
        first = answer()
        with anyio.fail_after(LIMIT):
            async with make_store(600.0) as a, make_store(600.0) as b:
                assert await b.recall(first.project_id, first.key_digest) is None
                await a.remember(first)
                # b was running all along: it sees the record written before its call
                assert await b.recall(first.project_id, first.key_digest) == first
            async with make_store(600.0) as c:  # a gateway started after a restart
                assert await c.recall(first.project_id, first.key_digest) == first

    async def test_a_later_answer_of_the_same_scope_replaces_the_earlier(
        self, make_store: StoreFactory
    ) -> None:
        first = answer(count=2)
        later = answer(count=4)
        assert first.scope == later.scope
        with anyio.fail_after(LIMIT):
            async with make_store(600.0) as a, make_store(600.0) as b:
                await a.remember(first)
                await b.remember(later)
                assert await a.recall(first.project_id, first.key_digest) == later

    async def test_scopes_do_not_mix(self, make_store: StoreFactory) -> None:
        one, other_key, other_project = answer(), answer(key="k-2"), answer(project="dev-2")
        with anyio.fail_after(LIMIT):
            async with make_store(600.0) as store:
                await store.remember(one)
                assert await store.recall("dev-1", key_digest("dev-1", "k-2")) is None
                assert await store.recall("dev-2", key_digest("dev-2", "k-1")) is None
                await store.remember(other_key)
                await store.remember(other_project)
                assert await store.recall("dev-1", one.key_digest) == one
                assert await store.recall("dev-1", other_key.key_digest) == other_key
                assert await store.recall("dev-2", other_project.key_digest) == other_project

    async def test_an_answer_older_than_the_window_is_not_recalled(
        self, make_store: StoreFactory
    ) -> None:
        stale = answer(accepted_at=time.time() - 700.0)
        with anyio.fail_after(LIMIT):
            async with make_store(600.0) as store:
                await store.remember(stale)
                assert await store.recall(stale.project_id, stale.key_digest) is None

    async def test_an_answer_expires_once_the_window_has_passed(
        self, make_store: StoreFactory
    ) -> None:
        window = 1.0
        first = answer()
        with anyio.fail_after(LIMIT):
            async with make_store(window) as a, make_store(window) as b:
                await a.remember(first)
                assert await b.recall(first.project_id, first.key_digest) == first
                await anyio.sleep(window + 0.5)
                assert await a.recall(first.project_id, first.key_digest) is None
                assert await b.recall(first.project_id, first.key_digest) is None
