"""Small files that several processes read and one at a time rewrites (the API keys file,
the route table): written whole or not at all."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["replace_file"]


def replace_file(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to a temporary file beside ``path`` (created with ``mode``), fsync it
    and rename it over ``path``: a reader sees the old file or the new one, never a part."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    temporary.replace(path)
