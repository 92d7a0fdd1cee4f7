"""Start-up: Delta Lake from the jar cache, the JVM's real error on a failed start, one
session per process, light imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pyspark import SparkConf

from adapters.spark import (
    DELTA_JARS,
    SparkAnalytics,
    SparkSettings,
    SparkStartError,
    delta_jars_dir,
    start_spark,
)
from adapters.spark._launch import launch_capturing_stderr
from adapters.spark._session import spark_conf


def test_bad_setting_shows_the_jvm_error() -> None:
    conf = SparkConf(loadDefaults=False)
    conf.set("spark.master", "local[1]").set("spark.driver.memory", "banana")
    with pytest.raises(SparkStartError) as caught:
        launch_capturing_stderr(conf)
    message = str(caught.value)
    assert "JAVA_GATEWAY_EXITED" in message  # what PySpark says
    assert "Invalid maximum heap size: -Xmxbanana" in message  # what the JVM said
    assert "Invalid maximum heap size" in caught.value.jvm_stderr


def test_one_session_per_process(analytics: SparkAnalytics) -> None:
    assert start_spark(SparkSettings()).session is analytics.spark
    with pytest.raises(SparkStartError, match="one session per process"):
        start_spark(SparkSettings(master="local[1]"))


def test_start_up_settings() -> None:
    conf = dict(spark_conf(SparkSettings()).getAll())
    assert conf["spark.master"] == "local[*]"
    assert conf["spark.ui.enabled"] == "false"
    assert conf["spark.sql.catalogImplementation"] == "in-memory"
    assert conf["spark.sql.shuffle.partitions"] == "4"
    assert "spark.jars.packages" not in conf
    assert conf["spark.driver.extraJavaOptions"] == "-XX:TieredStopAtLevel=1 -XX:+UseParallelGC"
    cluster = dict(spark_conf(SparkSettings(master="spark://head:7077")).getAll())
    assert "spark.driver.host" not in cluster  # executors must reach the driver by name


def test_delta_comes_from_the_jar_cache() -> None:
    conf = dict(spark_conf(SparkSettings()).getAll())
    cached = [str(delta_jars_dir() / jar.name) for jar in DELTA_JARS]
    assert conf["spark.jars"].split(",") == cached
    assert [Path(jar).name for jar in cached] == [
        "delta-spark_2.13-4.4.0.jar",
        "delta-storage-4.4.0.jar",
    ]
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert (
        conf["spark.sql.catalog.spark_catalog"] == "org.apache.spark.sql.delta.catalog.DeltaCatalog"
    )
    with_more = SparkSettings(extra_conf={"spark.jars": "/opt/more.jar"})
    assert dict(spark_conf(with_more).getAll())["spark.jars"].split(",") == [
        *cached,
        "/opt/more.jar",
    ]


def test_no_jars_in_the_cache_says_how_to_fetch_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session never downloads: without the cache it does not start, and says why."""
    monkeypatch.setenv("SHOAL_CACHE", str(tmp_path))
    with pytest.raises(SparkStartError) as caught:
        spark_conf(SparkSettings())
    message = str(caught.value)
    assert f"Delta Lake's jars for Spark are not in {tmp_path / 'delta' / '4.4.0'}" in message
    assert "python -m infra.local.delta_jars" in message


def test_running_session_matches_the_settings(analytics: SparkAnalytics) -> None:
    conf = analytics.spark.sparkContext.getConf()
    assert conf.get("spark.ui.enabled") == "false"
    assert analytics.spark.conf.get("spark.sql.extensions") == (
        "io.delta.sql.DeltaSparkSessionExtension"
    )
    assert analytics.spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert analytics.progress().active_stages == 0


def test_importing_the_package_and_the_cli_loads_no_pyspark() -> None:
    code = (
        "import sys, adapters.spark; assert 'pydantic_settings' not in sys.modules; "
        "import services.cli.main; assert 'pyspark' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
