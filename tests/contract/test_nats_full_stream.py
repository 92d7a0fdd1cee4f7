"""A full data stream on a real nats-server: refused at once, nothing of it stored.

The stream is configured as the transport configures it (``max_bytes``, ``discard: new``;
``SHOAL_NATS_MAX_BYTES``) with a cap of a few KiB, filled by the transport itself, then:

- the transport's next batch raises ``PublishRefusedError`` (nothing stored: the
  gateway's cue to answer at once), as a plain publish (a pack or a few) and as an atomic
  batch (8 packs or more);
- a gateway (``create_app`` over its own ``NatsTransport``, the publish deadline at its
  default 20 s) answers 503 with Retry-After within 1 s of the request, not at the
  deadline, and the stream holds what it held before.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Sequence

import httpx
import nats
import pytest

from adapters.nats import NatsSettings, NatsTransport
from core.errors import PublishRefusedError
from core.ingest import IngestLimits
from core.messages import Envelope
from infra.local._testservers import ServerInfo
from services.gateway.app import create_app
from tests.contract._nats_streams import delete_streams
from tests.contract._transport import envelope

pytestmark = [pytest.mark.nats, pytest.mark.anyio]

CAP = 32 * 1024  # bytes: filled in a few dozen publishes
PARTITIONS = 16
PROJECT = "dev-full"
URL = f"/v1/projects/{PROJECT}/messages"
PUBLISH_DEADLINE = 20.0  # SHOAL_GATEWAY_PUBLISH_DEADLINE's default: a retried publish ends here
AT_ONCE = 1.0  # seconds: a refusal is answered without a retry
FILL_LIMIT = 500  # publishes: a stream that never refuses fails the test, not hangs it


@pytest.fixture
async def settings(nats_server: ServerInfo) -> AsyncIterator[NatsSettings]:
    tag = uuid.uuid4().hex[:10]  # a stream and subjects of its own
    settings = NatsSettings(
        url=nats_server.url,
        stream=f"F{tag}",
        subject_prefix=f"f{tag}.data",
        dead_letter_stream=f"F{tag}_DLQ",
        dead_letter_prefix=f"f{tag}.dlq",
        max_bytes=CAP,
    )
    yield settings
    await delete_streams(settings)


async def _held(settings: NatsSettings) -> tuple[int, int]:
    """What the data stream stores: (broker messages, bytes)."""
    nc = await nats.connect(settings.url)
    try:
        state = (await nc.jetstream().stream_info(settings.stream)).state
        return int(state.messages), int(state.bytes)
    finally:
        await nc.close()


def _payload(size: int) -> bytes:
    return json.dumps({"pad": "x" * size}).encode()


async def _fill(transport: NatsTransport, payload: bytes) -> int:
    """Publish one message of ``payload`` at a time until the stream refuses one; how many
    it took."""
    for stored in range(FILL_LIMIT):
        try:
            await transport.publish([envelope(0, sequence=stored + 1, payload=payload)])
        except PublishRefusedError as refused:
            assert "maximum bytes exceeded" in str(refused)
            return stored
    raise AssertionError(f"the stream took {FILL_LIMIT} messages under a {CAP}-byte cap")


async def _refused(transport: NatsTransport, batch: Sequence[Envelope]) -> None:
    with pytest.raises(PublishRefusedError, match="maximum bytes exceeded"):
        await transport.publish(batch)


async def test_a_full_stream_refuses_the_next_batch_and_the_gateway_answers_503_at_once(
    settings: NatsSettings,
) -> None:
    async with NatsTransport(settings) as filler, NatsTransport(settings) as own:
        app = create_app(
            own,
            gateway_id=f"gw-{uuid.uuid4().hex[:6]}",
            partitions=PARTITIONS,
            limits=IngestLimits(),
            publish_timeout=10.0,
            retry_after_seconds=1,
            publish_deadline=PUBLISH_DEADLINE,
        )
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://gw"
        ) as gateway:
            # The project announced while there is room: the refused request below is
            # its data alone.
            first = await gateway.post(URL, json={"reading": 0})
            assert first.status_code == 202, first.text
            # Large messages until one is refused, then the smallest until one is: no
            # message of the sizes below fits any more.
            large = await _fill(filler, _payload(1000))
            small = await _fill(filler, b"{}")
            full = await _held(settings)
            print(f"\nfull stream: {large} + {small} messages, {full[1]} of {CAP} bytes")
            assert large > 0 and full[1] <= CAP

            # (a) the transport: the next batch is refused, as one pack and as an atomic
            # batch of 10 packs (one per partition), and none of it is stored.
            await _refused(
                filler, [envelope(0, sequence=i, payload=_payload(20)) for i in range(20)]
            )
            assert await _held(settings) == full
            await _refused(filler, [envelope(p, payload=_payload(20)) for p in range(10)])
            assert await _held(settings) == full

            # (b) the gateway: 503 with Retry-After at once, nothing of the request stored.
            body = "\n".join(json.dumps({"reading": i, "pad": "y" * 50}) for i in range(20))
            started = time.perf_counter()
            refused = await gateway.post(
                URL, content=body, headers={"content-type": "application/x-ndjson"}
            )
            elapsed = time.perf_counter() - started
    print(f"gateway on the full stream: HTTP {refused.status_code} in {elapsed * 1000:.0f} ms")
    assert refused.status_code == 503, refused.text
    assert refused.headers["Retry-After"] == "1"
    assert "maximum bytes exceeded" in refused.json()["error"]
    assert elapsed < AT_ONCE, f"answered after {elapsed:.2f} s: the refusal was published again"
    assert await _held(settings) == full
