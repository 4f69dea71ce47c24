"""A reader over ``RemoteClient`` owning 64 segments: store calls and bytes per poll, events/s; before/after.

One reader of a group over one stream of 64 segments, served by an in-process
``SegmentStoreServer`` (loopback); the events are written straight into the store (not
counted). A *poll* is what the simulator's readers do every ``poll_ms``: ``read_batch``
until an empty batch. Both contenders run the same polls on a ``ManualClock`` (100 ms
between polls, reports every 100 ms), in turns:

- ``before``: ``EventReader.batched_reads`` off: a ``read`` and a ``watermarks_at`` per
  segment with data and a ``wait_any`` over the tails, the read path before issue 36 (the
  reader's other savings, fewer group syncs, apply to both: the code before issue 36,
  run from a checkout, makes one more ``wait_any`` per poll);
- ``after``: one ``read_many`` per look (the blocks, the watermarks at their events and
  the tails together), no second look in the same instant.

Rows: for an *idle* reader (nothing written) and a *busy* one (100 events in each
segment before each poll): store calls per poll (every call on the reader's client,
the group state's too), bytes per poll (sent and received on its sockets), and for the
busy one the events delivered per wall second. The events delivered are checked equal.

Run ``python -m bench.perf.bench_remote_reader [--quick | --tiny]``; ``run(size)`` returns the rows.
"""

from __future__ import annotations

import socket
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from readergroup.config import ReaderGroupConfig, TimeDomain
from readergroup.format.events import encode_event
from readergroup.reading.group import ReaderGroup
from readergroup.reading.reader import EventReader
from segmentstore import ManualClock, SegmentStore
from segmentstore.client import EmbeddedClient, RemoteClient, SegmentStoreClient
from segmentstore.client.interface import wire_methods
from segmentstore.clock import monotonic_s
from segmentstore.net.server import SegmentStoreServer

from .errors import BenchmarkError
from .suite import Row, Size, module_main, row, sized

__all__ = ["run", "main", "SEGMENTS"]

SEGMENTS = 64
STREAM = "bench/remote-reader"
_POLL_MS = 100


class _Counted:
    """A socket whose bytes sent and received are counted (everything else is the socket's)."""

    def __init__(self, sock: socket.socket, tally: Counter[str]) -> None:
        self._sock = sock
        self._tally = tally

    def sendall(self, data: Any) -> None:
        self._tally["bytes"] += len(memoryview(data).cast("B"))
        self._sock.sendall(data)

    def recv_into(self, buf: Any, *args: Any) -> int:
        n = self._sock.recv_into(buf, *args)
        self._tally["bytes"] += n
        return n

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


@contextmanager
def _counted_sockets(tally: Counter[str]) -> Iterator[None]:
    """Sockets the client connects while inside are counted in ``tally`` (``socket.create_connection``,
    which ``segmentstore.client.connection`` calls, wrapped meanwhile)."""
    real: Callable[..., socket.socket] = socket.create_connection

    def create(*a: Any, **kw: Any) -> Any:
        return _Counted(real(*a, **kw), tally)

    socket.create_connection = create  # type: ignore[assignment]
    try:
        yield
    finally:
        socket.create_connection = real


def _count_calls(client: SegmentStoreClient, tally: Counter[str]) -> None:
    """Count every call of a wire command made on ``client`` in ``tally['calls']`` (``append_async``,
    client-side, is not one: the ``append`` it makes is)."""
    for name, _ in wire_methods():
        method = getattr(client, name)

        def counted(*a: Any, _m: Callable[..., Any] = method, **kw: Any) -> Any:
            tally["calls"] += 1
            return _m(*a, **kw)

        setattr(client, name, counted)


def _poll(reader: EventReader) -> int:
    """``read_batch`` until an empty batch; the events delivered."""
    n = 0
    while True:
        b = reader.read_batch(65_536)
        n += len(b)
        if not len(b) and b.watermark is None and b.checkpoint_name is None:
            return n


def _measure(batched: bool, polls: int, per_segment: int) -> tuple[float, float, float, int]:
    """``(calls per poll, bytes per poll, wall s of the polls, events)`` of one reader's ``polls``."""
    clock = ManualClock(1_000_000)
    tally: Counter[str] = Counter()
    with SegmentStore(clock=clock) as store, SegmentStoreServer(store) as srv:
        local = EmbeddedClient(store)
        segs = [s.name for s in local.create_stream(STREAM, SEGMENTS).active_segments]
        frames = [encode_event(f"k{i}", b"p" * 64, None) for i in range(per_segment)]
        with _counted_sockets(tally), RemoteClient(("127.0.0.1", srv.port), timeout_s=30) as c:
            cfg = ReaderGroupConfig(
                (STREAM,), time_domain=TimeDomain.INGESTION_TIME, position_report_interval_ms=_POLL_MS
            )
            reader = ReaderGroup("g", cfg, c, clock).create_reader("r")
            reader.batched_reads = batched
            _poll(reader)  # joined, holds every segment, caught up
            _count_calls(c, tally)
            tally.clear()
            events = 0
            wall = 0.0
            for _ in range(polls):
                clock.advance(_POLL_MS)
                if per_segment:
                    for s in segs:
                        local.append_batch(s, frames)
                t0 = monotonic_s()
                events += _poll(reader)
                wall += monotonic_s() - t0
            reader.close()
    if events != polls * per_segment * SEGMENTS:
        raise BenchmarkError(f"delivered {events} events, wrote {polls * per_segment * SEGMENTS}")
    return tally["calls"] / polls, tally["bytes"] / polls, wall, events


def run(size: Size = "full") -> list[Row]:
    """Idle and busy remote reader of 64 segments, before and after; rows of name/value/unit/ratio."""
    polls = sized(size, 5, 50, 200)
    per_segment = 100
    rows: list[Row] = []
    idle = {b: _measure(b, polls, 0) for b in (False, True)}
    busy = {b: _measure(b, polls, per_segment) for b in (False, True)}
    for what, m in (("idle", idle), ("busy", busy)):
        (bc, bb, _, _), (ac, ab, _, _) = m[False], m[True]
        rows.append(
            row(
                f"remote reader, {SEGMENTS} segments, {what}: store calls per poll (after)",
                ac,
                "calls",
                "before / after",
                bc / ac,
            )
        )
        rows.append(row(f"remote reader, {SEGMENTS} segments, {what}: bytes per poll (after; before "
                        f"{bb:,.0f})", ab, "bytes", "before / after", bb / ab))  # fmt: skip
    (_, _, bw, be), (_, _, aw, ae) = busy[False], busy[True]
    rows.append(row(f"remote reader, {SEGMENTS} segments, busy ({per_segment} events per segment per poll): "
                    f"events/s (after; before {be / bw:,.0f})", ae / aw, "events/s", "after / before",
                    (ae / aw) / (be / bw)))  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m bench.perf.bench_remote_reader [--quick | --tiny]`` and print the table."""
    module_main(run, argv, __doc__, "fewer polls")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
