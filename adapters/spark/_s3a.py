"""Spark on an S3-compatible landing zone: Hadoop's ``s3a`` connector.

PySpark ships Hadoop's client but not its AWS connector. ``s3a_conf`` downloads, once,
into ``${SHOAL_CACHE:-~/.cache/shoal}/s3a/``, the jars that match the bundled Hadoop:
``hadoop-aws`` (1 MB), the AWS SDK v2 ``bundle`` it was built against (about 690 MB: the
SDK's whole shaded jar, which hadoop-aws requires) and ``analyticsaccelerator-s3``
(2.5 MB), from Maven Central, and returns the Spark settings that put them on the
classpath and point ``s3a`` at the store (endpoint, path-style access, credentials, TLS).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyspark

__all__ = ["S3aSettings", "s3a_conf", "s3a_jars", "s3a_url"]

MAVEN = "https://repo1.maven.org/maven2"
# hadoop-project's aws-java-sdk-v2.version and analyticsaccelerator version, per Hadoop.
_SDK = {"3.5.0": ("2.35.4", "1.3.1"), "3.4.2": ("2.29.52", "1.2.1")}


@dataclass(frozen=True, kw_only=True)
class S3aSettings:
    """What ``s3a`` needs to reach the store; ``None`` leaves Hadoop's default (its own
    credential chain reads ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``)."""

    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    path_style: bool = True


def s3a_url(url: str) -> str:
    """``s3://bucket/key`` as Hadoop names it (``s3a://bucket/key``)."""
    return "s3a://" + url.removeprefix("s3://") if url.startswith("s3://") else url


def hadoop_version() -> str:
    jars = Path(pyspark.__file__).parent / "jars"
    for jar in jars.glob("hadoop-client-api-*.jar"):
        if match := re.fullmatch(r"hadoop-client-api-(\d+\.\d+\.\d+)\.jar", jar.name):
            return match.group(1)
    raise FileNotFoundError(f"no hadoop-client-api jar in {jars}: which Hadoop is this?")


def _cache() -> Path:
    return Path(os.environ.get("SHOAL_CACHE") or Path.home() / ".cache" / "shoal") / "s3a"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def s3a_jars() -> list[Path]:
    """The connector's jars for PySpark's Hadoop, downloaded once (a file lock makes
    concurrent first uses safe; a partial download never takes a final name).
    ``OSError`` when Maven Central cannot be reached."""
    hadoop = hadoop_version()
    if hadoop not in _SDK:
        raise FileNotFoundError(f"no known AWS SDK for Hadoop {hadoop} (known: {sorted(_SDK)})")
    sdk, accelerator = _SDK[hadoop]
    wanted = [
        f"org/apache/hadoop/hadoop-aws/{hadoop}/hadoop-aws-{hadoop}.jar",
        f"software/amazon/awssdk/bundle/{sdk}/bundle-{sdk}.jar",
        "software/amazon/s3/analyticsaccelerator/analyticsaccelerator-s3/"
        f"{accelerator}/analyticsaccelerator-s3-{accelerator}.jar",
    ]
    cache = _cache()
    jars = [cache / path.rsplit("/", 1)[1] for path in wanted]
    if all(jar.is_file() for jar in jars):
        return jars
    with _locked(cache / ".fetch.lock"):
        for path, jar in zip(wanted, jars, strict=True):
            if jar.is_file():
                continue
            partial = jar.with_suffix(".jar.part")
            with (
                urllib.request.urlopen(f"{MAVEN}/{path}", timeout=60) as answer,
                partial.open("wb") as out,
            ):
                while chunk := answer.read(1 << 20):
                    out.write(chunk)
            partial.rename(jar)
    return jars


def s3a_conf(settings: S3aSettings) -> dict[str, str]:
    """Spark settings for reading and writing ``s3a://`` (downloads the jars if needed)."""
    conf = {
        "spark.jars": ",".join(str(jar) for jar in s3a_jars()),
        "spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.path.style.access": str(settings.path_style).lower(),
    }
    if settings.endpoint_url:
        conf["spark.hadoop.fs.s3a.endpoint"] = settings.endpoint_url
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(
            settings.endpoint_url.startswith("https://")
        ).lower()
    if settings.region:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = settings.region
    if settings.access_key_id and settings.secret_access_key:
        conf["spark.hadoop.fs.s3a.access.key"] = settings.access_key_id
        conf["spark.hadoop.fs.s3a.secret.key"] = settings.secret_access_key
        conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = (
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        )
    return conf
