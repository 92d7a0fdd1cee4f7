"""Start-up: the JVM's real error on a failed start, one session per process, light imports."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pyspark import SparkConf

from adapters.spark import SparkAnalytics, SparkSettings, SparkStartError, start_spark
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


def test_running_session_matches_the_settings(analytics: SparkAnalytics) -> None:
    conf = analytics.spark.sparkContext.getConf()
    assert conf.get("spark.ui.enabled") == "false"
    assert analytics.spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert analytics.progress().active_stages == 0


def test_importing_the_package_and_the_cli_loads_no_pyspark() -> None:
    code = (
        "import sys, adapters.spark; assert 'pydantic_settings' not in sys.modules; "
        "import services.cli.main; assert 'pyspark' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
