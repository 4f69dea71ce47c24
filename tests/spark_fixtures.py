"""Fixtures and helpers of the Spark tests: one quiet local SparkSession, stores served over the wire,
and a real standalone Spark cluster.

Spark's Python workers are other processes, so every store a query reads is served by
an in-process ``SegmentStoreServer`` on the loopback; the test writes through an
``EmbeddedClient`` of the same store. A test module imports the fixture functions
(``from spark_fixtures import FIXTURES  # noqa: F401`` style: each is registered under a
short name, ``spark``, ``served``, ``served_wall``, ``spark_cluster``) along with the helpers.

``spark_cluster`` is a standalone cluster started from PySpark's own ``spark-class``: a
master and one worker, JVM processes bound to 127.0.0.1, whose executors run this
interpreter. A driver reaches it with ``--master cluster.master_url`` from a process of
its own (this process may already hold the suite's ``local[2]`` session, and one
process has one SparkContext).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from readergroup.writing.writer import EventWriter
from segmentstore import ManualClock, SegmentStore, StoreConfig, WallClock
from segmentstore.client import EmbeddedClient
from segmentstore.clock import Clock
from segmentstore.net.server import SegmentStoreServer


@pytest.fixture(scope="session", name="spark")
def spark_fixture() -> Iterator[Any]:
    """One local[2] SparkSession for every Spark test (JVM start-up costs ~15 s)."""
    from spark_source.session import local_session

    session = local_session("ingestwm-tests", fast_start=True)
    yield session
    for q in session.streams.active:
        q.stop()


@dataclass
class Served:
    """A store, its server's endpoint, and an in-process client of the same store."""

    store: SegmentStore
    server: SegmentStoreServer
    client: EmbeddedClient
    clock: Clock

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    def write(self, stream: str, events: list[tuple[str, bytes, int | None]]) -> None:
        """Write ``(key, payload, event_time)`` events with one flush at the end."""
        with EventWriter(self.client, stream) as w:
            for key, payload, et in events:
                w.write_event(key, payload, et)

    def reader(self, spark: Any, stream: str, **options: object) -> Any:
        """``spark.readStream.format("ingestwm")`` on this server with ``options`` (values str()ed)."""
        r = spark.readStream.format("ingestwm").option("endpoint", self.endpoint).option("stream", stream)
        for k, v in options.items():
            r = r.option(k, str(v))
        return r.load()

    def close(self) -> None:
        self.server.stop()
        self.store.close()


def serve(clock: Clock, config: StoreConfig, **server_options: Any) -> Served:
    """A store served on the loopback (``server_options`` as ``SegmentStoreServer``'s: token, TLS)."""
    store = SegmentStore(clock=clock, config=config)
    server = SegmentStoreServer(store, **server_options)
    server.start()
    return Served(store, server, EmbeddedClient(store), clock)


@pytest.fixture(name="served")
def served_fixture() -> Iterator[Served]:
    """A store on a ManualClock at 1_000_000 ms (no advancer thread), served on the loopback."""
    s = serve(ManualClock(1_000_000), StoreConfig())
    yield s
    s.close()


@pytest.fixture(name="served_wall")
def served_wall_fixture() -> Iterator[Served]:
    """A store on the wall clock whose advancer moves idle tails every 100 ms (lag 200 ms)."""
    s = serve(WallClock(), StoreConfig(max_watermark_lag_ms=200, polling_period_ms=100, advancer_thread=True))
    yield s
    s.close()


def ms(t: dt.datetime | None) -> int | None:
    """Milliseconds since the epoch of a Spark timestamp (naive values are UTC: the session's zone)."""
    if t is None:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return round(t.timestamp() * 1000)


def run_available_now(df: Any, checkpoint: str | None = None) -> tuple[list[Any], list[dict[str, Any]]]:
    """Run ``df`` to completion with ``availableNow``; returns (all output rows, progress reports)."""
    rows: list[Any] = []
    w = df.writeStream.foreachBatch(lambda b, _i: rows.extend(b.collect())).trigger(availableNow=True)
    if checkpoint is not None:
        w = w.option("checkpointLocation", checkpoint)
    q = w.start()
    q.awaitTermination()
    return rows, list(q.recentProgress)


def wait_until(predicate: Callable[[], bool], timeout_s: float = 60.0, what: str = "condition") -> None:
    """Poll ``predicate`` every 50 ms until it holds; fail the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


def settle(query: Any) -> None:
    """Wait until the query has processed everything visible now (twice: ``processAllAvailable`` races)."""
    query.processAllAvailable()
    query.processAllAvailable()


# ---------------------------------------------------------------------- a standalone cluster

CLUSTER_START_TIMEOUT_S = 120.0
"""How long the master and the worker may take to be up and registered (two JVMs on 2 busy cores)."""


@dataclass
class StandaloneCluster:
    """A running standalone cluster: its master URL, the master's web UI, its logs and work dir."""

    master_url: str
    ui_url: str
    work_dir: Path
    log_dir: Path

    def state(self) -> dict[str, Any]:
        """The master's state (its web UI's JSON: workers, applications)."""
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=2) as r:
            state: dict[str, Any] = json.loads(r.read())
        return state

    def logs(self, lines: int = 20) -> str:
        """The last ``lines`` of each process's log, for a failure message."""
        out = []
        for f in sorted(self.log_dir.glob("*.log")):
            out.append(f"--- {f.name}\n" + "\n".join(f.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(out)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


_CHECKOUT = Path(__file__).resolve().parents[1]


def cluster_env() -> dict[str, str]:
    """The cluster processes' environment: this interpreter for the executors' Python, loopback only,
    and on ``PYTHONPATH`` only this checkout (what an installed ingestwm gives), none of the caller's
    path: the executors see what is installed, not what a driver has on its path."""
    import pyspark

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("SPARK_")}
    env.update(
        PYTHONPATH=str(_CHECKOUT),
        SPARK_HOME=str(Path(pyspark.__file__).parent),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        SPARK_DAEMON_JAVA_OPTS="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",  # its REST port is fixed (6066)
        SPARK_WORKER_OPTS="-Dspark.worker.cleanup.enabled=false",
    )
    return env


@contextmanager
def standalone_cluster(
    base: Path, cores: int = 2, memory: str = "1g", timeout_s: float = CLUSTER_START_TIMEOUT_S
) -> Iterator[StandaloneCluster]:
    """A master and one worker (``cores``, ``memory``) from ``spark-class``, up and registered; stopped after.

    Ports are free ones on 127.0.0.1 (the master's) or ephemeral (the worker's); logs and
    the worker's directory are under ``base``. Each process leads a process group of its
    own, and stopping sends SIGTERM then SIGKILL to the group (the worker's executors and
    their Python workers too), also when starting failed.
    """
    from spark_source.session import check_java

    check_java()
    env = cluster_env()
    spark_class = str(Path(env["SPARK_HOME"]) / "bin" / "spark-class")
    log_dir, work_dir = base / "logs", base / "work"
    log_dir.mkdir(parents=True, exist_ok=True)
    work_dir.mkdir(parents=True, exist_ok=True)
    port, ui_port = _free_port(), _free_port()
    cluster = StandaloneCluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui_port}", work_dir, log_dir)
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str) -> None:
        with (log_dir / f"{name}.log").open("wb") as log:
            procs.append(
                subprocess.Popen(
                    [spark_class, *args],
                    env=env,
                    cwd=base,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    try:
        start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
              "--port", str(port), "--webui-port", str(ui_port))  # fmt: skip
        start("worker", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", "0",
              "--webui-port", "0", "--cores", str(cores), "--memory", memory,
              "--work-dir", str(work_dir), cluster.master_url)  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while not _registered(cluster):
            dead = [p.args[1] for p in procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                why = f"{dead[0]} exited" if dead else f"no worker registered within {timeout_s:g} s"
                pytest.fail(f"standalone Spark cluster did not start: {why}\n{cluster.logs()}")
            time.sleep(0.2)
        yield cluster
    finally:
        _stop(procs)


def _registered(cluster: StandaloneCluster) -> bool:
    try:
        state = cluster.state()
    except (OSError, ValueError):  # not listening yet
        return False
    return any(w.get("state") == "ALIVE" for w in state.get("workers", ()))


def _stop(procs: list[subprocess.Popen[bytes]], timeout_s: float = 20.0) -> None:
    """SIGTERM to each process group (worker first: it stops its executors), then SIGKILL what is left."""
    for p in reversed(procs):
        _signal_group(p, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for p in reversed(procs):
        with suppress(subprocess.TimeoutExpired):
            p.wait(max(0.1, deadline - time.monotonic()))
        _signal_group(p, signal.SIGKILL)  # the group's other members (executors, Python workers) too
        p.wait()


def _signal_group(p: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with suppress(ProcessLookupError):
        os.killpg(p.pid, sig)  # the group this process leads (start_new_session)


@pytest.fixture(scope="module", name="spark_cluster")
def spark_cluster_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A standalone cluster (a master and a 2-core, 1 GiB worker on 127.0.0.1) for a module's tests."""
    with standalone_cluster(tmp_path_factory.mktemp("spark-cluster")) as cluster:
        yield cluster
