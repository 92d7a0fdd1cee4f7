"""Await a grpc.aio call so that anyio cancel scopes keep working around it.

grpc.aio answers a cancelled call with a *fresh* ``asyncio.CancelledError()``: its inner
response task swallows the cancellation it was sent. anyio does not recognise that error
as its own cancellation, so ``fail_after``/``move_on_after`` (and task group cancellation)
around a grpc call do not stop at their scope: the error escapes and cancels the
enclosing task. ``detached`` runs the call in its own asyncio task and awaits it through
``asyncio.shield``: the caller then receives anyio's own cancellation, and the call is
cancelled (and waited for, briefly) on the way out. A call that grpc cancelled by itself
(its channel was closed under it) raises ``StoreUnavailableError``, not a cancellation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

import anyio

from core.errors import StoreUnavailableError

__all__ = ["detached"]

T = TypeVar("T")

_CANCEL_WAIT = 1.0  # bound on waiting for a cancelled call to wind down


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # mark it retrieved: no "exception was never retrieved" log


async def detached(awaitable: Awaitable[T]) -> T:
    inner: asyncio.Future[T] = asyncio.ensure_future(awaitable)
    inner.add_done_callback(_retrieve)
    try:
        return await asyncio.shield(inner)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if inner.cancelled() and task is not None and task.cancelling() == 0:
            # Nobody cancelled us: grpc cancelled the call itself (its channel was closed).
            raise StoreUnavailableError("the etcd call was cancelled: client closed") from None
        raise
    finally:
        if not inner.done():
            inner.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.wait({inner}, timeout=_CANCEL_WAIT)
