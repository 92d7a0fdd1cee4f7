"""aiokafka's names, imported in one place.

aiokafka 0.14 ships no type information (no ``py.typed``), so mypy sees these as ``Any``;
the ignores below say so once instead of in every module. (``unused-ignore`` keeps them
harmless if the project later adds a ``[[tool.mypy.overrides]]`` for aiokafka.)
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import anyio
import anyio.lowlevel
from aiokafka import (  # type: ignore[import-untyped, unused-ignore]
    AIOKafkaConsumer,
    AIOKafkaProducer,
    TopicPartition,
)
from aiokafka.admin import (  # type: ignore[import-untyped, unused-ignore]
    AIOKafkaAdminClient,
    NewTopic,
    RecordsToDelete,
)
from aiokafka.admin.config_resource import (  # type: ignore[import-untyped, unused-ignore]
    ConfigResource,
    ConfigResourceType,
)
from aiokafka.conn import create_conn  # type: ignore[import-untyped, unused-ignore]
from aiokafka.errors import (  # type: ignore[import-untyped, unused-ignore]
    AuthenticationFailedError,
    ConsumerStoppedError,
    IllegalSaslStateError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    OffsetOutOfRangeError,
    ProducerFenced,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
    for_code,
)
from aiokafka.protocol.commit import (  # type: ignore[import-untyped, unused-ignore]
    OffsetFetchRequest,
)

__all__ = [
    "AIOKafkaAdminClient",
    "AIOKafkaConsumer",
    "AIOKafkaProducer",
    "AuthenticationFailedError",
    "ConfigResource",
    "ConfigResourceType",
    "ConsumerStoppedError",
    "IllegalSaslStateError",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "NewTopic",
    "OffsetFetchRequest",
    "OffsetOutOfRangeError",
    "ProducerFenced",
    "RecordsToDelete",
    "SaslAuthenticationFailed",
    "TopicPartition",
    "UnsupportedSaslMechanismError",
    "create_conn",
    "for_code",
    "stop_quietly",
]

log = logging.getLogger("shoal.adapters.kafka")


async def stop_quietly(client: Any, method: str, scope: anyio.CancelScope, what: str) -> None:
    """``await client.<method>()`` (``stop`` or ``close``), errors logged, not raised.

    aiokafka 0.14: a consumer stopped before its coordinator task first ran (a stop right
    after start) re-raises that task's CancelledError from ``stop()``. One checkpoint lets
    the task start; a CancelledError that ``scope`` (the caller's deadline) did not cause
    is swallowed."""
    await anyio.lowlevel.checkpoint()
    try:
        await getattr(client, method)()
    except asyncio.CancelledError:
        if scope.cancel_called:
            raise
        log.debug("stopping the %s: a stray CancelledError from aiokafka", what)
    except Exception as exc:
        log.debug("stopping the %s: %r", what, exc)
