"""The route table as JSON: what the route file holds (and any later store of it)."""

from __future__ import annotations

import json
from typing import Any

from core.errors import RouteError
from core.routing import Route, RouteTable

__all__ = ["decode_table", "encode_table"]

_FORMAT = 1


def _route(route: Route) -> dict[str, Any]:
    return {
        "prefix": route.prefix,
        "produce": route.produce,
        "consume": list(route.consume),
        "ordered": route.ordered,
        "draining": list(route.draining),
    }


def encode_table(table: RouteTable) -> bytes:
    doc = {
        "format": _FORMAT,
        "version": table.version,
        "default": _route(table.default),
        "routes": [_route(route) for route in table.routes],
    }
    return json.dumps(doc, indent=1).encode() + b"\n"


def _decode_route(entry: Any) -> Route:
    return Route(
        prefix=str(entry["prefix"]),
        produce=str(entry["produce"]),
        consume=tuple(str(name) for name in entry["consume"]),
        ordered=bool(entry.get("ordered", False)),
        draining=tuple(str(name) for name in entry.get("draining", ())),
    )


def decode_table(raw: bytes, where: str) -> RouteTable:
    """Raises ``RouteError`` naming ``where`` when ``raw`` is not an encoded table."""
    try:
        doc = json.loads(raw)
        if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
            raise RouteError(f"{where}: not a format {_FORMAT} shoal route table")
        return RouteTable(
            version=int(doc["version"]),
            default=_decode_route(doc["default"]),
            routes=tuple(_decode_route(entry) for entry in doc["routes"]),
        )
    except RouteError:
        raise
    except (ValueError, KeyError, TypeError) as exc:
        raise RouteError(f"{where}: malformed route table: {exc!r}") from None
