"""What the commands that read the transport's broker (``shoal dlq``, ``shoal replay``)
share: which broker (``SHOAL_TRANSPORT`` and its ``SHOAL_NATS_*`` / ``SHOAL_KAFKA_*``
settings; without them, the broker of the stack ``shoal up`` runs) and how a payload is
printed."""

from __future__ import annotations

import base64
import logging
import os

from services.cli._status import find_stacks, state_file
from services.common.backends import Backends
from services.common.settings import ShoalSettings, load_settings

__all__ = ["payload_fields", "transport_backends"]


def transport_backends() -> tuple[ShoalSettings, Backends]:
    """The settings and the backends of the configured transport, the running ``shoal
    up``'s settings filling in what the environment does not set."""
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # the command's error line says it
    for stack in find_stacks(state_file()):
        for name, value in stack.transport_env.items():
            os.environ.setdefault(name, value)  # the user's own settings win
    shoal = load_settings(ShoalSettings)
    backends = Backends()
    backends.config.from_dict(
        {
            "coordination": shoal.coordination,
            "transport": shoal.transport,
            "group": shoal.group,
            "partitions": shoal.partitions,
            "strategy": shoal.strategy,
        }
    )
    return shoal, backends


def payload_fields(data: bytes) -> dict[str, str]:
    """``payload`` when it is UTF-8 text, else ``payload_base64``."""
    try:
        return {"payload": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"payload_base64": base64.b64encode(data).decode()}
