"""Jars Spark needs beyond PySpark's own, from Maven Central, kept in a cache.

Delta Lake (every session: the landing zone is a Delta table): ``io.delta:delta-spark_2.13``
and ``io.delta:delta-storage``, 4.4.0, built for Spark 4.2.0 (Maven Central has no Delta
jar for Spark 4.3). Nothing else from their pom: scala-library and antlr4-runtime are
Spark's own, and delta-kernel-*, unitycatalog-* (with their Hadoop 3.4 client, Parquet,
Jackson and log4j) serve Delta's kernel connector and Unity Catalog, not a read by path
(a table written by delta-rs reads exactly with these two jars alone).

Layout: ``${SHOAL_CACHE:-~/.cache/shoal}/delta/4.4.0/*.jar``, each checked against the
SHA-256 pinned here before it takes its final name. ``fetch_delta_jars`` downloads them
(``python -m infra.local.delta_jars``, which ``infra/local/install.sh`` runs); a Spark
session only looks in the cache (``delta_jars``), it never downloads.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DELTA_JARS",
    "DELTA_VERSION",
    "FETCH_HINT",
    "MavenJar",
    "cache_dir",
    "delta_jars",
    "delta_jars_dir",
    "fetch",
    "fetch_delta_jars",
]

MAVEN = "https://repo1.maven.org/maven2"
DELTA_VERSION = "4.4.0"
FETCH_HINT = "run infra/local/install.sh spark (or: python -m infra.local.delta_jars)"


@dataclass(frozen=True, slots=True)
class MavenJar:
    path: str  # in the repository
    sha256: str | None = None  # checked before the download takes its final name

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[1]


DELTA_JARS = (
    MavenJar(
        f"io/delta/delta-spark_2.13/{DELTA_VERSION}/delta-spark_2.13-{DELTA_VERSION}.jar",
        "27d4fd8b1f879535c573ed1c718177d6a27f24d3e626ba02e216369725721ead",
    ),
    MavenJar(
        f"io/delta/delta-storage/{DELTA_VERSION}/delta-storage-{DELTA_VERSION}.jar",
        "c46735481fa8e326b0957be02b4420cbcab4b325bb08009b7f2045a95133f1cc",
    ),
)


def cache_dir(name: str) -> Path:
    return Path(os.environ.get("SHOAL_CACHE") or Path.home() / ".cache" / "shoal") / name


def delta_jars_dir() -> Path:
    return cache_dir("delta") / DELTA_VERSION


def delta_jars() -> list[Path]:
    """Delta's jars in the cache; ``FileNotFoundError`` saying how to fetch them."""
    folder = delta_jars_dir()
    jars = [folder / jar.name for jar in DELTA_JARS]
    missing = [jar.name for jar in jars if not jar.is_file()]
    if missing:
        raise FileNotFoundError(
            f"Delta Lake's jars for Spark are not in {folder} (missing {', '.join(missing)}): "
            f"{FETCH_HINT}"
        )
    return jars


def fetch_delta_jars() -> tuple[Path, bool]:
    """Download Delta's jars once: (their folder, True if this call downloaded any).
    ``OSError`` when Maven Central cannot be reached, ``ValueError`` when a download's
    checksum is not the pinned one (nothing then takes a final name)."""
    folder = delta_jars_dir()
    return folder, fetch(DELTA_JARS, folder)


def fetch(jars: Sequence[MavenJar], folder: Path) -> bool:
    """Download the ``jars`` missing from ``folder``; True if any was. A file lock makes
    concurrent fetches safe."""
    if all((folder / jar.name).is_file() for jar in jars):
        return False
    fetched = False
    with _locked(folder / ".fetch.lock"):
        for jar in jars:
            target = folder / jar.name
            if not target.is_file():
                _download(f"{MAVEN}/{jar.path}", target, sha256=jar.sha256)
                fetched = True
    return fetched


def _download(url: str, target: Path, *, sha256: str | None) -> None:
    """``url`` into ``target``, through a partial file that takes the final name only when
    complete (and, with ``sha256``, only when its digest is that)."""
    partial = target.with_name(target.name + ".part")
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=60) as answer, partial.open("wb") as out:
            while chunk := answer.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
        if sha256 is not None and digest.hexdigest() != sha256:
            raise ValueError(f"{url}: SHA-256 {digest.hexdigest()}, expected {sha256}: not stored")
        partial.rename(target)
    finally:
        partial.unlink(missing_ok=True)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
