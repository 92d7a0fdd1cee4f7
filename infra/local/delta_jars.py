"""``python -m infra.local.delta_jars``: fetch Delta Lake's jars for Spark once, into the
cache every Spark session of shoal reads them from (``adapters.spark._jars``: which jars,
where, their pinned SHA-256). infra/local/install.sh runs it; a second run does nothing.
"""

from __future__ import annotations

import sys

from adapters.spark import DELTA_JARS, fetch_delta_jars

__all__ = ["main"]


def main() -> int:
    try:
        folder, fetched = fetch_delta_jars()
    except (OSError, ValueError) as exc:
        print(f"error: fetching Delta Lake's jars failed: {exc}", file=sys.stderr)
        return 1
    names = ", ".join(jar.name for jar in DELTA_JARS)
    print(f"delta: {'fetched' if fetched else 'ok, already present'}: {names} in {folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
