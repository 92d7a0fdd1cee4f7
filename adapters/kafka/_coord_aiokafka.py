"""The aiokafka names the coordination adapters use beyond ``_aiokafka``'s, in one place.

aiokafka 0.14 ships no type information, so mypy sees these as ``Any`` (see ``_aiokafka``).
The group protocol requests are the version-negotiating builders aiokafka's own consumer
uses; the coordination session speaks the classic group protocol with them directly.
"""

from __future__ import annotations

from aiokafka.admin.config_resource import (  # type: ignore[import-untyped, unused-ignore]
    ConfigResource,
    ConfigResourceType,
)
from aiokafka.client import (  # type: ignore[import-untyped, unused-ignore]
    AIOKafkaClient,
    ConnectionGroup,
    CoordinationType,
)
from aiokafka.coordinator.protocol import (  # type: ignore[import-untyped, unused-ignore]
    ConsumerProtocol,
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from aiokafka.protocol.admin import (  # type: ignore[import-untyped, unused-ignore]
    DescribeGroupsRequest,
)
from aiokafka.protocol.group import (  # type: ignore[import-untyped, unused-ignore]
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    SyncGroupRequest,
)

__all__ = [
    "AIOKafkaClient",
    "ConfigResource",
    "ConfigResourceType",
    "ConnectionGroup",
    "ConsumerProtocol",
    "ConsumerProtocolMemberAssignment",
    "ConsumerProtocolMemberMetadata",
    "CoordinationType",
    "DescribeGroupsRequest",
    "HeartbeatRequest",
    "JoinGroupRequest",
    "LeaveGroupRequest",
    "SyncGroupRequest",
]
