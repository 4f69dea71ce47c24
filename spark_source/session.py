"""A quiet local SparkSession with the ``ingestwm`` format registered.

Spark's Python workers run the interpreter named by ``PYSPARK_PYTHON`` (the
``spark.pyspark.python`` setting does not reach data-source workers), so this points
it at the running interpreter unless it is set. JVM logging goes through a log4j2
configuration at level ``ERROR`` (no start-up banner, no progress bars, no UI).
Starting the JVM costs ~10-15 s on two cores: share one session.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .source import register

__all__ = ["local_session", "QUIET_LOG4J2"]

QUIET_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
"""


def _log_config() -> str:
    path = Path(tempfile.gettempdir()) / "ingestwm-spark-log4j2.properties"
    if not path.exists() or path.read_text() != QUIET_LOG4J2:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(QUIET_LOG4J2)
        tmp.replace(path)
    return str(path)


def local_session(
    app_name: str = "ingestwm",
    master: str = "local[2]",
    shuffle_partitions: int = 2,
    conf: Mapping[str, str] | None = None,
    fast_start: bool = False,
) -> Any:
    """Get or create a local SparkSession (quiet logs, no UI) with ``format("ingestwm")`` registered.

    ``fast_start`` runs the JVM with the C1 compiler only and the serial GC: a quicker
    start and warm-up for short runs (tests), less peak throughput (not for benchmarks).
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    java_opts = f"-Dlog4j.configurationFile=file:{_log_config()} -Dlog4j2.level=error"
    if fast_start:
        java_opts += " -XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", java_opts)
        .config("spark.executor.extraJavaOptions", java_opts)
        .config("spark.sql.streaming.stopTimeout", "10s")
        .config(
            "spark.executorEnv.PYTHONWARNINGS", "ignore::FutureWarning"
        )  # pandas notes from PySpark's own code
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
