"""Contract suite of the ``CoordinationStore`` port: versioned keys, leases, prefix watches.

Written once, run against every dialect (memory, etcd, Redis, NATS KV). A test module
subclasses ``CoordinationStoreContract`` and provides a ``harness`` fixture (a
``StoreHarness``): it opens the dialect on one fresh, isolated store, lets time pass (a
real sleep, or an injected clock moved) and restarts the server where it can.

Every wait is bounded by ``anyio.fail_after``; the only sleeps are the time under test (a
lease outliving its TTL, or kept past it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Protocol

import anyio
import pytest

from core.errors import LeaseLostError, RevisionConflictError
from core.keyspace import KeyChange, KeyValue, Resync
from core.ports import CoordinationStore
from tests.contract._coordination import (
    WAIT,
    Features,
    next_within,
    restart_checks_run,
    retry_while_unavailable,
    watching,
)

__all__ = ["CoordinationStoreContract", "StoreHarness"]

SHORT_TTL = 1.0  # a lease whose expiry is the test (etcd makes it 2 s)
KEPT_TTL = 2.0  # a lease kept alive past its TTL
LONG_TTL = 30.0  # a lease that must not expire during the test


class StoreHarness(Protocol):
    @property
    def features(self) -> Features: ...

    def store(self) -> AbstractAsyncContextManager[CoordinationStore]:
        """The dialect on this test's fresh store (every call: the same store)."""
        ...

    async def pass_time(self, seconds: float) -> None:
        """Let ``seconds`` pass for the store's leases."""
        ...

    async def restart_store(self) -> None:
        """Restart the server on the same address and data (only if ``restartable``)."""
        ...


View = dict[str, KeyValue]


def apply(view: View, event: KeyChange | Resync) -> None:
    """What a watcher does with what its watch yields."""
    if isinstance(event, Resync):
        view.clear()
        view.update({entry.key: entry for entry in event.listing.entries})
    elif event.value is None:
        view.pop(event.key, None)
    else:
        view[event.key] = KeyValue(event.key, event.value, event.revision)


async def next_change(
    events: AsyncIterator[KeyChange | Resync], seconds: float = WAIT
) -> KeyChange:
    event = await next_within(events, seconds)
    assert isinstance(event, KeyChange), f"expected a change, got {event!r}"
    return event


@pytest.mark.anyio
class CoordinationStoreContract:
    # --- keys ------------------------------------------------------------------------------

    async def test_get_returns_none_when_the_key_is_absent(self, harness: StoreHarness) -> None:
        async with harness.store() as store:
            assert await store.get("a/b") is None

    async def test_get_returns_value_and_revision_when_created(self, harness: StoreHarness) -> None:
        async with harness.store() as store:
            revision = await store.create("a/b", b"one")
            assert await store.get("a/b") == KeyValue("a/b", b"one", revision)
            assert await store.create("a/c", b"") > revision

    async def test_create_raises_conflict_when_the_key_exists(self, harness: StoreHarness) -> None:
        async with harness.store() as store, harness.store() as other:
            revision = await store.create("k", b"first")
            with pytest.raises(RevisionConflictError):
                await other.create("k", b"second")
            assert await store.get("k") == KeyValue("k", b"first", revision)

    async def test_update_applies_when_the_revision_is_current(self, harness: StoreHarness) -> None:
        async with harness.store() as store:
            first = await store.create("k", b"1")
            second = await store.update("k", b"2", revision=first)
            assert second > first
            assert await store.get("k") == KeyValue("k", b"2", second)

    async def test_update_raises_conflict_when_the_revision_is_stale_or_the_key_absent(
        self, harness: StoreHarness
    ) -> None:
        async with harness.store() as store:
            first = await store.create("k", b"1")
            second = await store.update("k", b"2", revision=first)
            with pytest.raises(RevisionConflictError):
                await store.update("k", b"3", revision=first)
            with pytest.raises(RevisionConflictError):
                await store.update("absent", b"3", revision=first)
            assert await store.get("k") == KeyValue("k", b"2", second)
            assert await store.get("absent") is None

    async def test_delete_applies_when_the_revision_is_current(self, harness: StoreHarness) -> None:
        async with harness.store() as store:
            created = await store.create("k", b"1")
            deleted = await store.delete("k", revision=created)
            assert deleted > created
            assert await store.get("k") is None
            recreated = await store.create("k", b"again")  # absent again: create works
            assert recreated > deleted
            assert await store.get("k") == KeyValue("k", b"again", recreated)

    async def test_delete_raises_conflict_when_the_revision_is_stale_or_the_key_absent(
        self, harness: StoreHarness
    ) -> None:
        async with harness.store() as store:
            first = await store.create("k", b"1")
            second = await store.update("k", b"2", revision=first)
            with pytest.raises(RevisionConflictError):
                await store.delete("k", revision=first)
            deleted = await store.delete("k", revision=second)
            with pytest.raises(RevisionConflictError):
                await store.delete("k", revision=deleted)
            with pytest.raises(RevisionConflictError):
                await store.delete("never", revision=second)
            assert await store.get("k") is None

    async def test_list_prefix_holds_the_keys_under_it_at_one_revision(
        self, harness: StoreHarness
    ) -> None:
        async with harness.store() as store:
            assert (await store.list_prefix("a/")).entries == ()
            revisions = {
                key: await store.create(key, key.encode()) for key in ("a/y", "a/x/1", "ab", "b/a")
            }
            gone = await store.create("a/gone", b"")
            await store.delete("a/gone", revision=gone)
            listing = await store.list_prefix("a/")
            assert listing.entries == (
                KeyValue("a/x/1", b"a/x/1", revisions["a/x/1"]),
                KeyValue("a/y", b"a/y", revisions["a/y"]),
            )
            assert listing.get("a/y") == await store.get("a/y")
            assert listing.revision >= max(revisions["a/x/1"], revisions["a/y"])
            assert [entry.key for entry in (await store.list_prefix("")).entries] == [
                "a/x/1",
                "a/y",
                "ab",
                "b/a",
            ]
            later = await store.create("a/z", b"")
            assert later > listing.revision

    async def test_keys_and_prefixes_outside_the_grammar_are_refused(
        self, harness: StoreHarness
    ) -> None:
        async with harness.store() as store:
            for key in ("", "a/", "/a", "a//b", "a.b", "a b", "é"):
                with pytest.raises(ValueError):
                    await store.create(key, b"")
            for prefix in ("a", "a//", "/"):
                with pytest.raises(ValueError):
                    await store.list_prefix(prefix)

    # --- leases ----------------------------------------------------------------------------

    async def test_keys_on_a_lease_vanish_when_it_expires(self, harness: StoreHarness) -> None:
        async with (
            harness.store() as store,
            watching(store.watch("l/")) as events,
        ):
            start = await next_within(events)
            assert isinstance(start, Resync)
            assert start.listing.entries == ()
            lease = await store.grant(SHORT_TTL)
            bound = await store.create("l/bound", b"", lease=lease)
            free = await store.create("l/free", b"")
            assert (await next_change(events)).revision == bound
            assert (await next_change(events)).revision == free
            await harness.pass_time(SHORT_TTL)
            gone = await next_change(events, SHORT_TTL + harness.features.expiry_slack + WAIT)
            assert (gone.key, gone.value) == ("l/bound", None)
            assert await store.get("l/bound") is None
            assert await store.get("l/free") == KeyValue("l/free", b"", free)
            with pytest.raises(LeaseLostError):
                await store.keep_alive(lease)
            with pytest.raises(LeaseLostError):
                await store.create("l/late", b"", lease=lease)
            assert await store.get("l/late") is None

    async def test_keys_on_a_lease_stay_while_it_is_kept_alive(self, harness: StoreHarness) -> None:
        async with harness.store() as store:
            lease = await store.grant(KEPT_TTL)
            created = await store.create("k", b"v", lease=lease)
            for _ in range(4):  # twice the TTL in all
                await harness.pass_time(KEPT_TTL / 2)  # the passing time is under test
                await store.keep_alive(lease)
            assert await store.get("k") == KeyValue("k", b"v", created)

    async def test_revoke_deletes_the_keys_on_the_lease_at_once(
        self, harness: StoreHarness
    ) -> None:
        async with harness.store() as store, harness.store() as observer:
            lease = await store.grant(LONG_TTL)
            other = await store.grant(LONG_TTL)
            await store.create("r/a", b"", lease=lease)
            await store.create("r/b", b"", lease=lease)
            kept = await store.create("r/c", b"", lease=other)
            listing = await observer.list_prefix("r/")
            async with watching(observer.watch("r/", after=listing.revision)) as events:
                await store.revoke(lease)
                deleted = {(await next_change(events)).key, (await next_change(events)).key}
            assert deleted == {"r/a", "r/b"}
            assert (await observer.list_prefix("r/")).entries == (KeyValue("r/c", b"", kept),)
            await store.revoke(lease)  # idempotent
            with pytest.raises(LeaseLostError):
                await store.keep_alive(lease)
            with pytest.raises(LeaseLostError):
                await store.update("r/c", b"", revision=kept, lease=lease)
            await store.keep_alive(other)

    async def test_a_write_without_the_lease_unbinds_the_key(self, harness: StoreHarness) -> None:
        async with harness.store() as store:
            lease = await store.grant(LONG_TTL)
            created = await store.create("k", b"1", lease=lease)
            updated = await store.update("k", b"2", revision=created)
            await store.revoke(lease)
            assert await store.get("k") == KeyValue("k", b"2", updated)

    # --- watch -----------------------------------------------------------------------------

    async def test_watch_yields_puts_and_deletes_under_its_prefix_in_revision_order(
        self, harness: StoreHarness
    ) -> None:
        async with harness.store() as store, harness.store() as observer:
            updated = await store.create("w/updated", b"0")
            deleted = await store.create("w/deleted", b"0")
            listing = await observer.list_prefix("w/")
            assert [entry.revision for entry in listing.entries] == [deleted, updated]
            async with watching(observer.watch("w/", after=listing.revision)) as events:
                created = await store.create("w/a", b"1")
                await store.create("x/outside", b"")
                update = await store.update("w/updated", b"2", revision=updated)
                deletion = await store.delete("w/deleted", revision=deleted)
                seen = [await next_change(events) for _ in range(3)]
            assert seen == [
                KeyChange("w/a", b"1", created),
                KeyChange("w/updated", b"2", update),
                KeyChange("w/deleted", None, deletion),
            ]
            assert created < update < deletion

    async def test_watch_ends_on_the_last_write_of_a_key_written_in_quick_succession(
        self, harness: StoreHarness
    ) -> None:
        """Each change comes once and in order; superseded writes may be coalesced (a
        bucket that keeps one value per key), the last never."""
        async with harness.store() as store:
            listing = await store.list_prefix("q/")
            async with watching(store.watch("q/", after=listing.revision)) as events:
                revision = await store.create("q/k", b"0")
                for n in range(1, 5):
                    revision = await store.update("q/k", str(n).encode(), revision=revision)
                last = await store.delete("q/k", revision=revision)
                seen = [await next_change(events)]
                while seen[-1].revision != last:
                    seen.append(await next_change(events))
            assert [change.revision for change in seen] == sorted({c.revision for c in seen})
            assert seen[-1] == KeyChange("q/k", None, last)

    async def test_watch_after_a_listing_yields_the_changes_made_since(
        self, harness: StoreHarness
    ) -> None:
        async with harness.store() as store:
            listing = await store.list_prefix("s/")
            since = await store.create("s/since", b"")
            async with watching(store.watch("s/", after=listing.revision)) as events:
                assert await next_change(events) == KeyChange("s/since", b"", since)

    async def test_watch_without_a_revision_starts_with_the_listing(
        self, harness: StoreHarness
    ) -> None:
        async with harness.store() as store:
            first = await store.create("n/a", b"")
            async with watching(store.watch("n/")) as events:
                start = await next_within(events)
                assert isinstance(start, Resync)
                assert start.listing.entries == (KeyValue("n/a", b"", first),)
                second = await store.create("n/b", b"")
                assert await next_change(events) == KeyChange("n/b", b"", second)

    async def test_watch_keeps_every_state_when_the_store_restarts(
        self, harness: StoreHarness
    ) -> None:
        restart_checks_run(harness.features)
        async with harness.store() as store, harness.store() as observer:
            view: View = {}
            async with watching(observer.watch("z/")) as events:
                apply(view, await next_within(events))
                first = await store.create("z/a", b"1")
                apply(view, await next_within(events))
                assert view == {"z/a": KeyValue("z/a", b"1", first)}
                await harness.restart_store()
                second = await retry_while_unavailable(
                    lambda: store.update("z/a", b"2", revision=first)
                )
                third = await retry_while_unavailable(lambda: store.create("z/b", b"3"))
                wanted = {
                    "z/a": KeyValue("z/a", b"2", second),
                    "z/b": KeyValue("z/b", b"3", third),
                }
                with anyio.fail_after(30):
                    while view != wanted:
                        apply(view, await anext(events))
            assert {entry.key: entry for entry in (await store.list_prefix("z/")).entries} == wanted
