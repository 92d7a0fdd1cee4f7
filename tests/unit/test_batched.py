"""``adapters._batched.Batched``: concurrent gets share one read of their keys."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import anyio
import pytest

from adapters._batched import Batched

pytestmark = pytest.mark.anyio


class Reads:
    """A read that doubles its keys, recording every call; ``release`` holds it."""

    def __init__(self, *, leave_out: frozenset[int] = frozenset()) -> None:
        self.calls: list[list[int]] = []
        self.release = anyio.Event()
        self.leave_out = leave_out
        self.error: Exception | None = None

    async def __call__(self, keys: Sequence[int]) -> Mapping[int, int]:
        self.calls.append(list(keys))
        await self.release.wait()
        if self.error is not None:
            raise self.error
        return {k: 2 * k for k in keys if k not in self.leave_out}


async def gather(batched: Batched[int, int], keys: Sequence[int]) -> dict[int, object]:
    """Every key's answer (or the exception its get raised), asked concurrently."""
    answers: dict[int, object] = {}

    async def get(key: int) -> None:
        try:
            answers[key] = await batched.get(key)
        except Exception as exc:
            answers[key] = exc

    async with anyio.create_task_group() as tg:
        for key in keys:
            tg.start_soon(get, key)
    return answers


async def test_concurrent_gets_share_one_read_and_each_gets_its_own_answer() -> None:
    reads = Reads()
    reads.release.set()
    assert await gather(Batched(reads), [3, 1, 2, 1]) == {1: 2, 2: 4, 3: 6}
    assert reads.calls == [[3, 1, 2]]


async def test_gets_one_after_another_read_one_after_another() -> None:
    reads = Reads()
    reads.release.set()
    batched = Batched(reads)
    assert [await batched.get(k) for k in (1, 1, 2)] == [2, 2, 4]
    assert reads.calls == [[1], [1], [2]]


async def test_a_get_that_comes_while_a_read_is_out_waits_for_the_next_read() -> None:
    reads = Reads()
    batched = Batched(reads)
    answers: dict[int, int] = {}

    async def get(key: int) -> None:
        answers[key] = await batched.get(key)

    async with anyio.create_task_group() as tg:
        tg.start_soon(get, 1)
        await anyio.wait_all_tasks_blocked()  # the first read is out
        tg.start_soon(get, 2)
        await anyio.wait_all_tasks_blocked()
        reads.release.set()
    assert answers == {1: 2, 2: 4}
    assert reads.calls == [[1], [2]]


async def test_a_read_error_reaches_every_caller_of_its_gathering() -> None:
    reads = Reads()
    reads.error = ConnectionError("broker gone")
    reads.release.set()
    answers = await gather(Batched(reads), [1, 2])
    assert all(isinstance(a, ConnectionError) for a in answers.values()), answers
    assert reads.calls == [[1, 2]]


async def test_a_key_the_read_leaves_out_was_not_answered_in_time() -> None:
    reads = Reads(leave_out=frozenset({2}))
    reads.release.set()
    answers = await gather(Batched(reads), [1, 2])
    assert answers[1] == 2
    assert isinstance(answers[2], TimeoutError)


async def test_when_the_reader_is_cancelled_the_others_read_again() -> None:
    reads = Reads()
    batched = Batched(reads)
    answers: dict[int, int] = {}
    reader = anyio.CancelScope()

    async def lead() -> None:
        with reader:
            await batched.get(1)

    async def get(key: int) -> None:
        answers[key] = await batched.get(key)

    async with anyio.create_task_group() as tg:
        tg.start_soon(lead)
        tg.start_soon(get, 2)  # joins the gathering lead() started
        await anyio.wait_all_tasks_blocked()
        assert reads.calls == [[1, 2]]
        reader.cancel()
        await anyio.wait_all_tasks_blocked()
        assert reads.calls == [[1, 2], [2]]  # 2 read again, on its own
        reads.release.set()
    assert answers == {2: 4}
