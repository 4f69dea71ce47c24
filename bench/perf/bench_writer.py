"""The ``write_event`` loop a user writes, measured side by side in one run (issue 17).

A loop of ``EventWriter.write_event(key, 32-byte payload, t)`` over 100 keys, then
``flush()``, against ``ingestwm serve`` in another process over loopback:

- ``remote sync``: the writer before issue 17 (``WriterConfig(sync=True,
  max_batch_events=1)``: every ``write_event`` one round trip);
- ``remote async``: the default writer (one append in flight per segment, the events
  written meanwhile aggregate into the next block), on a stream of 1 and of 4 segments;
- ``embedded async`` / ``embedded sync``: the same loops on an in-process store;
- ``append_many ceiling``: the same frames, framed beforehand, appended by
  ``RemoteClient.append_many`` with a writer id and event numbers (the server's rate);
- ``durable ...`` (issue #35): a served *durable* store as users run it (``ingestwm serve
  --data-dir D --sync interval``), 100-byte payloads over 1,000 keys on 4 segments: the
  default ``EventWriter``'s loop and ``flush()``, a ``Transaction``'s loop and ``flush()``
  (committed after the clock stops), and ``append_many`` of the same frames -- each
  segment's frames in one call -- into the stream's segments and into a transaction's.
  The timed runs alternate, ``_ROUNDS`` of each; a row is their median, and the ratios
  ``writer / append_many`` and ``transaction / append_many`` come from the same run.

Every variant first writes a smaller run whose events are read back and checked (each
event once, per-key order) before its timed run; every timed run is checked too.
``ratio``: events/s over ``remote sync``'s (the ceiling: over ``remote async``'s; a durable
row: over its ``append_many`` row's).
Run ``python -m bench.perf.bench_writer [--quick | --tiny]``; ``run(size)`` returns the rows.
"""

from __future__ import annotations

import statistics
import tempfile
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from readergroup.format.events import decode_frames, encode_event
from readergroup.format.routing import RoutingTable, key_hash
from readergroup.writing.transaction import TransactionalEventWriter
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


def _checked(c: SegmentStoreClient, stream: str, n: int, keys: int = _KEYS) -> None:
    """Each of the ``n`` events once (event ``i``: key ``key{i % keys}``, time ``i``), per-key order."""
    got = _read_back(c, stream)
    for key, times in got.items():
        want = list(range(int(key[3:]), n, keys))
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


# ---------------------------------------------------------------------- durable store (issue #35)
DURABLE_PAYLOAD_BYTES = 100
DURABLE_KEYS = 1000
DURABLE_SEGMENTS = 4
_ROUNDS = 3
_KEY_NAMES = [f"key{i}" for i in range(DURABLE_KEYS)]


def _durable_writer(c: RemoteClient, n: int) -> tuple[str, float]:
    """The default writer's loop and ``flush()`` on a new stream; the stream and the seconds."""
    stream = f"bench/d{next(_streams)}"
    c.create_stream(stream, DURABLE_SEGMENTS)
    payload, keys = b"p" * DURABLE_PAYLOAD_BYTES, _KEY_NAMES
    w = EventWriter(c, stream)
    t0 = monotonic_s()
    for i in range(n):
        w.write_event(keys[i % DURABLE_KEYS], payload, i)
    w.flush()
    elapsed = monotonic_s() - t0
    w.close()
    return stream, elapsed


def _durable_transaction(c: RemoteClient, n: int) -> tuple[str, float]:
    """A transaction's loop and ``flush()`` (the writes), then its commit, untimed."""
    stream = f"bench/d{next(_streams)}"
    c.create_stream(stream, DURABLE_SEGMENTS)
    payload, keys = b"p" * DURABLE_PAYLOAD_BYTES, _KEY_NAMES
    txn = TransactionalEventWriter(c, stream).begin_txn()
    t0 = monotonic_s()
    for i in range(n):
        txn.write_event(keys[i % DURABLE_KEYS], payload, i)
    txn.flush()
    elapsed = monotonic_s() - t0
    txn.commit()
    return stream, elapsed


def _routed_frames(c: RemoteClient, stream: str, n: int) -> dict[str, list[bytes]]:
    """The frames the loops write, by the segment their key routes to (framed here, untimed)."""
    table = RoutingTable(c.get_stream(stream).active_segments)
    payload = b"p" * DURABLE_PAYLOAD_BYTES
    seg_of = {k: table.segment_for_hash(key_hash(k)).name for k in _KEY_NAMES}
    out: dict[str, list[bytes]] = defaultdict(list)
    for i in range(n):
        k = _KEY_NAMES[i % DURABLE_KEYS]
        out[seg_of[k]].append(encode_event(k, payload, i))
    return out


def _durable_append_many(c: RemoteClient, n: int, into_transaction: bool) -> tuple[str, float]:
    """The same frames by ``append_many``, each segment's in one call, into the stream's segments
    or a transaction's (committed after the clock stops); the stream and the seconds."""
    stream = f"bench/d{next(_streams)}"
    c.create_stream(stream, DURABLE_SEGMENTS)
    frames = _routed_frames(c, stream, n)
    target = {name: name for name in frames}
    if into_transaction:
        info = c.begin_transaction(stream)
        target = {t.parent.name: t.name for t in info.segments}
    t0 = monotonic_s()
    for name, fs in frames.items():
        c.append_many(target[name], fs, writer_id=1, first_event_number=1)
    elapsed = monotonic_s() - t0
    if into_transaction:
        c.commit_transaction(stream, list(target.values()))
    return stream, elapsed


def _durable(c: RemoteClient, n: int) -> dict[str, float]:
    """Events/s of each durable variant: a checked run of n/10 each, then alternating timed runs."""
    variants: dict[str, Callable[[int], tuple[str, float]]] = {
        "writer": lambda k: _durable_writer(c, k),
        "append_many": lambda k: _durable_append_many(c, k, False),
        "transaction": lambda k: _durable_transaction(c, k),
        "append_many into a transaction": lambda k: _durable_append_many(c, k, True),
    }
    small = max(DURABLE_KEYS, n // 10)
    for fn in variants.values():
        stream, _ = fn(small)
        _checked(c, stream, small, DURABLE_KEYS)
    rates: dict[str, list[float]] = defaultdict(list)
    for _ in range(_ROUNDS):
        for name, fn in variants.items():
            stream, elapsed = fn(n)
            _checked(c, stream, n, DURABLE_KEYS)
            rates[name].append(n / elapsed)
    return {name: statistics.median(r) for name, r in rates.items()}


def run(size: Size = "full") -> list[Row]:
    """Start ``ingestwm serve`` (in memory, then durable), measure every variant, stop it; the rows."""
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
    with tempfile.TemporaryDirectory(prefix="bench_writer") as d:
        server, port = serve_in_process(Path(d), "interval")
        try:
            with RemoteClient(("127.0.0.1", port), timeout_s=120) as c:
                durable = _durable(c, n)
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
    dw, dm = durable["writer"], durable["append_many"]
    dt, dtm = durable["transaction"], durable["append_many into a transaction"]
    many = "durable append_many"
    txn_many = "durable append_many into a transaction"
    return [
        row("remote sync (max_batch_events=1)", sync, "events/s", vs, 1.0),
        row("remote async, 1 segment", remote, "events/s", vs, remote / sync),
        row("remote async, 4 segments", remote4, "events/s", vs, remote4 / sync),
        row("embedded sync (max_batch_events=1)", embedded_sync, "events/s", vs, embedded_sync / sync),
        row("embedded async", embedded, "events/s", vs, embedded / sync),
        row("append_many ceiling", ceiling, "events/s", vs, ceiling / sync),
        row("remote async / ceiling", remote / ceiling, "ratio", "append_many ceiling", remote / ceiling),
        row(many, dm, "events/s", many, 1.0),
        row("durable EventWriter, 4 segments", dw, "events/s", many, dw / dm),
        row(txn_many, dtm, "events/s", txn_many, 1.0),
        row("durable Transaction, 4 segments", dt, "events/s", txn_many, dt / dtm),
        row("durable writer / append_many", dw / dm, "ratio", many, dw / dm),
        row("durable transaction / append_many", dt / dtm, "ratio", txn_many, dt / dtm),
    ]


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m bench.perf.bench_writer [--quick | --tiny]`` and print the table."""
    module_main(run, argv, __doc__, "fewer events")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
