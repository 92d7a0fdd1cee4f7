"""The gateway's HTTP contract, in-process over the in-memory transport (which passes the
same Transport contract suite as NATS)."""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import anyio
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from adapters.ledger import JsonlLedger
from adapters.memory import InMemoryLedger, InMemoryTransport
from core.errors import PublishError, PublishRefusedError
from core.ingest import IngestLimits
from core.messages import Envelope, LedgerEntry, MessageKind, Outcome
from core.partitioning import partition_for
from core.ports import AcceptanceLedger
from services.common.metrics import metrics_app
from services.gateway.app import create_app

pytestmark = pytest.mark.anyio


class RefusingTransport(InMemoryTransport):
    """The broker is down: nothing is confirmed."""

    async def publish(self, envelopes: Sequence[Envelope]) -> None:
        raise PublishError(f"0 of {len(envelopes)} stored: no responders")


async def _client(
    transport: InMemoryTransport, ledger: AcceptanceLedger | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(
        transport,
        gateway_id="gw-test",
        partitions=128,
        limits=IngestLimits(max_body_bytes=10_000, max_message_bytes=1_000, max_messages=50),
        publish_timeout=5.0,
        retry_after_seconds=3,
        ledger=ledger,
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://gw"
    ) as client:
        yield client


@pytest.fixture
async def memory() -> AsyncIterator[InMemoryTransport]:
    async with InMemoryTransport() as transport:
        yield transport


@pytest.fixture
async def client(memory: InMemoryTransport) -> AsyncIterator[httpx.AsyncClient]:
    async for c in _client(memory):
        yield c


async def _stored(transport: InMemoryTransport, partition: int) -> list[Envelope]:
    subscription = await transport.open(partition, "reader")
    deliveries = await subscription.fetch(1000, 0.1)
    await subscription.close()
    return [d.envelope for d in deliveries]


async def test_ndjson_batch_is_stamped_and_announced_when_project_is_new(
    client: httpx.AsyncClient, memory: InMemoryTransport
) -> None:
    body = b'{"t": 1}\n{"t": 2}\n\n{"t": 3}\n'
    response = await client.post("/v1/projects/dev-1/messages", content=body)
    assert response.status_code == 202
    answer = response.json()
    assert (answer["accepted"], answer["first_sequence"], answer["last_sequence"]) == (3, 1, 3)
    partition = partition_for("dev-1", 128)
    assert answer["partition"] == partition
    stored = await _stored(memory, partition)
    assert [e.kind for e in stored] == [MessageKind.ANNOUNCE] + [MessageKind.DATA] * 3
    data = stored[1:]
    assert [e.payload for e in data] == [b'{"t": 1}', b'{"t": 2}', b'{"t": 3}']
    assert [e.sequence for e in data] == [1, 2, 3]
    assert [e.message_id for e in data] == answer["message_ids"]
    assert {e.gateway_id for e in stored} == {"gw-test"}


async def test_sequence_continues_and_no_second_announcement_when_project_posts_again(
    client: httpx.AsyncClient, memory: InMemoryTransport
) -> None:
    await client.post("/v1/projects/dev-2/messages", json={"a": 1})
    response = await client.post("/v1/projects/dev-2/messages", json={"a": 2})
    assert response.json()["first_sequence"] == 2
    stored = await _stored(memory, partition_for("dev-2", 128))
    assert sum(e.kind is MessageKind.ANNOUNCE for e in stored) == 1


ZIP_BOMB = gzip.compress(b"{" + b" " * 1_000_000 + b"}", mtime=0)  # 1 MB of JSON in about 1 KB
ZIP_TWICE = gzip.compress(gzip.compress(b'{"a": 1}', mtime=0), mtime=0)


@pytest.mark.parametrize(
    ("project", "body", "headers", "status", "says"),
    [
        ("bad.id", b'{"a": 1}', {}, 400, "must match"),
        ("x" * 65, b'{"a": 1}', {}, 400, "must match"),
        ("ok", b"not json", {}, 400, "not valid JSON"),
        ("ok", b"[1, 2]", {}, 400, "expected an object"),
        ("ok", b"", {}, 400, "empty body"),
        ("ok", b"[]", {}, 400, "empty batch"),
        ("ok", b'[{"a": 1}, ]', {}, 400, "message 2 of the array is not valid JSON"),
        ("ok", b'[{"a": 1}] {"b": 2}', {}, 400, "extra data"),
        ("ok", b'[{"a": 1} {"b": 2}]', {}, 400, "expected ',' or ']'"),
        ("ok", b'{"a": NaN}', {}, 400, "NaN is not a JSON number"),
        ("ok", b'{"a": -Infinity}', {}, 400, "-Infinity is not a JSON number"),
        ("ok", b'{"a": 1e999}', {}, 400, "out of range"),
        ("ok", b'{"a": 1, "a": 2}', {}, 400, "duplicate key 'a'"),
        ("ok", b'{"a": {"b": 1, "b": 1}}', {}, 400, "duplicate key 'b'"),
        ("ok", b'{"a": 1}\n{"b": 2, "b": 3}', {}, 400, "message 2"),
        ("ok", b'{"a": "\xff"}', {}, 400, "not UTF-8"),
        ("ok", b'{"a": "\\ud800"}', {}, 400, "lone surrogate"),
        ("ok", b'[{"a": "\\udc00x"}]', {}, 400, "lone surrogate"),
        ("ok", b'{"a": "' + b"x" * 2000 + b'"}', {}, 413, "limit is 1000"),
        ("ok", b'{"a": 1}\n' * 51, {}, 413, "limit is 50"),
        ("ok", b"{" + b" " * 10_001 + b"}", {}, 413, "limit is 10000"),
        ("ok", b"<a>1</a>", {"content-type": "application/xml"}, 415, "'application/xml'"),
        ("ok", b'{"a": 1}', {"content-type": "text/html; charset=utf-8"}, 415, "text/html"),
        ("ok", b'{"a": 1}', {"content-encoding": "br"}, 415, "'br'"),
        ("ok", ZIP_TWICE, {"content-encoding": "gzip, gzip"}, 415, "one gzip layer at most"),
        ("ok", ZIP_TWICE, {"content-encoding": "gzip,GZIP"}, 415, "2 layers"),
        ("ok", b'{"a": 1}', {"content-encoding": "gzip, deflate"}, 415, "'deflate'"),
        ("ok", b'{"a": 1}', {"content-encoding": "gzip"}, 400, "not valid gzip"),
        ("ok", gzip.compress(b'{"a": 1}', mtime=0)[:-4], {"content-encoding": "gzip"}, 400, "gzip"),
        ("ok", ZIP_BOMB, {"content-encoding": "gzip"}, 413, "once decompressed"),
    ],
)
async def test_request_is_refused_and_nothing_published_when_input_is_bad(
    client: httpx.AsyncClient,
    memory: InMemoryTransport,
    project: str,
    body: bytes,
    headers: dict[str, str],
    status: int,
    says: str,
) -> None:
    response = await client.post(f"/v1/projects/{project}/messages", content=body, headers=headers)
    assert response.status_code == status
    assert says in response.json()["error"]
    assert [await memory.backlog(p) for p in range(128)] == [0] * 128


async def test_a_json_array_is_a_batch_of_its_objects_kept_byte_for_byte(
    client: httpx.AsyncClient, memory: InMemoryTransport
) -> None:
    body = '[ {"t": 1},\n  {"t": [2, {"u": "ü"}]} ,{"t":3.50}, {"e": "\\ud83d\\ude00"} ]'.encode()
    response = await client.post(
        "/v1/projects/dev-array/messages",
        content=body,
        headers={"content-type": "application/json; charset=utf-8"},
    )
    assert response.status_code == 202, response.text
    assert response.json()["accepted"] == 4
    stored = await _stored(memory, partition_for("dev-array", 128))
    assert [e.payload for e in stored if e.kind is MessageKind.DATA] == [
        b'{"t": 1}',
        '{"t": [2, {"u": "ü"}]}'.encode(),
        b'{"t":3.50}',
        b'{"e": "\\ud83d\\ude00"}',  # a surrogate pair: one character
    ]


async def test_a_gzip_body_is_read_once_decompressed_when_it_has_one_layer(
    client: httpx.AsyncClient, memory: InMemoryTransport
) -> None:
    ndjson = b'{"g": 1}\n{"g": 2}\n'
    once = await client.post(
        "/v1/projects/dev-gzip/messages",
        content=gzip.compress(ndjson),
        headers={"content-encoding": "gzip", "content-type": "application/x-ndjson"},
    )
    members = await client.post(  # two gzip members one after the other: still one layer
        "/v1/projects/dev-gzip/messages",
        content=gzip.compress(b'{"g": 3}\n') + gzip.compress(b'{"g": 4}'),
        headers={"content-encoding": "identity, gzip"},
    )
    assert (once.status_code, members.status_code) == (202, 202)
    stored = await _stored(memory, partition_for("dev-gzip", 128))
    assert [e.payload for e in stored if e.kind is MessageKind.DATA] == [
        b'{"g": 1}',
        b'{"g": 2}',
        b'{"g": 3}',
        b'{"g": 4}',
    ]


class Upload:
    """A request body sent in chunks as the app asks for them; ``pulled`` counts what it
    asked for. ``chunks`` of ``size`` bytes: a body too large to read by accident."""

    def __init__(self, chunks: int, size: int = 1024 * 1024) -> None:
        self.pulled = 0
        self._chunks = chunks
        self._chunk = b" " * size

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for _ in range(self._chunks):
            self.pulled += 1
            yield self._chunk


async def test_nested_gzip_is_refused_with_415_before_its_body_is_read(
    client: httpx.AsyncClient, memory: InMemoryTransport
) -> None:
    upload = Upload(chunks=64)  # 64 MiB
    with anyio.fail_after(5):
        response = await client.post(
            "/v1/projects/dev-nest/messages",
            content=upload,
            headers={"content-encoding": "gzip, gzip"},
        )
    assert response.status_code == 415
    assert "one gzip layer at most" in response.json()["error"]
    assert upload.pulled == 0, "the body was read"
    assert await memory.backlog(partition_for("dev-nest", 128)) == 0


async def test_a_declared_length_over_the_limit_is_refused_before_the_body_is_read(
    client: httpx.AsyncClient, memory: InMemoryTransport
) -> None:
    response = await client.post(
        "/v1/projects/dev-len/messages",
        content=b'{"a": 1}',
        headers={"content-length": "10001"},
    )
    assert response.status_code == 413
    assert "10001 bytes" in response.json()["error"]
    assert await memory.backlog(partition_for("dev-len", 128)) == 0


class HeldTransport(InMemoryTransport):
    """Publishes only once ``release`` is set: requests stay in flight until then."""

    def __init__(self, holding: int) -> None:
        super().__init__()
        self.release = anyio.Event()
        self.full = anyio.Event()  # ``holding`` publishes wait
        self._holding = holding
        self._waiting = 0
        self._arrivals: dict[int, anyio.Event] = {}

    def arrived(self, count: int) -> anyio.Event:
        """Set once ``count`` publishes have come to wait."""
        event = self._arrivals.setdefault(count, anyio.Event())
        if self._waiting >= count:
            event.set()
        return event

    async def publish(self, envelopes: Sequence[Envelope]) -> None:
        self._waiting += 1
        if self._waiting == self._holding:
            self.full.set()
        if (arrival := self._arrivals.get(self._waiting)) is not None:
            arrival.set()
        await self.release.wait()
        await super().publish(envelopes)


async def test_503_with_retry_after_past_the_requests_in_flight_bound() -> None:
    async with HeldTransport(holding=2) as held:
        app = create_app(
            held,
            gateway_id="gw-test",
            partitions=128,
            limits=IngestLimits(),
            publish_timeout=30.0,
            retry_after_seconds=4,
            max_concurrent_requests=2,
        )
        async with (
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://gw"
            ) as client,
            anyio.create_task_group() as tg,
        ):
            answers: list[int] = []

            async def post(n: int) -> None:
                answer = await client.post(f"/v1/projects/dev-{n}/messages", json={"n": n})
                answers.append(answer.status_code)

            tg.start_soon(post, 1)
            tg.start_soon(post, 2)
            with anyio.fail_after(5):
                await held.full.wait()
            refused = await client.post("/v1/projects/dev-3/messages", json={"n": 3})
            assert refused.status_code == 503
            assert refused.headers["Retry-After"] == "4"
            assert "2 requests in flight" in refused.json()["error"]
            held.release.set()
        assert answers == [202, 202]
        after = await _stored(held, partition_for("dev-3", 128))
        assert after == []


def _json_of(size: int) -> bytes:
    """One JSON object of exactly ``size`` bytes."""
    return b'{"a": "' + b"x" * (size - 9) + b'"}'


async def test_503_at_once_when_a_request_does_not_fit_in_the_bytes_in_flight() -> None:
    limits = IngestLimits(max_body_bytes=10_000, max_message_bytes=10_000)
    packed = gzip.compress(b'{"a": 1}')
    async with HeldTransport(holding=3) as held:
        app = create_app(
            held,
            gateway_id="gw-test",
            partitions=128,
            limits=limits,
            publish_timeout=30.0,
            retry_after_seconds=4,
            max_bytes_in_flight=50_000,
        )
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://gw"
        ) as client:
            answers: dict[str, int] = {}

            async def post(name: str, body: bytes) -> None:
                answer = await client.post(f"/v1/projects/{name}/messages", content=body)
                answers[name] = answer.status_code

            async with anyio.create_task_group() as tg:
                # Two bodies of 9,000 bytes are counted twice over: 36,000 of the 50,000
                # bytes, while they wait for the broker.
                tg.start_soon(post, "big-1", _json_of(9_000))
                tg.start_soon(post, "big-2", _json_of(9_000))
                with anyio.fail_after(5):
                    await held.arrived(2).wait()
                # gzipped: its body and twice the 10,000 bytes it may inflate to; 14,000 left
                refused = await client.post(
                    "/v1/projects/zipped/messages",
                    content=packed,
                    headers={"content-encoding": "gzip"},
                )
                assert refused.status_code == 503
                assert refused.headers["Retry-After"] == "4"
                assert refused.json()["error"] == (
                    "the requests in flight hold 36000 of the 50000 bytes this gateway takes "
                    f"at once; this one needs {len(packed) + 20_000}"
                )
                # no declared length (chunked): counted as the whole limit (twice), not read
                upload = Upload(chunks=8, size=1_000)
                with anyio.fail_after(5):
                    chunked = await client.post("/v1/projects/chunked/messages", content=upload)
                assert chunked.status_code == 503
                assert upload.pulled == 0, "the body was read"
                # what fits is taken: the budget counts bytes, not requests (12,000 more)
                tg.start_soon(post, "small", _json_of(6_000))
                with anyio.fail_after(5):
                    await held.full.wait()
                held.release.set()
            assert answers == {"big-1": 202, "big-2": 202, "small": 202}
            # every reservation was given back: the gzipped request fits now
            again = await client.post(
                "/v1/projects/zipped/messages",
                content=packed,
                headers={"content-encoding": "gzip"},
            )
            assert again.status_code == 202
        assert await held.backlog(partition_for("chunked", 128)) == 0


class BrokenTransport(InMemoryTransport):
    """A transport with a bug: publish raises something no one planned for."""

    async def publish(self, envelopes: Sequence[Envelope]) -> None:
        raise KeyError("a bug")


async def test_an_unexpected_failure_after_reserving_is_a_503_with_a_ledger_entry() -> None:
    ledger = InMemoryLedger()
    async with BrokenTransport() as broken:
        async for client in _client(broken, ledger):
            response = await client.post("/v1/projects/dev-bug/messages", json={"a": 1})
    assert response.status_code == 503
    assert "KeyError" in response.json()["error"]
    assert [(e.first_sequence, e.last_sequence, e.outcome) for e in ledger.entries] == [
        (1, 1, Outcome.REFUSED)
    ]


async def test_503_with_retry_after_when_broker_does_not_confirm() -> None:
    async with RefusingTransport() as refusing:
        async for client in _client(refusing):
            response = await client.post("/v1/projects/dev-3/messages", json={"a": 1})
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "3"
    assert "no responders" in response.json()["error"]


async def test_health_on_the_ingest_port_and_metrics_only_apart_from_it() -> None:
    registry = CollectorRegistry()
    async with InMemoryTransport() as memory:
        app = create_app(
            memory,
            gateway_id="gw-test",
            partitions=128,
            limits=IngestLimits(),
            publish_timeout=5.0,
            retry_after_seconds=3,
            registry=registry,
        )
        async with (
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as gw,
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=metrics_app(registry)), base_url="http://m"
            ) as scraper,
        ):
            await gw.post("/v1/projects/dev-4/messages", content=b'{"a": 1}\n{"a": 2}')
            assert (await gw.get("/healthz")).json()["status"] == "ok"
            assert (await gw.get("/readyz")).status_code == 200
            assert json.loads((await gw.get("/healthz")).text)["gateway_id"] == "gw-test"
            assert (await gw.get("/metrics")).status_code == 404
            metrics = (await scraper.get("/metrics")).text
            assert (await scraper.get("/healthz")).status_code == 404
    assert "shoal_gateway_messages_accepted_total 2.0" in metrics
    assert "shoal_gateway_bytes_in_flight 0.0" in metrics


async def test_ledger_records_accepted_and_refused_ranges_when_a_ledger_is_given() -> None:
    ledger = InMemoryLedger()
    async with InMemoryTransport() as memory:
        async for client in _client(memory, ledger):
            await client.post("/v1/projects/dev-5/messages", content=b'{"a": 1}\n{"a": 2}')
            await client.post("/v1/projects/bad.id/messages", json={"a": 1})  # reserves nothing
    async with RefusingTransport() as refusing:
        async for client in _client(refusing, ledger):
            await client.post("/v1/projects/dev-5/messages", json={"a": 3})
    assert [
        (e.project_id, e.first_sequence, e.last_sequence, e.outcome) for e in ledger.entries
    ] == [
        ("dev-5", 1, 2, Outcome.ACCEPTED),
        ("dev-5", 1, 1, Outcome.REFUSED),  # a second gateway app: its own sequences
    ]


class ConfirmationLostTransport(InMemoryTransport):
    """Stores the first batch but its confirmation is lost (a broker restarting): the
    publish raises although the messages are there."""

    def __init__(self) -> None:
        super().__init__()
        self.attempts = 0

    async def publish(self, envelopes: Sequence[Envelope]) -> None:
        self.attempts += 1
        await super().publish(envelopes)
        if self.attempts == 1:
            raise PublishError(f"0 of {len(envelopes)} confirmed: the answer was lost")


async def test_an_unconfirmed_publish_is_made_again_with_the_same_ids_and_answered_202() -> None:
    """A 503 here would make a client without a key send the messages again under new
    ids: a duplicate. The gateway publishes the same messages again (a no-op where they
    were stored) and answers once the broker confirms them."""
    ledger = InMemoryLedger()
    async with ConfirmationLostTransport() as flaky:
        app = create_app(
            flaky,
            gateway_id="gw-test",
            partitions=128,
            limits=IngestLimits(max_body_bytes=10_000, max_message_bytes=1_000, max_messages=50),
            publish_timeout=5.0,
            publish_deadline=10.0,
            retry_after_seconds=3,
            ledger=ledger,
        )
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://gw"
        ) as client:
            response = await client.post(
                "/v1/projects/dev-8/messages", content=b'{"a": 1}\n{"a": 2}'
            )
        assert response.status_code == 202
        assert flaky.attempts == 2
        stored = await _stored(flaky, partition_for("dev-8", 128))
    data = [e for e in stored if e.kind is MessageKind.DATA]
    assert sorted(e.message_id for e in data) == sorted(response.json()["message_ids"])
    assert [(e.first_sequence, e.outcome) for e in ledger.entries] == [(1, Outcome.ACCEPTED)]


class FullStreamTransport(InMemoryTransport):
    """A full stream: every batch is refused and none stored. ``lose_first``: the first
    attempt's answer is lost instead (its messages may be stored: in doubt)."""

    def __init__(self, *, lose_first: bool) -> None:
        super().__init__()
        self.lose_first = lose_first
        self.attempts = 0

    async def publish(self, envelopes: Sequence[Envelope]) -> None:
        self.attempts += 1
        if self.lose_first and self.attempts == 1:
            raise PublishError(f"0 of {len(envelopes)} confirmed: the answer was lost")
        raise PublishRefusedError("stream refused the batch: maximum bytes exceeded")


@pytest.mark.parametrize("lose_first", [False, True], ids=["refused", "in-doubt-then-refused"])
async def test_a_refused_batch_is_a_503_at_once_unless_an_earlier_attempt_is_in_doubt(
    lose_first: bool,
) -> None:
    """A refusal stores nothing: answering it at once tells the client to back off now,
    not after the publish deadline. After an unconfirmed attempt the messages may be
    stored, so a refusal then is not the answer: the gateway goes on until the deadline."""
    async with FullStreamTransport(lose_first=lose_first) as full:
        app = create_app(
            full,
            gateway_id="gw-test",
            partitions=128,
            limits=IngestLimits(max_body_bytes=10_000, max_message_bytes=1_000, max_messages=50),
            publish_timeout=5.0,
            publish_deadline=1.5,
            retry_after_seconds=3,
        )
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://gw"
        ) as client:
            response = await client.post("/v1/projects/dev-9/messages", json={"a": 1})
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "3"
    assert "maximum bytes exceeded" in response.json()["error"]
    if lose_first:
        assert full.attempts >= 3, "published again until the deadline"
    else:
        assert full.attempts == 1, "a refusal is not published again"


class FailingLedger(InMemoryLedger):
    """A ledger on a volume that refuses writes while ``failing`` (a full disk)."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = True

    async def record(self, entry: LedgerEntry) -> None:
        if self.failing:
            raise OSError(28, "No space left on device")
        await super().record(entry)


async def test_a_ledger_that_fails_after_the_broker_stored_never_turns_a_202_into_a_500() -> None:
    ledger = FailingLedger()
    async with InMemoryTransport() as memory:
        async for client in _client(memory, ledger):
            stored = await client.post("/v1/projects/dev-6/messages", json={"a": 1})
            assert stored.status_code == 202  # the broker has it: retrying would duplicate it
            refused = await client.post("/v1/projects/dev-6/messages", json={"a": 2})
            assert refused.status_code == 503
            assert refused.headers["Retry-After"] == "3"
            assert "No space left on device" in refused.json()["error"]
            assert (await client.get("/readyz")).status_code == 503
            assert len(await _stored(memory, partition_for("dev-6", 128))) == 2  # +announcement
            assert ledger.entries == []

            ledger.failing = False
            assert (await client.get("/readyz")).status_code == 200
            again = await client.post("/v1/projects/dev-6/messages", json={"a": 3})
            assert again.status_code == 202
    assert [(e.first_sequence, e.last_sequence, e.outcome) for e in ledger.entries] == [
        (1, 1, Outcome.ACCEPTED),
        (2, 2, Outcome.REFUSED),
        (3, 3, Outcome.ACCEPTED),
    ]


async def test_a_full_disk_under_the_jsonl_ledger_is_a_202_then_503s(tmp_path: Path) -> None:
    """The file ledger on a device that is always full (/dev/full): the stored batch is a
    202, nothing after it is published, nothing answers 500."""
    (tmp_path / "gw-test.jsonl").symlink_to("/dev/full")
    async with InMemoryTransport() as memory, JsonlLedger(tmp_path, "gw-test") as ledger:
        async for client in _client(memory, ledger):
            answers = [
                (await client.post("/v1/projects/dev-7/messages", json={"n": n})).status_code
                for n in range(3)
            ]
            assert answers == [202, 503, 503]
            assert len(await _stored(memory, partition_for("dev-7", 128))) == 2  # +announcement


# -- fuzz: no input yields a 5xx, nothing but JSON objects is ever published ------------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)
_texts = st.one_of(
    _json_values.map(lambda v: json.dumps(v, allow_nan=True)),
    st.lists(_json_values.map(lambda v: json.dumps(v, allow_nan=True)), max_size=5).map("\n".join),
    st.lists(st.dictionaries(st.text(max_size=4), _json_values, max_size=3), max_size=4).map(
        lambda items: json.dumps(items, allow_nan=True)
    ),
    st.text(max_size=60),
    st.sampled_from(
        ['{"a": 1, "a": 2}', '[{"a": 1},]', '{"a": 1}\n[', "\ufeff{}", '{"\\ud800": 1}']
    ),
)
_bodies = st.one_of(_texts.map(str.encode), st.binary(max_size=200))


def _strict_object(payload: bytes) -> bool:
    def refuse(name: str) -> object:
        raise ValueError(name)

    def unique(pairs: list[tuple[str, object]]) -> dict[str, object]:
        if len({k for k, _ in pairs}) != len(pairs):
            raise ValueError("duplicate key")
        return dict(pairs)

    try:
        value = json.loads(payload.decode("utf-8"), parse_constant=refuse, object_pairs_hook=unique)
    except ValueError:
        return False
    return isinstance(value, dict)


async def _fuzz_once(
    body: bytes, content_type: str | None, coding: str | None, squeeze: bool
) -> None:
    headers = {}
    if content_type is not None:
        headers["content-type"] = content_type
    if coding is not None:
        headers["content-encoding"] = coding
        if coding == "gzip" and not squeeze:
            body = gzip.compress(body)
    ledger = InMemoryLedger()
    async with InMemoryTransport() as memory:
        async for client in _client(memory, ledger):
            response = await client.post(
                "/v1/projects/fuzz/messages", content=body, headers=headers
            )
        stored = [
            e
            for e in await _stored(memory, partition_for("fuzz", 128))
            if e.kind is MessageKind.DATA
        ]
    assert response.status_code in (202, 400, 413, 415), (response.status_code, response.text)
    assert "error" in response.json() or response.status_code == 202
    if response.status_code == 202:
        assert len(stored) == response.json()["accepted"] >= 1
        assert all(_strict_object(e.payload) for e in stored)
        assert [e.outcome for e in ledger.entries] == [Outcome.ACCEPTED]
    else:
        assert stored == [] and ledger.entries == []


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=_bodies,
    content_type=st.sampled_from(
        [None, "application/json", "application/x-ndjson", "text/plain", "application/xml", "x/y"]
    ),
    coding=st.sampled_from([None, "gzip", "identity", "deflate", "gzip, gzip"]),
    squeeze=st.booleans(),  # with gzip: send the body uncompressed anyway
)
def test_no_input_yields_a_5xx_or_publishes_anything_but_json_objects(
    body: bytes, content_type: str | None, coding: str | None, squeeze: bool
) -> None:
    anyio.run(_fuzz_once, body, content_type, coding, squeeze)


async def test_a_forgotten_project_comes_back_in_a_new_series_and_is_announced_again() -> None:
    """Past ``max_tracked_projects`` the least recently used project is forgotten; when it
    posts again its sequences start a new series (never 1 again under the same gateway id,
    which the audit would count as a conflict) and it is announced again."""
    async with InMemoryTransport() as memory:
        ledger = InMemoryLedger()
        app = create_app(
            memory,
            gateway_id="gw-test",
            partitions=128,
            limits=IngestLimits(),
            publish_timeout=5.0,
            retry_after_seconds=3,
            ledger=ledger,
            max_tracked_projects=2,
        )
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://gw"
        ) as client:
            answers = [
                (await client.post(f"/v1/projects/{p}/messages", json=[{}, {}])).json()
                for p in ("dev-a", "dev-b", "dev-c", "dev-a")
            ]
        stored = await _stored(memory, partition_for("dev-a", 128))
    assert [(a["gateway_id"], a["first_sequence"]) for a in answers] == [
        ("gw-test", 1),
        ("gw-test", 1),
        ("gw-test", 1),
        ("gw-test~1", 1),
    ]
    entries = [e for e in ledger.entries if e.project_id == "dev-a"]
    assert [(e.gateway_id, e.first_sequence, e.last_sequence) for e in entries] == [
        ("gw-test", 1, 2),
        ("gw-test~1", 1, 2),
    ]
    dev_a = [e for e in stored if e.project_id == "dev-a"]
    assert sum(e.kind is MessageKind.ANNOUNCE for e in dev_a) == 2
    assert [(e.gateway_id, e.sequence) for e in dev_a if e.kind is MessageKind.DATA] == [
        ("gw-test", 1),
        ("gw-test", 2),
        ("gw-test~1", 1),
        ("gw-test~1", 2),
    ]


async def test_a_project_is_announced_again_once_its_announcement_is_old() -> None:
    """Past ``reannounce_interval`` since its last announcement a project is announced
    again with its next message, so a registration that expired (or was refused at the
    partition's cap) is made again; its sequences go on in the same series."""
    async with InMemoryTransport() as memory:
        app = create_app(
            memory,
            gateway_id="gw-test",
            partitions=128,
            limits=IngestLimits(),
            publish_timeout=5.0,
            retry_after_seconds=3,
            reannounce_interval=0.2,
        )
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://gw"
        ) as client:
            firsts = [(await client.post("/v1/projects/dev-r/messages", json={})).json()]
            firsts.append((await client.post("/v1/projects/dev-r/messages", json={})).json())
            await anyio.sleep(0.3)
            firsts.append((await client.post("/v1/projects/dev-r/messages", json={})).json())
        stored = await _stored(memory, partition_for("dev-r", 128))
    assert [a["first_sequence"] for a in firsts] == [1, 2, 3]
    assert [e.kind for e in stored] == [
        MessageKind.ANNOUNCE,
        MessageKind.DATA,
        MessageKind.DATA,
        MessageKind.ANNOUNCE,
        MessageKind.DATA,
    ]
