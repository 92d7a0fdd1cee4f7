"""What a NATS stream holds on a subject, counted in messages: a pack (``core.packing``)
counts its parts, a plain message one."""

from __future__ import annotations

import nats
from nats.js import api as js_api

from core.packing import decode_pack, is_pack


async def stored_messages(url: str, stream: str, subject: str) -> int:
    """The messages stored on ``subject`` (a filter) in ``stream``, read through an
    ephemeral consumer that acks nothing."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        psub = await js.pull_subscribe(
            subject,
            stream=stream,
            config=js_api.ConsumerConfig(
                ack_policy=js_api.AckPolicy.NONE, deliver_policy=js_api.DeliverPolicy.ALL
            ),
        )
        pending = (await psub.consumer_info()).num_pending or 0
        count = 0
        while pending > 0:
            msgs = await psub.fetch(min(pending, 256), timeout=5)
            count += sum(len(decode_pack(m.data)) if is_pack(m.data) else 1 for m in msgs)
            pending -= len(msgs)
        await psub.unsubscribe()
        return count
    finally:
        await nc.close()
