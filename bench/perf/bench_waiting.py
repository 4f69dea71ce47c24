"""A waiting reader: store calls per second while idle, and latency from append to delivery.

On a wall-clock store, in one run:

- ``idle calls/s``: a caught-up reader of a stream of 16 and of 64 segments in
  ``read_next_event(timeout)``, embedded and over ``RemoteClient`` on loopback; every
  call on its client is counted. (Polling each tail every 20 ms made 865/s at 16
  segments and 3,250/s at 64; the goal is a cost independent of the segment count.)
- ``append->delivery``: a writer appends one event every 5 ms to a 16-segment stream
  over loopback; the reader waits in ``read_next_event``; p50 / p99 of the time from
  just before the append to the event's delivery. Side by side, the store's floor: a
  raw waiting ``read`` on the segment, woken by the same appends. Goal: p50 < 5 ms.

Run ``python -m bench.perf.bench_waiting [--quick | --tiny]``; ``run(size)`` returns the rows.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from readergroup.config import ReaderGroupConfig, TimeDomain
from readergroup.reading.group import ReaderGroup
from readergroup.reading.reader import EventReader, ReadKind
from readergroup.writing.writer import EventWriter
from segmentstore import SegmentStore, WallClock
from segmentstore.client import EmbeddedClient, RemoteClient, SegmentStoreClient
from segmentstore.net.server import SegmentStoreServer

from .call_counts import count_calls
from .errors import BenchmarkError
from .suite import Row, Size, module_main, row, sized

__all__ = ["run", "main", "LATENCY_GOAL_MS"]

LATENCY_GOAL_MS = 5.0
_S = "bench/waiting"


@contextmanager
def _client(remote: bool) -> Iterator[SegmentStoreClient]:
    store = SegmentStore(clock=WallClock())
    try:
        if not remote:
            yield EmbeddedClient(store)
            return
        with SegmentStoreServer(store) as srv, RemoteClient(("127.0.0.1", srv.port)) as c:
            yield c
    finally:
        store.close()


def _group(c: SegmentStoreClient, segments: int) -> ReaderGroup:
    c.create_stream(_S, segments)
    cfg = ReaderGroupConfig((_S,), time_domain=TimeDomain.INGESTION_TIME)
    return ReaderGroup("g", cfg, c, WallClock())


@contextmanager
def _caught_up(remote: bool, segments: int) -> Iterator[tuple[SegmentStoreClient, EventReader]]:
    """A client and a reader of a ``segments``-segment stream with nothing left to read."""
    with _client(remote) as c:
        reader = _group(c, segments).create_reader("r")
        while reader.read_next_event(0).kind is not ReadKind.EMPTY:
            pass
        yield c, reader


def _idle_calls_per_s(remote: bool, segments: int, seconds: float) -> float:
    with _caught_up(remote, segments) as (c, reader):
        calls = count_calls(c)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            r = reader.read_next_event(timeout_ms=int(seconds * 1000))
            assert r.kind in (ReadKind.EMPTY, ReadKind.WATERMARK), r
        return sum(calls.values()) / (time.perf_counter() - t0)


def _percentiles(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    return xs[len(xs) // 2], xs[min(len(xs) - 1, int(len(xs) * 0.99))]


def _paced_appends(send: Callable[[int], None], n: int) -> threading.Thread:
    def go() -> None:
        for i in range(n):
            time.sleep(0.005)
            send(i)

    t = threading.Thread(target=go)
    t.start()
    return t


def _shifted(send: Callable[[int], None], first: int, i: int) -> None:
    send(first + i)


def _reader_latency_ms(n: int) -> list[float]:
    """Append->delivery times of ``n`` paced events, after a warm-up round of as many (not counted).

    The warm-up lets the writer learn its event numbers in every segment (one round trip
    per segment on its first write) and the reader settle, so the figure is the steady one.
    """
    with _caught_up(True, 16) as (c, reader):
        writer = EventWriter(c, _S)
        sent: dict[int, float] = {}

        def send(i: int) -> None:
            sent[i] = time.perf_counter()
            writer.write_event(f"k{i % n}", i.to_bytes(4, "little"))

        out: list[float] = []
        for first in (0, n):  # the warm-up round, then the measured one
            t = _paced_appends(functools.partial(_shifted, send, first), n)
            got = 0
            while got < n:
                r = reader.read_next_event(timeout_ms=10_000)
                assert r.kind is not ReadKind.EMPTY, "an event was not delivered within 10 s"
                if r.is_event:
                    assert r.payload is not None
                    i = int.from_bytes(r.payload, "little")
                    got += 1
                    if first:
                        out.append((time.perf_counter() - sent[i]) * 1000)
            t.join()
        return out


def _raw_latency_ms(n: int) -> list[float]:
    with _client(True) as c:
        seg = c.create_stream(_S, 1).active_segments[0].name
        sent: dict[int, float] = {}

        def send(i: int) -> None:
            sent[i] = time.perf_counter()
            c.append(seg, i.to_bytes(4, "little"))

        t = _paced_appends(send, n)
        out: list[float] = []
        off = 0
        while len(out) < n:
            r = c.read(seg, off, 1 << 20, wait_ms=10_000)
            now = time.perf_counter()
            for j in range(0, len(r.data), 4):
                out.append((now - sent[int.from_bytes(r.data[j : j + 4], "little")]) * 1000)
            off += len(r.data)
        t.join()
        return out


def run(size: Size = "full") -> list[Row]:
    seconds = sized(size, 0.1, 0.5, 2.0)
    n = sized(size, 10, 60, 400)
    rows: list[Row] = []
    for segments in (16, 64):
        for remote in (False, True):
            where = "remote" if remote else "embedded"
            rate = _idle_calls_per_s(remote, segments, seconds)
            rows.append(row(f"idle calls/s, {segments} segments, {where}", rate, "calls/s"))
    raw50, raw99 = _percentiles(_raw_latency_ms(n))
    rd50, rd99 = _percentiles(_reader_latency_ms(n))
    rows += [
        row("append->read p50 (raw waiting read, floor)", raw50, "ms"),
        row("append->read p99 (raw waiting read, floor)", raw99, "ms"),
        row("append->delivery p50 (reader, 16 segments)", rd50, "ms", "raw p50", rd50 / raw50),
        row("append->delivery p99 (reader, 16 segments)", rd99, "ms", "raw p99", rd99 / raw99),
        row("append->delivery p50 vs goal", rd50, "ms", f"goal {LATENCY_GOAL_MS} ms", rd50 / LATENCY_GOAL_MS),
    ]
    return rows


# ---------------------------------------------------------------- pytest-benchmark (bench/perf/conftest.py)
def _bench_idle(benchmark: Any, segments: int) -> None:
    with _caught_up(False, segments) as (_, reader):
        r = benchmark(reader.read_next_event, 0)
    if r.kind not in (ReadKind.EMPTY, ReadKind.WATERMARK):
        raise BenchmarkError(f"a caught-up reader read {r}")


def test_idle_read_16_segments(benchmark: Any) -> None:
    _bench_idle(benchmark, 16)


def test_idle_read_64_segments(benchmark: Any) -> None:
    _bench_idle(benchmark, 64)


def test_write_then_deliver_one_event_remote(benchmark: Any) -> None:
    """One event written and flushed, then read by a caught-up reader of 16 segments, over loopback."""
    with _caught_up(True, 16) as (c, reader):
        writer = EventWriter(c, _S)
        sent = iter(range(1 << 30))

        def deliver() -> int:
            i = next(sent)
            writer.write_event(f"k{i}", i.to_bytes(4, "little"))
            writer.flush()
            while True:
                r = reader.read_next_event(timeout_ms=10_000)
                if r.kind is ReadKind.EMPTY:
                    raise BenchmarkError("an event was not delivered within 10 s")
                if r.is_event:
                    assert r.payload is not None
                    return int.from_bytes(r.payload, "little") - i

        if deliver() != 0:
            raise BenchmarkError("the reader delivered another event than the one written")
        benchmark(deliver)


def main(argv: list[str] | None = None) -> list[Row]:
    """Run ``python -m bench.perf.bench_waiting [--quick | --tiny]`` and print the table."""
    return module_main(run, argv, __doc__, "0.5 s idle and 60 events instead of 2 s and 400")


if __name__ == "__main__":
    main()
