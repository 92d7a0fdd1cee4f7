"""Spark on an S3-compatible landing zone: Hadoop's ``s3a`` connector.

PySpark ships Hadoop's client but not its AWS connector. ``s3a_conf`` downloads, once,
into ``${SHOAL_CACHE:-~/.cache/shoal}/s3a/``, the jars that match the bundled Hadoop:
``hadoop-aws`` (1 MB), the AWS SDK v2 ``bundle`` it was built against (about 690 MB: the
SDK's whole shaded jar, which hadoop-aws requires) and ``analyticsaccelerator-s3``
(2.5 MB), from Maven Central, and returns the Spark settings that put them on the
classpath and point ``s3a`` at the store (endpoint, path-style access, credentials, TLS).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pyspark

from adapters.spark._jars import MavenJar, cache_dir, fetch

__all__ = ["S3aSettings", "s3a_conf", "s3a_jars", "s3a_url"]

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


def s3a_jars() -> list[Path]:
    """The connector's jars for PySpark's Hadoop, downloaded once (a file lock makes
    concurrent first uses safe; a partial download never takes a final name).
    ``OSError`` when Maven Central cannot be reached."""
    hadoop = hadoop_version()
    if hadoop not in _SDK:
        raise FileNotFoundError(f"no known AWS SDK for Hadoop {hadoop} (known: {sorted(_SDK)})")
    sdk, accelerator = _SDK[hadoop]
    wanted = [
        MavenJar(f"org/apache/hadoop/hadoop-aws/{hadoop}/hadoop-aws-{hadoop}.jar"),
        MavenJar(f"software/amazon/awssdk/bundle/{sdk}/bundle-{sdk}.jar"),
        MavenJar(
            "software/amazon/s3/analyticsaccelerator/analyticsaccelerator-s3/"
            f"{accelerator}/analyticsaccelerator-s3-{accelerator}.jar"
        ),
    ]
    cache = cache_dir("s3a")
    fetch(wanted, cache)
    return [cache / jar.name for jar in wanted]


def s3a_conf(settings: S3aSettings) -> dict[str, str]:
    """Spark settings for reading and writing ``s3a://`` (downloads the jars if needed;
    their ``spark.jars`` adds to Delta's: ``spark_conf``)."""
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
