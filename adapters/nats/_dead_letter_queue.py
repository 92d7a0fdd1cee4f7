"""``NatsDeadLetterQueue``: the DeadLetterQueue port on the dead-letter stream.

Letters are read one by one with the stream's message-get API (next message at or after
a sequence, on the dead-letter subjects), so a listing is exact and needs no consumer.
``replay`` publishes each picked message id once to its partition's work subject under
its own message id (``Shoal-Msg-Id``), deduplicated by JetStream as
``replay:{id}@{dead-letter sequence}`` (a replay retried after a lost confirmation is
stored once), then deletes its stored letters. ``purge`` deletes them.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Collection, Sequence

import nats
import nats.errors
from nats.js.api import RawStreamMsg
from nats.js.errors import NotFoundError

from adapters._headers import H_DEAD_ATTEMPTS, H_DEAD_REASON
from adapters.nats._codec import decode, headers_deduplicated_as
from adapters.nats._tool_client import NatsToolClient
from core.dead_letters import DeadLetter, pick, reason_of
from core.errors import BrokerUnavailableError, PublishError

__all__ = ["NatsDeadLetterQueue"]

log = logging.getLogger("shoal.adapters.nats")


class NatsDeadLetterQueue(NatsToolClient):
    """The DeadLetterQueue port on NATS JetStream's dead-letter stream."""

    client_suffix = "dlq"

    # -- the port --------------------------------------------------------------------

    async def letters(self) -> Sequence[DeadLetter]:
        try:
            return [self._letter(raw) async for raw in self._stored()]
        except (nats.errors.Error, TimeoutError) as exc:
            raise BrokerUnavailableError(f"NATS: reading the dead letters: {exc!r}") from exc

    async def replay(self, message_ids: Collection[str] | None) -> int:
        chosen = pick(await self.letters(), message_ids)
        js = self._jetstream()
        replayed: set[str] = set()
        for letter in chosen:
            envelope = letter.envelope
            if envelope.message_id not in replayed:
                subject = self.subjects.for_kind(
                    envelope.kind, envelope.partition, envelope.project_id
                )
                headers = headers_deduplicated_as(
                    envelope, f"replay:{envelope.message_id}@{letter.position}"
                )
                try:
                    await js.publish(subject, envelope.payload, headers=headers)
                except (nats.errors.Error, TimeoutError) as exc:
                    raise PublishError(
                        f"replay of {envelope.message_id} not confirmed: {exc!r} "
                        f"({len(replayed)} replayed before it)"
                    ) from exc
                replayed.add(envelope.message_id)
                log.info(
                    "dead letter %s replayed to partition %d",
                    envelope.message_id,
                    envelope.partition,
                )
            await self._delete(letter)
        return len(replayed)

    async def purge(self, message_ids: Collection[str] | None) -> int:
        chosen = pick(await self.letters(), message_ids)
        for letter in chosen:
            await self._delete(letter)
        if chosen:
            log.info("%d dead letters purged", len(chosen))
        return len(chosen)

    # -- helpers ---------------------------------------------------------------------

    async def _stored(self) -> AsyncIterator[RawStreamMsg]:
        js = self._jetstream()
        stream, subjects = self.settings.dead_letter_stream, self.subjects.dead_letter_subjects()
        sequence = 1
        while True:
            try:
                raw = await js.get_msg(stream, seq=sequence, subject=subjects[0], next=True)
            except NotFoundError:
                return
            yield raw
            sequence = (raw.seq or sequence) + 1

    def _letter(self, raw: RawStreamMsg) -> DeadLetter:
        headers = raw.headers or {}
        sequence = raw.seq or 0
        dead_at = raw.time.timestamp() if raw.time is not None else 0.0
        subject = raw.subject or ""
        envelope = decode(
            subject,
            headers,
            raw.data or b"",
            self.subjects.parse_dead_letter(subject),
            fallback_id=f"{self.settings.dead_letter_stream}:{sequence}",
            fallback_time=dead_at,
        )
        attempts = headers.get(H_DEAD_ATTEMPTS, "0")
        return DeadLetter(
            envelope=envelope,
            reason=reason_of(headers.get(H_DEAD_REASON, "")),
            attempts=int(attempts) if attempts.isdigit() else 0,
            position=sequence,
            dead_at=dead_at,
        )

    async def _delete(self, letter: DeadLetter) -> None:
        try:
            await self._jetstream().delete_msg(self.settings.dead_letter_stream, letter.position)
        except NotFoundError:
            pass  # deleted meanwhile (a concurrent purge): the outcome asked for
        except (nats.errors.Error, TimeoutError) as exc:
            raise BrokerUnavailableError(
                f"NATS: deleting dead letter {letter.envelope.message_id}: {exc!r}"
            ) from exc
