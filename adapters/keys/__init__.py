"""The ApiKeyStore port as one JSON file (``ApiKeyFile``): what ``shoal keys`` edits and the
gateway reads (``SHOAL_GATEWAY_API_KEYS_FILE``). On Kubernetes, mount it from a Secret.

Format (UTF-8, mode 0600), secrets never stored, only their SHA-256::

    {"version": 1, "keys": [{"key_id": "1a2b3c4d5e6f", "secret_sha256": "<64 hex>",
      "projects": ["dev-1", "dev-2"] | null, "label": "...", "created_at": 1764140000.0,
      "revoked_at": null, "rate": null}]}
"""

from adapters.keys._file import ApiKeyFile, KeyFileError

__all__ = ["ApiKeyFile", "KeyFileError"]
