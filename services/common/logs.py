"""Logging set-up: readable text by default, one JSON object per line with ``--log-format json``.

Decisions are logged with their reasons as structured fields (``extra={"fields": {...}}``)
so the JSON form carries them as keys.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(getattr(record, "fields", {}))
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        if getattr(record, "refusal", False):
            return f"error: {record.getMessage()}"
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        fields = getattr(record, "fields", {})
        tail = "".join(f" {k}={v}" for k, v in fields.items())
        line = f"{stamp} {record.levelname:<5} {record.name}: {record.getMessage()}{tail}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def configure_logging(fmt: str = "text", level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("uvicorn.access", "nats", "grpc", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


REFUSAL = {"refusal": True}
"""``log.error(..., extra=REFUSAL)``: a process that will not start says why in one line,
``error: ...`` in text (the CLI's form), a JSON object like any other otherwise."""


def fields(**values: Any) -> dict[str, Any]:
    """``logger.info("...", extra=fields(partition=3, reason="..."))``."""
    return {"fields": values}
