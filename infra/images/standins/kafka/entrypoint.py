"""The stand-in Kafka image's entrypoint: the apache/kafka image's configuration rule
(each ``KAFKA_X_Y`` variable is the property ``x.y``; ``__`` is ``_``, ``___`` is ``-``),
then the storage formatted once with ``CLUSTER_ID`` and the broker started in the
foreground (its log on stdout)."""

import os
import subprocess
import sys
from pathlib import Path

LIBS = "/opt/kafka/libs/*"
CONFIG = Path("/opt/kafka/config")
# Variables of the image, not properties (as apache/kafka treats them).
NOT_PROPERTIES = {"KAFKA_HEAP_OPTS", "KAFKA_OPTS", "KAFKA_JVM_PERFORMANCE_OPTS", "KAFKA_LOG4J_OPTS"}
DEFAULT_CLUSTER_ID = "5L6g3nShT-eMCtK--X86sw"  # apache/kafka's, when CLUSTER_ID is unset
LOG4J2 = """status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
"""


def property_name(variable: str) -> str:
    name = variable.removeprefix("KAFKA_").lower()
    return (
        name.replace("___", "\0")
        .replace("__", "\1")
        .replace("_", ".")
        .replace("\0", "-")
        .replace("\1", "_")
    )


def main() -> None:
    CONFIG.mkdir(parents=True, exist_ok=True)
    properties = {
        property_name(key): value
        for key, value in sorted(os.environ.items())
        if key.startswith("KAFKA_") and key not in NOT_PROPERTIES
    }
    server = CONFIG / "server.properties"
    server.write_text("".join(f"{key}={value}\n" for key, value in properties.items()))
    log4j = CONFIG / "log4j2.properties"
    log4j.write_text(LOG4J2)
    java = [
        "java",
        *os.environ.get("KAFKA_HEAP_OPTS", "-Xms256m -Xmx512m").split(),
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        LIBS,
    ]
    cluster = os.environ.get("CLUSTER_ID", DEFAULT_CLUSTER_ID)
    formatted = subprocess.run(
        [
            *java,
            "kafka.tools.StorageTool",
            "format",
            "--ignore-formatted",
            "-t",
            cluster,
            "-c",
            str(server),
        ],
        check=False,
    )
    if formatted.returncode != 0:
        sys.exit(formatted.returncode)
    os.execvp("java", [*java, "kafka.Kafka", str(server)])


if __name__ == "__main__":
    main()
