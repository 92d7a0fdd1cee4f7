"""Apache Kafka's jars from Maven Central, fetched once into a cache, and the JVM to run them.

Verified recipe (Kafka 4.1.2, Maven 3.8.7, OpenJDK 17.0.15, 2 vCPU):

- A generated pom with two dependencies, ``org.apache.kafka:kafka_2.13:4.1.2`` and
  ``org.apache.logging.log4j:log4j-slf4j-impl:2.24.3``, and
  ``mvn -B -q -Dmaven.repo.local=CACHE/kafka/m2 dependency:copy-dependencies
  -DincludeScope=runtime -DoutputDirectory=...`` gives 46 jars (about 7 s warm, the first
  time also downloads Maven's dependency plugin). The runtime scope of kafka_2.13's pom has
  every server module (kafka-server, kafka-raft, kafka-metadata, the coordinators, ...)
  but no slf4j binding (kafka_2.13 depends on slf4j-api 1.7.36); log4j-slf4j-impl (the
  slf4j 1.x binding, not log4j-slf4j2-impl) brings log4j-api and log4j-core 2.24.3, the
  version Kafka 4.1 ships. Without it the server still starts, but logs nothing
  (``SLF4J: Defaulting to no-operation (NOP) logger implementation``).
- ``kafka.tools.StorageTool format -t ID -c server.properties`` (static quorum: no
  ``--standalone``) takes about 1 s; it prints
  ``Formatting metadata directory DIR with metadata.version 4.1-IV1.``
- A log4j2 *properties* file works (``-Dlog4j2.configurationFile=...``).

Layout: ``${SHOAL_CACHE:-~/.cache/shoal}/kafka/<version>/libs/*.jar`` (plus ``.complete``,
written last), Maven's local repository in ``.../kafka/m2``. ``SHOAL_KAFKA_LIBS`` points at
another directory of jars (for example an unpacked Kafka tarball's ``libs/``).
``python -m infra.local.kafka fetch`` (or infra/local/install.sh) fetches; a second run
does nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

KAFKA_VERSION = "4.1.2"
SCALA_VERSION = "2.13"
LOG4J_VERSION = "2.24.3"  # Kafka 4.1's log4j2 version (gradle/dependencies.gradle)
MIN_JAVA = 17  # Kafka 4.x brokers need Java 17+

FETCH_HINT = "run infra/local/install.sh (or: python -m infra.local.kafka fetch)"

_POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>shoal.local</groupId>
  <artifactId>kafka-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_{scala}</artifactId>
      <version>{kafka}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>{log4j}</version>
    </dependency>
  </dependencies>
</project>
"""


def cache_root() -> Path:
    base = os.environ.get("SHOAL_CACHE") or str(Path.home() / ".cache" / "shoal")
    return Path(base) / "kafka"


def default_libs_dir(version: str = KAFKA_VERSION) -> Path:
    return cache_root() / version / "libs"


def _complete(libs: Path) -> bool:
    return (libs / ".complete").is_file() and any(libs.glob("kafka_*.jar"))


def kafka_libs(version: str = KAFKA_VERSION) -> Path:
    """The directory of Kafka's jars; ``FileNotFoundError`` with a hint when absent."""
    override = os.environ.get("SHOAL_KAFKA_LIBS")
    if override:
        libs = Path(override)
        if not any(libs.glob("kafka_*.jar")):
            raise FileNotFoundError(f"SHOAL_KAFKA_LIBS={override}: no kafka_*.jar in it")
        return libs
    libs = default_libs_dir(version)
    if not _complete(libs):
        raise FileNotFoundError(f"Kafka {version} jars not found in {libs}: {FETCH_HINT}")
    return libs


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def fetch_kafka(version: str = KAFKA_VERSION, *, quiet: bool = True) -> tuple[Path, bool]:
    """Download Kafka's runtime jars once: (libs dir, True if this call fetched them).

    Idempotent and safe to run concurrently (a file lock); the jars land in a temporary
    directory renamed into place, so a failed or interrupted run leaves nothing half-done.
    """
    libs = default_libs_dir(version)
    if _complete(libs):
        return libs, False
    mvn = shutil.which("mvn")
    if mvn is None:
        raise FileNotFoundError("mvn (Maven 3) not found: apt-get install maven")
    root = cache_root()
    with _locked(root / ".fetch.lock"):
        if _complete(libs):
            return libs, False
        libs.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="fetch-", dir=libs.parent))
        try:
            pom = work / "pom.xml"
            pom.write_text(_POM.format(scala=SCALA_VERSION, kafka=version, log4j=LOG4J_VERSION))
            out = work / "libs"
            argv = [
                mvn,
                "-B",
                *(["-q"] if quiet else []),
                "-f",
                str(pom),
                f"-Dmaven.repo.local={root / 'm2'}",
                "dependency:copy-dependencies",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={out}",
            ]
            done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=work)
            if done.returncode != 0 or not any(out.glob("kafka_*.jar")):
                tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
                raise RuntimeError(f"mvn failed (exit {done.returncode}):\n{tail}")
            names = sorted(p.name for p in out.glob("*.jar"))
            (out / ".complete").write_text("\n".join(names) + "\n")
            if libs.exists():
                shutil.rmtree(libs)
            out.rename(libs)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return libs, True


def java_version(java: Path) -> int | None:
    """The feature version (17, 21 ...) of a java binary, None when it does not run."""
    try:
        done = subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr + done.stdout)
    if m is None:
        return None
    major = int(m[1])
    return int(m[2] or 0) if major == 1 else major  # "1.8.0" is Java 8


_java: Path | None = None


def find_java() -> Path:
    """$SHOAL_JAVA, $JAVA_HOME/bin/java, then java on PATH; the first with Java >= 17."""
    global _java  # noqa: PLW0603
    if _java is not None:
        return _java
    candidates = [os.environ.get("SHOAL_JAVA", "")]
    if os.environ.get("JAVA_HOME"):
        candidates.append(str(Path(os.environ["JAVA_HOME"]) / "bin" / "java"))
    candidates.append(shutil.which("java") or "")
    seen = []
    for cand in dict.fromkeys(c for c in candidates if c):
        path = Path(cand)
        version = java_version(path) if path.is_file() else None
        if version is not None and version >= MIN_JAVA:
            _java = path
            return path
        seen.append(f"{path} (version {version})")
    found = "; found: " + ", ".join(seen) if seen else ""
    raise FileNotFoundError(
        f"java >= {MIN_JAVA} not found (set SHOAL_JAVA or JAVA_HOME; "
        f"apt-get install openjdk-17-jre-headless){found}"
    )
