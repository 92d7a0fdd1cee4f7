"""The ``Shoal-*`` header names the transports share: Kafka carries every envelope field in
them; NATS writes the dead-letter and pack marks, and still decodes the per-field set from
messages stored by its earlier versions."""

from __future__ import annotations

__all__ = [
    "H_DEAD_ATTEMPTS",
    "H_DEAD_REASON",
    "H_GATEWAY",
    "H_KIND",
    "H_PACK",
    "H_PARTITION",
    "H_PROJECT",
    "H_RECEIVED_AT",
    "H_SEQUENCE",
]

H_PROJECT = "Shoal-Project"
H_PARTITION = "Shoal-Partition"
H_GATEWAY = "Shoal-Gateway"
H_SEQUENCE = "Shoal-Sequence"
H_RECEIVED_AT = "Shoal-Received-At"
H_KIND = "Shoal-Kind"
H_DEAD_REASON = "Shoal-Dead-Reason"
H_DEAD_ATTEMPTS = "Shoal-Dead-Attempts"
H_PACK = "Shoal-Pack"
