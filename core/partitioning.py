"""project_id -> partition, bit for bit the reference Go function.

The reference computes ``sha256(id)`` as a big-endian ``big.Int`` modulo P; Python's
arbitrary-precision ``int.from_bytes(..., "big")`` is the same number.
"""

from __future__ import annotations

import hashlib

DEFAULT_PARTITIONS = 128

__all__ = ["DEFAULT_PARTITIONS", "partition_for"]


def partition_for(project_id: str, partitions: int = DEFAULT_PARTITIONS) -> int:
    """Return the partition in ``range(partitions)`` that ``project_id`` always maps to.

    Raises ``ValueError`` when ``partitions`` is not a positive integer.
    """
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
        raise ValueError(f"partitions must be a positive integer, got {partitions!r}")
    digest = hashlib.sha256(project_id.encode("utf-8")).digest()
    return int.from_bytes(digest, "big") % partitions
