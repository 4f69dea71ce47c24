"""The ``write_event`` loop a user writes, measured side by side in one run (issue 17).

A loop of ``EventWriter.write_event(key, 32-byte payload, t)`` over 100 keys, then
``flush()``, against ``ingestwm serve`` in another process over loopback:

- ``remote sync``: the writer before issue 17 (``WriterConfig(sync=True,
  max_batch_events=1)``: every ``write_event`` one round trip);
- ``remote async``: the default writer (one append in flight per segment, the events
  written meanwhile aggregate into the next block), on a stream of 1 and of 4 segments;
- ``embedded async`` / ``embedded sync``: the same loops on an in-process store;
- ``append_many ceiling``: the same frames, framed beforehand, appended by
  ``RemoteClient.append_many`` with a writer id and event numbers (the server's rate).

Every variant first writes a smaller run whose events are read back and checked (each
event once, per-key order) before its timed run; the timed run's event count is checked
too. ``ratio``: events/s over ``remote sync``'s (the ceiling: over ``remote async``'s).
Run ``python -m bench.perf.bench_writer [--quick | --tiny]``; ``run(size)`` returns the rows.
"""

from __future__ import annotations

from collections import defaultdict

from readergroup.format.events import decode_frames, encode_event
from readergroup.writing.writer import EventWriter, WriterConfig
from segmentstore import SegmentStore, WallClock
from segmentstore.client import EmbeddedClient, RemoteClient, SegmentStoreClient
from segmentstore.clock import monotonic_s

from .serving import serve_in_process
from .suite import Row, Size, module_main, row, sized

__all__ = ["run", "main", "PAYLOAD_BYTES"]

PAYLOAD_BYTES = 32
_KEYS = 100
_SYNC = WriterConfig(sync=True, max_batch_events=1)
_streams = iter(range(1_000_000))


def _loop(c: SegmentStoreClient, config: WriterConfig | None, n: int, segments: int) -> tuple[str, float]:
    """Create a stream, write ``n`` events in the user's loop, flush; returns the stream and the seconds."""
    stream = f"bench/w{next(_streams)}"
    c.create_stream(stream, segments)
    payload = b"p" * PAYLOAD_BYTES
    w = EventWriter(c, stream, config=config)
    t0 = monotonic_s()
    for i in range(n):
        w.write_event(f"key{i % _KEYS}", payload, i)
    w.flush()
    elapsed = monotonic_s() - t0
    w.close()
    return stream, elapsed


def _read_back(c: SegmentStoreClient, stream: str) -> dict[str, list[int]]:
    """Event times per key over every segment of the stream, in order."""
    per_key: dict[str, list[int]] = defaultdict(list)
    for name, _ in c.get_head_cut(stream).positions:
        length = c.get_info(name).length
        off = 0
        while off < length:
            data = c.read(name, off, min(length - off, 8 << 20)).data
            frames, used = decode_frames(data)
            for f in frames:
                per_key[f.routing_key].append(f.event_time or 0)
            off += used
    return per_key


def _checked(c: SegmentStoreClient, stream: str, n: int) -> None:
    """Each of the ``n`` events once, per-key order; raises otherwise."""
    got = _read_back(c, stream)
    for key, times in got.items():
        want = list(range(int(key[3:]), n, _KEYS))
        if times != want:
            raise AssertionError(f"stream {stream}: key {key} read {times[:5]}..., expected {want[:5]}...")
    if sum(map(len, got.values())) != n:
        raise AssertionError(f"stream {stream}: {sum(map(len, got.values()))} events read back, wrote {n}")


def _rate(c: SegmentStoreClient, config: WriterConfig | None, n: int, segments: int) -> float:
    """Events/s of the write_event loop; a checked run of n/10 events first, the timed run checked after."""
    stream, _ = _loop(c, config, max(200, n // 10), segments)
    _checked(c, stream, max(200, n // 10))
    stream, elapsed = _loop(c, config, n, segments)
    _checked(c, stream, n)
    return n / elapsed


def _append_many_rate(c: RemoteClient, n: int) -> float:
    """The same frames, framed beforehand, through ``append_many``: the server's ceiling."""
    payload = b"p" * PAYLOAD_BYTES
    frames = [encode_event(f"key{i % _KEYS}", payload, i) for i in range(n)]
    stream = f"bench/w{next(_streams)}"
    seg = c.create_stream(stream, 1).active_segments[0].name
    c.append_many(seg, frames[: n // 10], writer_id=1, first_event_number=1)
    _checked(c, stream, n // 10)
    seg = c.create_stream(stream + "x", 1).active_segments[0].name
    t0 = monotonic_s()
    c.append_many(seg, frames, writer_id=1, first_event_number=1)
    elapsed = monotonic_s() - t0
    _checked(c, stream + "x", n)
    return n / elapsed


def run(size: Size = "full") -> list[Row]:
    """Start ``ingestwm serve``, measure every variant, stop it; return the rows."""
    n, n_sync = sized(size, tiny=(2_000, 200), quick=(50_000, 2_000), full=(200_000, 6_000))
    server, port = serve_in_process()
    try:
        with RemoteClient(("127.0.0.1", port), timeout_s=120) as c:
            sync = _rate(c, _SYNC, n_sync, 1)
            remote = _rate(c, None, n, 1)
            remote4 = _rate(c, None, n, 4)
            ceiling = _append_many_rate(c, n)
    finally:
        server.terminate()
        server.wait(30)
    store = SegmentStore(clock=WallClock())
    try:
        e = EmbeddedClient(store)
        embedded = _rate(e, None, n, 1)
        embedded_sync = _rate(e, _SYNC, n, 1)
    finally:
        store.close()
    vs = "remote sync"
    return [
        row("remote sync (max_batch_events=1)", sync, "events/s", vs, 1.0),
        row("remote async, 1 segment", remote, "events/s", vs, remote / sync),
        row("remote async, 4 segments", remote4, "events/s", vs, remote4 / sync),
        row("embedded sync (max_batch_events=1)", embedded_sync, "events/s", vs, embedded_sync / sync),
        row("embedded async", embedded, "events/s", vs, embedded / sync),
        row("append_many ceiling", ceiling, "events/s", vs, ceiling / sync),
        row("remote async / ceiling", remote / ceiling, "ratio", "append_many ceiling", remote / ceiling),
    ]


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m bench.perf.bench_writer [--quick | --tiny]`` and print the table."""
    module_main(run, argv, __doc__, "fewer events")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
