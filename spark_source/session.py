"""A quiet local SparkSession with the ``ingestwm`` format registered, and the Java it needs.

Spark's Python workers run the interpreter named by ``PYSPARK_PYTHON`` (the
``spark.pyspark.python`` setting does not reach data-source workers), so this points
it at the running interpreter unless it is set. JVM logging goes through a log4j2
configuration at level ``ERROR`` (``log_level``; no start-up banner, no progress bars,
no UI). Starting the JVM costs ~10-15 s on two cores: share one session.

``check_java`` looks for the Java that PySpark would start (``$JAVA_HOME/bin/java``,
else ``java`` on ``PATH``) and runs ``java -version`` before any session is created, so
a missing or broken Java is one ``JavaUnavailableError`` naming what was looked for,
not PySpark's ``JAVA_GATEWAY_EXITED`` traceback. ``stop_local_session`` stops the
session (its queries first) at the end of a command. Importing this module does not
import pyspark.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import JavaUnavailableError

__all__ = [
    "local_session",
    "stop_local_session",
    "check_java",
    "QUIET_LOG4J2",
    "LOG_LEVELS",
    "MIN_JAVA",
    "JAVA_CHECK_TIMEOUT_S",
    "JAVA_HINT",
]

LOG_LEVELS = ("error", "fatal", "warn", "info")
MIN_JAVA = 17
"""Spark 4 runs on Java 17 or later."""
JAVA_CHECK_TIMEOUT_S = 30.0

QUIET_LOG4J2 = """\
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = {level}
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{HH:mm:ss}} %p %c{{1}}: %m%n%ex
"""
"""The log4j2 configuration at ``{level}``. PySpark's gateway logger at the same level keeps
Spark's "Setting default log level" banner away (it is printed when the two differ)."""


def _log_config(level: str) -> str:
    text = QUIET_LOG4J2.format(level=level)
    path = Path(tempfile.gettempdir()) / f"ingestwm-spark-log4j2-{level}.properties"
    if not path.exists() or path.read_text() != text:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return str(path)


JAVA_HINT = "install Java 17 or later or set JAVA_HOME; `ingestwm demo --no-spark` runs without Spark"

_JAVA_OK: set[str] = set()
"""The java executables found working in this process (checked once each)."""


def check_java(env: Mapping[str, str] | None = None, timeout_s: float = JAVA_CHECK_TIMEOUT_S) -> str:
    """The java PySpark will start, after ``java -version`` answered within ``timeout_s``; its path.

    As PySpark's launcher does: ``$JAVA_HOME/bin/java`` if ``JAVA_HOME`` is set, else
    ``java`` on ``PATH`` (both from ``env``, default this process's environment). Missing,
    not runnable, failing, too slow or older than Java 17: a ``JavaUnavailableError``
    naming what was looked for (one line, suggesting ``--no-spark``).
    """
    env = os.environ if env is None else env
    home = env.get("JAVA_HOME")
    if home:
        where = f"$JAVA_HOME/bin/java (JAVA_HOME={home})"
        java = str(Path(home) / "bin" / "java")
        if not os.access(java, os.X_OK):
            raise _unavailable(f"no Java: {where} is not an executable file")
    else:
        where = f"java on PATH (JAVA_HOME is not set; PATH={env.get('PATH', '')})"
        found = shutil.which("java", path=env.get("PATH", ""))
        if found is None:
            raise _unavailable(f"no Java: found no {where}")
        java = found
    if java in _JAVA_OK:
        return java
    _run_java_version(java, where, env, timeout_s)
    _JAVA_OK.add(java)
    return java


def _unavailable(what: str) -> JavaUnavailableError:
    return JavaUnavailableError(f"{what} ({JAVA_HINT})")


def _run_java_version(java: str, where: str, env: Mapping[str, str], timeout_s: float) -> None:
    """``java -version`` answered, with status 0, Java 17 or later; else ``JavaUnavailableError``."""
    try:
        proc = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=timeout_s, env=dict(env)
        )
    except subprocess.TimeoutExpired:
        raise _unavailable(
            f"Java unusable: `{java} -version` did not answer in {timeout_s:g} s ({where})"
        ) from None
    except OSError as e:
        raise _unavailable(f"Java unusable: cannot run {java} ({where}): {e.strerror}") from None
    said = (proc.stderr or proc.stdout).strip()
    if proc.returncode != 0:
        first = said.splitlines()[0] if said else "no output"
        raise _unavailable(
            f"Java unusable: `{java} -version` exited with {proc.returncode} ({where}): {first}"
        )
    m = re.search(r'version "(\d+)(?:\.(\d+))?', said)
    if m is not None:
        major = int(m.group(1)) if m.group(1) != "1" else int(m.group(2) or 0)
        if major < MIN_JAVA:
            raise _unavailable(f"Java {major} at {java} ({where}); Spark needs Java {MIN_JAVA} or later")


def local_session(
    app_name: str = "ingestwm",
    master: str = "local[2]",
    shuffle_partitions: int = 2,
    conf: Mapping[str, str] | None = None,
    fast_start: bool = False,
    log_level: str = "error",
) -> Any:
    """Get or create a local SparkSession (quiet logs, no UI) with ``format("ingestwm")`` registered.

    ``fast_start`` runs the JVM with the C1 compiler only and the serial GC: a quicker
    start and warm-up for short runs (tests), less peak throughput (not for benchmarks).
    ``log_level`` is Spark's (the JVM's) log level: ``error`` (default) or ``fatal``
    (commands, which report a failed query in one line of their own). A new session
    first checks for Java (``check_java``): ``JavaUnavailableError`` if there is none.
    """
    if log_level not in LOG_LEVELS:
        raise ValueError(f"log_level must be one of {', '.join(LOG_LEVELS)}, got {log_level!r}")
    from pyspark.sql import SparkSession

    from .source import register

    if SparkSession.getActiveSession() is None:
        check_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    java_opts = f"-Dlog4j.configurationFile=file:{_log_config(log_level)} -Dlog4j2.level={log_level}"
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
    spark.sparkContext.setLogLevel(log_level.upper())
    register(spark)
    return spark


def stop_local_session() -> None:
    """Stop the active SparkSession, if any, its running queries first; nothing if Spark never started.

    Stopping a query cuts the batch it is running (Spark logs the killed tasks): the
    callers stop their own queries once idle, so this finds none running in a clean run.
    """
    if "pyspark.sql" not in sys.modules:
        return
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    if spark is None:
        return
    for q in spark.streams.active:
        q.stop()
    spark.stop()
