"""``ExcusalRecords``: where a partition's ``core.retry.Excusals`` outlive its subscription.

JetStream counts every delivery (``num_delivered``) and cannot be told to forget one, so
what a subscription closed on purpose gave back is written down beside the stream: the
key-value bucket ``{stream}_EXCUSALS``, one key per durable consumer (``p{partition}``,
or ``p{partition}-{position}``), the value the record as JSON with the log it belongs to
(a stream re-created under its name starts without one). The next subscription of the
consumer reads it when it opens and takes the excused deliveries off ``num_delivered``.

Created on connect with the work stream's storage and replicas (checked like the
stream's, ``_durability``): a record lost with a server counts those redeliveries again,
nothing worse.
"""

from __future__ import annotations

import json
import logging

import nats.errors
from nats.js import JetStreamContext
from nats.js import api as js_api
from nats.js.errors import APIError, KeyNotFoundError
from nats.js.kv import KeyValue

from adapters._nats_durability import check_stream
from adapters._nats_settings import NatsSettings
from core.retry import Excusals

__all__ = ["ExcusalRecords"]

log = logging.getLogger("shoal.adapters.nats")

_STREAM_NAME_IN_USE = 10058


class ExcusalRecords:
    """The bucket of excusal records; ``ensure`` it once per connection."""

    def __init__(self, js: JetStreamContext, settings: NatsSettings) -> None:
        self._js = js
        self._settings = settings
        self.bucket = f"{settings.stream}_EXCUSALS"
        self._kv: KeyValue | None = None

    async def ensure(self) -> None:
        """Create the bucket (or bind the one there) and check its durability."""
        s = self._settings
        config = js_api.KeyValueConfig(
            bucket=self.bucket,
            description="shoal: redeliveries the retry budget does not count",
            history=1,
            storage=js_api.StorageType(s.storage),
            replicas=s.replicas,
        )
        try:
            self._kv = await self._js.create_key_value(config)
        except APIError as exc:
            if exc.err_code != _STREAM_NAME_IN_USE:
                raise
            self._kv = await self._js.key_value(self.bucket)
        wanted = js_api.StreamConfig(
            name=f"KV_{self.bucket}",
            storage=js_api.StorageType(s.storage),
            num_replicas=s.replicas,
        )
        check_stream(await self._js.stream_info(f"KV_{self.bucket}"), wanted)

    async def read(self, consumer: str, log_id: str) -> Excusals:
        """The record of ``consumer`` on ``log_id``; none when there is none (or another
        log's). ``nats.errors.Error`` or ``TimeoutError`` when the server did not answer."""
        try:
            entry = await self._bucket().get(consumer)
        except KeyNotFoundError:
            return Excusals()
        return _decode(entry.value, log_id)

    async def add(self, consumer: str, log_id: str, span: tuple[int, int], floor: int) -> None:
        """Add a close's span to the record of ``consumer``, dropping what is below the
        consumer's ack ``floor``. A close that races another's (a paused subscription
        waking up) may drop the other's span: those deliveries then count."""
        kv = self._bucket()
        try:
            current = _decode((await kv.get(consumer)).value, log_id)
        except KeyNotFoundError:
            current = Excusals()
        record = current.above(floor).excusing(*span)
        if record != current:
            await kv.put(consumer, _encode(record, log_id))

    def _bucket(self) -> KeyValue:
        if self._kv is None:
            raise nats.errors.ConnectionClosedError
        return self._kv


def _encode(record: Excusals, log_id: str) -> bytes:
    return json.dumps({"log": log_id, "spans": record.spans}, separators=(",", ":")).encode()


def _decode(value: bytes | None, log_id: str) -> Excusals:
    try:
        state = json.loads(value or b"{}")
        if state.get("log") != log_id:
            return Excusals()
        return Excusals(tuple((int(low), int(high)) for low, high in state["spans"]))
    except (ValueError, TypeError, KeyError, AttributeError):
        log.warning("ignoring an unreadable excusal record %.80r", value)
        return Excusals()
