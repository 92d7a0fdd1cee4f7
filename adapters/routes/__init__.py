"""The RouteStore port as one JSON file (``RouteFile``): what ``shoal migrate`` writes and
every gateway and handler reads (``SHOAL_ROUTES_FILE``). Across datacenters, the file is
distributed like any configuration (a ConfigMap, a synced volume); a store on the
clusters themselves (a JetStream KV bucket) is the same port, not built yet.

Format (UTF-8)::

    {"format": 1, "version": 3,
     "default": {"prefix": "", "produce": "@local", "consume": ["east", "west"],
                 "ordered": false, "draining": []},
     "routes": [{"prefix": "acme-", "produce": "west", "consume": ["west"], ...}]}
"""

from adapters.routes._file import RouteFile

__all__ = ["RouteFile"]
