"""Fixtures and helpers of the Spark tests: one quiet local SparkSession, stores served over the wire.

Spark's Python workers are other processes, so every store a query reads is served by
an in-process ``SegmentStoreServer`` on the loopback; the test writes through an
``EmbeddedClient`` of the same store. A test module imports the fixture functions
(``from spark_fixtures import FIXTURES  # noqa: F401`` style: each is registered under a
short name, ``spark``, ``served``, ``served_wall``) along with the helpers.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
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
