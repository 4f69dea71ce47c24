"""The asynchronous EventWriter (issue 17): futures, aggregation while an append is in flight,
back-pressure, errors, exactly once across lost connections, server restarts and scaling,
producer-watermark markers, transactions, concurrent writers, and a property test on ``_check()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from faults import CuttingProxy
from hypothesis import given, settings
from hypothesis import strategies as st

from readergroup import (
    EventAck,
    EventWriter,
    NoSuccessorsError,
    TransactionalEventWriter,
    TransactionClosedError,
    TransactionError,
    WriteFuture,
    WriterBufferFullError,
    WriterConfig,
    WriterError,
    decode_frames,
    key_hash,
)
from readergroup.config import ReaderGroupConfig, TimeDomain
from readergroup.reading.group import ReaderGroup
from readergroup.reading.reader import ReadKind
from segmentstore import (
    AppendResult,
    ConnectionLostError,
    SegmentNotFoundError,
    SegmentStore,
    SegmentStoreError,
    StoreConfig,
    TickingClock,
)
from segmentstore.client import EmbeddedClient, RemoteClient, SegmentStoreClient
from segmentstore.net.server import SegmentStoreServer

S = "async/w"
START_MS = 1_000_000


# ---------------------------------------------------------------------- helpers
class GatedClient(EmbeddedClient):
    """``append_async`` waits until the test releases it: an append is in flight as long as the test wants."""

    def __init__(self, store: SegmentStore) -> None:
        super().__init__(store)
        self.gate: deque[tuple[str, bytes, Any, Any, Future[AppendResult]]] = deque()
        self.lock = threading.Lock()

    def append_async(
        self,
        name: str,
        data: bytes,
        expected_offset: int | None = None,
        *,
        writer_id: int | None = None,
        event_number: int | None = None,
    ) -> Future[AppendResult]:
        f: Future[AppendResult] = Future()
        with self.lock:
            self.gate.append((name, bytes(data), writer_id, event_number, f))
        return f

    def waiting(self) -> list[tuple[str, int]]:
        """The appends in flight: (segment, events in the block)."""
        with self.lock:
            return [(n, len(decode_frames(d)[0])) for n, d, *_ in self.gate]

    def wait_for(self, n: int, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.gate) < n:
            assert time.monotonic() < deadline, f"{len(self.gate)} appends in flight, expected {n}"
            time.sleep(0.002)

    @contextlib.contextmanager
    def releasing(self) -> Iterator[None]:
        """Release every append as it comes, from another thread, until the block ends."""
        stop = threading.Event()

        def run() -> None:
            while not stop.is_set():
                if not self.release():
                    time.sleep(0.001)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        try:
            yield
        finally:
            stop.set()
            t.join(10)

    def release(self, n: int | None = None, how: str = "ok") -> int:
        """Complete the ``n`` oldest appends: ``ok``, ``lost`` (stored, ack lost), ``fail`` (not stored)."""
        done = 0
        while n is None or done < n:
            with self.lock:
                if not self.gate:
                    break
                name, data, w, e, f = self.gate.popleft()
            done += 1
            if how == "fail":
                f.set_exception(ConnectionLostError("connection cut before the append"))
                continue
            try:
                r = self.append(name, data, writer_id=w, event_number=e)
            except SegmentStoreError as ex:
                f.set_exception(ex)
                continue
            if how == "lost":
                f.set_exception(ConnectionLostError("connection cut after the append"))
            else:
                f.set_result(r)
        return done


def all_segments(client: SegmentStoreClient, stream: str) -> list[str]:
    """Every segment the stream ever had, in creation order."""
    seen: dict[str, Any] = {}
    todo = [n for n, _ in client.get_head_cut(stream).positions]
    while todo:
        n = todo.pop()
        if n not in seen:
            seen[n] = client.get_segment(n)
            todo.extend(s.segment.name for s in client.get_successors(n))
    return [s.name for s in sorted(seen.values(), key=lambda s: s.number)]


def read_stream(client: SegmentStoreClient, stream: str) -> dict[str, list[bytes]]:
    """Payloads per routing key, predecessors first (so per-key order is the stream's order)."""
    per_key: dict[str, list[bytes]] = defaultdict(list)
    for name in all_segments(client, stream):
        info = client.get_info(name)
        data = client.read(name, info.start_offset, info.length + 1).data if info.length else b""
        frames, used = decode_frames(data)
        assert used == len(data), f"{name} ends in a partial frame"
        seg = client.get_segment(name)
        for f in frames:
            if f.is_event:
                assert seg.key_low <= key_hash(f.routing_key) < seg.key_high, f"{f.routing_key} in {name}"
                per_key[f.routing_key].append(f.payload)
    return dict(per_key)


def check_exactly_once(
    got: dict[str, list[bytes]],
    written: dict[str, list[bytes]],
    acked: set[bytes],
    maybe: frozenset[bytes] | set[bytes] = frozenset(),
) -> None:
    """Every acknowledged event once, events of unknown fate at most once, nothing else; per-key order."""
    for key, payloads in got.items():
        assert len(payloads) == len(set(payloads)), f"{key}: an event twice"
        order = {p: i for i, p in enumerate(written[key])}
        assert [order[p] for p in payloads] == sorted(order[p] for p in payloads), f"{key}: out of order"
        assert set(payloads) <= acked | maybe, f"{key}: an event that failed for sure is stored"
    stored = {p for ps in got.values() for p in ps}
    assert acked <= stored, f"acknowledged but missing: {sorted(acked - stored)[:5]}"


def _split(c: SegmentStoreClient, i: int) -> None:
    segs = sorted(c.get_stream(S).active_segments, key=lambda s: s.key_low)
    s = segs[i % len(segs)]
    mid = (s.key_low + s.key_high) / 2
    c.scale_stream(S, [s.name], [(s.key_low, mid), (mid, s.key_high)])


def _merge(c: SegmentStoreClient, i: int) -> None:
    segs = sorted(c.get_stream(S).active_segments, key=lambda s: s.key_low)
    if len(segs) > 1:
        a, b = segs[i % (len(segs) - 1)], segs[i % (len(segs) - 1) + 1]
        c.scale_stream(S, [a.name, b.name], [(a.key_low, b.key_high)])


@contextlib.contextmanager
def _served_client(store: SegmentStore) -> Iterator[RemoteClient]:
    with SegmentStoreServer(store) as srv, RemoteClient(("127.0.0.1", srv.port), timeout_s=20) as c:
        yield c


def _served(store: SegmentStore) -> Iterator[RemoteClient]:
    with SegmentStoreServer(store) as srv, RemoteClient(("127.0.0.1", srv.port), timeout_s=20) as c:
        yield c


# ---------------------------------------------------------------------- futures and aggregation
def test_futures_complete_with_the_events_acknowledgements(client: SegmentStoreClient) -> None:
    client.create_stream(S, 3)
    w = EventWriter(client, S)
    futs = [w.write_event(f"k{i % 13}", b"%d" % i, event_time=i) for i in range(500)]
    assert all(isinstance(f, WriteFuture) for f in futs)
    w.flush()
    assert all(f.done() for f in futs) and w.pending_events == 0 and w.bytes_in_flight == 0
    for i, f in enumerate(futs):
        ack = f.result(0)
        assert isinstance(ack, EventAck) and ack.offset is not None
        frame = decode_frames(client.read(ack.segment, ack.offset, 64).data)[0][0]
        assert (frame.routing_key, frame.payload, frame.event_time) == (f"k{i % 13}", b"%d" % i, i)
        assert ack.ingestion_time == client.ingestion_time_at(ack.segment, ack.offset)
    w.close()
    assert read_stream(client, S) == {f"k{k}": [b"%d" % i for i in range(k, 500, 13)] for k in range(13)}


def test_events_aggregate_into_one_append_while_one_is_in_flight(store: SegmentStore) -> None:
    c = GatedClient(store)
    seg = c.create_stream(S, 1).active_segments[0].name
    w = EventWriter(c, S)
    first = w.write_event("k", b"0")
    assert c.waiting() == [(seg, 1)] and not first.done()
    rest = [w.write_event("k", b"%d" % i) for i in range(1, 100)]
    assert c.waiting() == [(seg, 1)] and w.pending_events == 100  # one append in flight per segment
    c.release(1)
    assert first.result(0) == EventAck(seg, 0, store.ingestion_time_at(seg, 0))
    assert c.waiting() == [(seg, 99)]  # everything written meanwhile goes in the next block
    assert not any(f.done() for f in rest)
    c.release()
    acks = [f.result(0) for f in rest]
    assert [a.offset for a in acks] == sorted({a.offset for a in acks})
    assert len({a.ingestion_time for a in acks}) == 1  # one append: one ingestion time
    capped = EventWriter(c, S, config=WriterConfig(max_batch_events=10))
    for i in range(35):
        capped.write_event("k", b"c%d" % i)
    sizes = []
    while c.gate:
        sizes += [n for _, n in c.waiting()]
        c.release(1)
    assert sizes == [1, 10, 10, 10, 4]
    w.close()
    capped.close()


def test_callbacks_and_await(client: SegmentStoreClient) -> None:
    client.create_stream(S, 2)
    w = EventWriter(client, S)
    seen: list[tuple[WriteFuture, EventAck]] = []
    done = threading.Event()

    def callback(f: WriteFuture) -> None:
        seen.append((f, f.result(0)))
        if len(seen) == 20:
            done.set()

    futs = [w.write_event(f"k{i}", b"x") for i in range(20)]
    for f in futs:
        f.add_done_callback(callback)
    assert done.wait(10)
    assert {id(f) for f, _ in seen} == {id(f) for f in futs}
    late: list[WriteFuture] = []
    futs[0].add_done_callback(late.append)  # settled already: called at once
    assert late == [futs[0]]

    async def main() -> list[EventAck]:
        return await asyncio.gather(*(w.write_event("a", b"%d" % i) for i in range(5)))

    acks = asyncio.run(main())
    assert [a.offset for a in acks] == sorted(a.offset for a in acks)  # type: ignore[type-var]
    w.close()


def test_sync_mode_is_one_round_trip_per_event(store: SegmentStore) -> None:
    c = GatedClient(store)
    c.create_stream(S, 1)
    w = EventWriter(c, S, config=WriterConfig(sync=True, max_batch_events=1))
    t = threading.Thread(target=lambda: [w.write_event("k", b"%d" % i) for i in range(3)])
    t.start()
    for _ in range(3):
        c.wait_for(1)
        assert len(c.gate) == 1  # the next write waits for this acknowledgement
        c.release(1)
    t.join(10)
    assert read_stream(c, S) == {"k": [b"0", b"1", b"2"]}


# ---------------------------------------------------------------------- errors reach the futures and flush
def test_a_sealed_stream_fails_the_futures_and_flush(client: SegmentStoreClient) -> None:
    client.create_stream(S, 2)
    w = EventWriter(client, S)
    ok = [w.write_event(f"k{i}", b"before") for i in range(10)]
    w.flush()
    client.seal_stream(S)
    failed = [w.write_event(f"k{i}", b"after") for i in range(10)]
    for f in failed:
        with pytest.raises(NoSuccessorsError, match="sealed without successors"):
            f.result(10)
    with pytest.raises(NoSuccessorsError):
        w.flush()
    w.flush()  # reported once
    assert all(f.exception(0) is None for f in ok)
    assert read_stream(client, S) == {f"k{i}": [b"before"] for i in range(10)}
    w.close()


def test_a_deleted_segment_fails_the_events_with_the_stores_error(store: SegmentStore) -> None:
    c = GatedClient(store)
    seg = c.create_stream(S, 1).active_segments[0].name
    w = EventWriter(c, S)
    first = w.write_event("k", b"0")
    queued = [w.write_event("k", b"%d" % i) for i in range(1, 5)]
    store.delete(seg)
    c.release()
    for f in [first, *queued]:  # the queued ones behind it too
        assert isinstance(f.exception(5), SegmentNotFoundError)
    with pytest.raises(SegmentNotFoundError):
        w.close()


def test_a_server_gone_for_good_fails_the_futures_and_flush(store: SegmentStore) -> None:
    srv = SegmentStoreServer(store)
    c = RemoteClient(("127.0.0.1", srv.start()), timeout_s=0.5)
    c.create_stream(S, 2)
    w = EventWriter(c, S, config=WriterConfig(retry_attempts=1))
    w.write_event("k", b"stored").result(10)
    srv.stop()
    t0 = time.monotonic()
    futs = [w.write_event(f"k{i}", b"lost") for i in range(20)]  # a new segment too: its number is unknown
    for f in futs:
        assert isinstance(f.exception(30), WriterError | ConnectionLostError), f.exception(0)
    assert time.monotonic() - t0 < 20
    with pytest.raises((WriterError, ConnectionLostError)):
        w.close()
    c.close()
    assert read_stream(EmbeddedClient(store), S) == {"k": [b"stored"]}


# ---------------------------------------------------------------------- back-pressure
@pytest.mark.parametrize("kind", ["embedded", "remote"])
def test_an_event_the_store_refuses_fails_alone(kind: str) -> None:
    """A definite refusal (an event larger than the store's max_append_bytes) is not stored and says
    so; the events written after it to the same segment are not failed with its error."""
    store = SegmentStore(clock=TickingClock(START_MS), config=StoreConfig(max_append_bytes=4096))
    with contextlib.ExitStack() as stack:
        c: SegmentStoreClient = EmbeddedClient(store)
        if kind == "remote":
            c = stack.enter_context(_served_client(store))
        c.create_stream(S, 1)
        w = EventWriter(c, S)
        futs = [w.write_event("k", b"a"), w.write_event("k", b"x" * 5000)]
        futs += [w.write_event("k", b"%d" % i) for i in range(20)]
        with pytest.raises(SegmentStoreError, match="max_append_bytes"):
            futs[1].result(10)
        with pytest.raises(SegmentStoreError, match="max_append_bytes"):
            w.flush()  # reported once
        assert all(f.exception(10) is None for f in futs[:1] + futs[2:])
        w.close()
        fresh = EventWriter(c, S)  # has not learnt the store's limit
        many = [fresh.write_event(f"m{i % 3}", b"%03d" % i + b"." * 97) for i in range(300)]  # 30 KB
        fresh.close()  # blocks aggregated beyond the store's limit go again in appends it takes
        assert all(f.exception(10) is None for f in many)
        fresh._check()
        got = read_stream(c, S)
        assert got.pop("k") == [b"a"] + [b"%d" % i for i in range(20)]
        assert got == {f"m{j}": [b"%03d" % i + b"." * 97 for i in range(j, 300, 3)] for j in range(3)}
        w._check()
    store._check()
    store.close()


def test_back_pressure_raises_when_configured(store: SegmentStore) -> None:
    c = GatedClient(store)
    c.create_stream(S, 1)
    w = EventWriter(c, S, config=WriterConfig(max_bytes_in_flight=200, max_block_ms=0))
    futs = [w.write_event("k", b"x" * 20) for _ in range(5)]  # 5 * 36 bytes
    with pytest.raises(WriterBufferFullError, match="max_bytes_in_flight"):
        w.write_event("k", b"x" * 20)
    assert w.pending_events == 5 and w.bytes_in_flight == 180
    c.release()
    c.release()
    assert all(f.done() for f in futs)
    w.write_event("k", b"room again")
    c.release()
    c.release()
    w.close()
    assert len(read_stream(c, S)["k"]) == 6


def test_back_pressure_blocks_until_room_or_max_block_ms(store: SegmentStore) -> None:
    c = GatedClient(store)
    c.create_stream(S, 1)
    w = EventWriter(c, S, config=WriterConfig(max_bytes_in_flight=200, max_block_ms=10_000))
    for _ in range(5):
        w.write_event("k", b"x" * 20)
    threading.Timer(0.3, c.release).start()
    t0 = time.monotonic()
    w.write_event("k", b"x" * 20)  # waits for the acknowledgement of the first block
    assert time.monotonic() - t0 >= 0.25
    short = EventWriter(c, S, config=WriterConfig(max_bytes_in_flight=100, max_block_ms=100))
    short.write_event("k", b"y" * 60)
    t0 = time.monotonic()
    with pytest.raises(WriterBufferFullError, match="100 ms"):
        short.write_event("k", b"y" * 60)
    assert time.monotonic() - t0 >= 0.09
    while c.release():
        pass
    w.close()
    short.close()


# ---------------------------------------------------------------------- exactly once across failures
def _stream_events(
    w: EventWriter,
    keys: int,
    n: int,
    written: dict[str, list[bytes]],
    futs: dict[bytes, WriteFuture],
    between: Callable[[int], None] = lambda i: None,
) -> None:
    for i in range(len(futs), len(futs) + n):
        key = f"k{i % keys}"
        p = b"%s:%d" % (key.encode(), i)
        written[key].append(p)
        futs[p] = w.write_event(key, p, event_time=i)
        between(i)


def _outcomes(futs: dict[bytes, WriteFuture]) -> tuple[set[bytes], set[bytes]]:
    acked = {p for p, f in futs.items() if f.exception(60) is None}
    maybe = {p for p, f in futs.items() if isinstance(f.exception(0), WriterError)}
    return acked, maybe


def test_connections_cut_mid_flight_lose_and_duplicate_nothing() -> None:
    """Over a proxy that cuts every connection again and again, with splits and merges, on a ticking clock."""
    store = SegmentStore(clock=TickingClock(START_MS))
    with SegmentStoreServer(store) as srv:
        proxy = CuttingProxy(srv.port)
        with RemoteClient(("127.0.0.1", proxy.port), timeout_s=20) as c:
            c.create_stream(S, 4)
            w = EventWriter(c, S, config=WriterConfig(max_batch_events=32))  # many appends in flight
            written: dict[str, list[bytes]] = defaultdict(list)
            futs: dict[bytes, WriteFuture] = {}
            rng = random.Random(7)

            def faults(i: int) -> None:
                if rng.random() < 0.001:
                    proxy.cut()
                if i % 2_500 == 1_000:
                    (_split if i % 3 else _merge)(EmbeddedClient(store), i)

            _stream_events(w, 40, 20_000, written, futs, faults)
            proxy.cut()
            w.close()
            acked, maybe = _outcomes(futs)
        assert proxy.cuts >= 10 and acked == set(futs)  # the client resent across every cut
        check_exactly_once(read_stream(EmbeddedClient(store), S), written, acked, maybe)
        proxy.close()
    store._check()
    store.close()


def test_a_server_restarted_on_its_data_dir_and_port_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    def open_store() -> SegmentStore:
        return SegmentStore(clock=TickingClock(START_MS), config=StoreConfig(), data_dir=tmp_path / "data")

    store = open_store()
    srv = SegmentStoreServer(store)
    port = srv.start()
    with RemoteClient(("127.0.0.1", port), timeout_s=30) as c:
        c.create_stream(S, 3)
        w = EventWriter(c, S)
        written: dict[str, list[bytes]] = defaultdict(list)
        futs: dict[bytes, WriteFuture] = {}
        _stream_events(w, 30, 5_000, written, futs)
        srv.stop()  # appends in flight, unacknowledged
        store.close()
        _stream_events(w, 30, 2_000, written, futs)  # written while the server is down
        store = open_store()
        srv = SegmentStoreServer(store, port=port)
        srv.start()
        _stream_events(w, 30, 3_000, written, futs)
        w.close()
        acked, maybe = _outcomes(futs)
        assert acked == set(futs)
        check_exactly_once(read_stream(c, S), written, acked, maybe)
    srv.stop()
    store._check()
    store.close()


@pytest.mark.parametrize("kind", ["embedded", "remote"])
def test_lost_acknowledgements_and_failed_appends_with_scaling_keep_exactly_once(kind: str) -> None:
    """Injected faults on every kind of client: acknowledgements lost, appends refused, splits and merges."""

    class Faulty(EmbeddedClient):
        def __init__(self, store: SegmentStore, rng: random.Random) -> None:
            super().__init__(store)
            self.rng = rng
            self.faults = 0

        def append(self, name: str, data: bytes, *a: Any, **kw: Any) -> AppendResult:
            roll = self.rng.random()
            if roll < 0.05 and not name.startswith("_system"):
                self.faults += 1
                raise ConnectionLostError("refused before the append")
            r = super().append(name, data, *a, **kw)
            if roll > 0.95 and not name.startswith("_system"):
                self.faults += 1
                raise ConnectionLostError("acknowledgement lost after the append")
            return r

    store = SegmentStore(clock=TickingClock(START_MS))
    faulty = Faulty(store, random.Random(3))
    with contextlib.ExitStack() as stack:
        if kind == "embedded":
            c: SegmentStoreClient = faulty
        else:
            srv = stack.enter_context(SegmentStoreServer(store))
            srv.client = faulty
            c = stack.enter_context(RemoteClient(("127.0.0.1", srv.port), timeout_s=20))
        c.create_stream(S, 2)
        w = EventWriter(c, S, config=WriterConfig(retry_attempts=50, max_batch_events=8))
        written: dict[str, list[bytes]] = defaultdict(list)
        futs: dict[bytes, WriteFuture] = {}

        def scale(i: int) -> None:
            if i % 700 == 350:
                (_split if (i // 700) % 3 != 2 else _merge)(EmbeddedClient(store), i)

        _stream_events(w, 25, 7_000, written, futs, scale)
        w.close()
        w._check()
        acked, maybe = _outcomes(futs)
        assert acked == set(futs) and faulty.faults >= 50
        check_exactly_once(read_stream(EmbeddedClient(store), S), written, acked, maybe)
    store._check()
    store.close()


def test_scaling_while_appends_are_in_flight_keeps_per_key_order(
    ticking: tuple[TickingClock, SegmentStoreClient],
) -> None:
    _, c = ticking
    c.create_stream(S, 2)
    writers = [EventWriter(c, S) for _ in range(2)]
    written: dict[str, list[bytes]] = defaultdict(list)
    futs: dict[bytes, WriteFuture] = {}
    for step in range(12):
        for j, w in enumerate(writers):  # writer j writes its own keys
            for i in range(200):
                key = f"w{j}k{i % 17}"
                p = b"%s:%d:%d" % (key.encode(), step, i)
                written[key].append(p)
                futs[p] = w.write_event(key, p)
        (_split if step % 3 != 2 else _merge)(c, step)
    for w in writers:
        w.flush()
        w._check()
        assert {s.name for s in w.segments} <= {s.name for s in c.get_stream(S).active_segments} | set(
            all_segments(c, S)
        )
    acked, _ = _outcomes(futs)
    assert acked == set(futs)
    check_exactly_once(read_stream(c, S), written, acked)


def test_an_append_in_flight_at_the_seal_is_asked_about_not_resent(store: SegmentStore) -> None:
    c = GatedClient(store)
    seg = c.create_stream(S, 1).active_segments[0]
    w = EventWriter(c, S)
    stored = w.write_event("k", b"0")
    queued = [w.write_event("k", b"%d" % i) for i in (1, 2)]
    c.release(1, how="lost")  # stored, acknowledgement lost: resent ...
    c.wait_for(1)
    c.scale_stream(S, [seg.name], [(0.0, 0.5), (0.5, 1.0)])
    c.release(1)  # ... into the sealed segment: the store holds it, so it is not moved
    with c.releasing():
        w.flush()
    assert stored.result(0) == EventAck(seg.name, None, None)
    assert all(f.result(0).segment != seg.name for f in queued)
    assert read_stream(c, S) == {"k": [b"0", b"1", b"2"]}
    w._check()


def test_a_reroute_that_cannot_reach_the_store_fails_the_events(store: SegmentStore) -> None:
    class NoController(GatedClient):
        def get_stream(self, stream: str) -> Any:
            if self.down:
                raise ConnectionLostError("the controller is unreachable")
            return super().get_stream(stream)

    c = NoController(store)
    c.down = False  # type: ignore[attr-defined]
    seg = c.create_stream(S, 1).active_segments[0]
    w = EventWriter(c, S)
    futs = [w.write_event("k", b"%d" % i) for i in range(3)]
    c.scale_stream(S, [seg.name], [(0.0, 0.5), (0.5, 1.0)])
    c.down = True  # type: ignore[attr-defined]
    c.release(1)  # the seal: the reroute cannot learn the successors
    for f in futs:
        with pytest.raises(WriterError, match="rerouting after a seal failed"):
            f.result(10)
    c.down = False  # type: ignore[attr-defined]
    w.write_event("k", b"later")  # finds the seal again and reroutes now
    with c.releasing():
        with pytest.raises(WriterError):
            w.flush()  # the failure is reported once
        w.close()
    w._check()
    assert read_stream(c, S) == {"k": [b"later"]}


def test_concurrent_writers_threads_keep_their_order(client: SegmentStoreClient) -> None:
    client.create_stream(S, 3)
    w = EventWriter(client, S)
    written: dict[str, list[bytes]] = defaultdict(list)
    futs: dict[bytes, WriteFuture] = {}
    lock = threading.Lock()

    def run(t: int) -> None:
        for i in range(1500):
            key = f"t{t}k{i % 11}"
            p = b"%s:%d" % (key.encode(), i)
            f = w.write_event(key, p)
            with lock:
                written[key].append(p)
                futs[p] = f

    threads = [threading.Thread(target=run, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.close()
    w._check()
    acked, _ = _outcomes(futs)
    assert len(acked) == 6000
    check_exactly_once(read_stream(client, S), written, acked)


# ---------------------------------------------------------------------- markers and transactions
def test_markers_follow_every_earlier_event_across_scaling(
    ticking: tuple[TickingClock, SegmentStoreClient],
) -> None:
    """Async writes, splits and merges, then note_time: no event written before a marker is after it."""
    clock, c = ticking
    c.create_stream(S, 2)
    w = EventWriter(c, S, writer_id=9)
    w.note_time(100)
    n = 0
    for round_ in range(6):
        for i in range(300):
            w.write_event(f"k{i % 23}", b"%d" % n, event_time=100 * (round_ + 1) + i % 50)
            n += 1
        (_split if round_ % 2 == 0 else _merge)(c, round_)
        w.note_time(100 * (round_ + 2))  # every event so far has a lower event time
    w.mark_idle()
    w.close()
    cfg = ReaderGroupConfig((S,), time_domain=TimeDomain.EVENT_TIME, position_report_interval_ms=0)
    group = ReaderGroup("g", cfg, c, clock)
    reader = group.create_reader("r")
    events = 0
    for _ in range(100_000):
        r = reader.read_next_event(timeout_ms=0)
        if r.kind is ReadKind.EMPTY:
            break
        events += r.is_event
    assert events == n and reader.stats.late_events == 0


def test_transaction_writes_are_asynchronous_and_abort_fails_them(store: SegmentStore) -> None:
    c = GatedClient(store)
    c.create_stream(S, 2)
    tw = TransactionalEventWriter(c, S)
    txn = tw.begin_txn()
    futs = [txn.write_event(f"k{i}", b"t") for i in range(10)]
    assert not any(f.done() for f in futs) and c.gate  # returned at once
    with c.releasing():
        txn.commit()  # flushes first
    assert all(f.exception(0) is None for f in futs)
    assert read_stream(c, S) == {f"k{i}": [b"t"] for i in range(10)}
    dropped = tw.begin_txn()
    lost = [dropped.write_event(f"k{i}", b"u") for i in range(10)]
    dropped.abort()
    for f in lost:
        assert isinstance(f.exception(5), TransactionClosedError)
    c.release()


# ---------------------------------------------------------------------- the property
_op = st.one_of(
    st.tuples(st.just("write"), st.integers(0, 9)),
    st.tuples(st.sampled_from(["ok", "lost", "fail"]), st.integers(1, 3)),
    st.tuples(st.sampled_from(["split", "merge", "flush", "note"]), st.integers(0, 7)),
)


@settings(max_examples=60)  # below the profile's 100: each example runs a writer over a store
@given(st.lists(_op, min_size=1, max_size=60))
def test_random_faults_and_scaling_keep_the_writer_consistent(ops: list[tuple[str, int]]) -> None:
    """Writes, acknowledgements released ok / lost / failed, splits, merges, flushes and markers
    in any order; ``_check()`` after every step; at the end every event exactly once, in key order."""
    store = SegmentStore(clock=TickingClock(START_MS))
    c = GatedClient(store)
    c.create_stream(S, 2)
    w = EventWriter(c, S, writer_id=5, config=WriterConfig(retry_attempts=1_000, max_batch_events=4))
    written: dict[str, list[bytes]] = defaultdict(list)
    futs: dict[bytes, WriteFuture] = {}
    pump = threading.Thread(target=lambda: None)

    def background(fn: Callable[[], object]) -> threading.Thread:
        t = threading.Thread(target=fn, daemon=True)
        t.start()
        return t

    def release_until(t: threading.Thread) -> None:
        while t.is_alive():
            c.release()
            t.join(0.005)

    called: dict[bytes, int] = defaultdict(int)

    def callback(f: WriteFuture, p: bytes) -> None:
        assert f.done() and f is futs[p]
        called[p] += 1

    for n, (op, x) in enumerate(ops):
        if op == "write":
            p = b"k%d:%d" % (x, n)
            written[f"k{x}"].append(p)
            futs[p] = w.write_event(f"k{x}", p)
            if n % 2:
                futs[p].add_done_callback(lambda f, p=p: callback(f, p))  # type: ignore[misc]
        elif op in ("ok", "lost", "fail"):
            c.release(x, how=op)
        elif op == "split":
            _split(c, x)
        elif op == "merge":
            _merge(c, x)
        elif op == "flush":  # waits: acknowledgements come from another thread meanwhile
            pump = background(w.flush)
            release_until(pump)
        else:
            pump = background(lambda x=x: w.note_time(1_000 + x))  # type: ignore[misc]
            release_until(pump)
        time.sleep(0.001)  # the writer's thread resends and reroutes
        w._check()
    closer = background(w.close)
    release_until(closer)
    w._check()
    acked, maybe = _outcomes(futs)
    assert acked == set(futs)
    assert dict(called) == {p: 1 for i, p in enumerate(futs) if int(p.split(b":")[1]) % 2}
    check_exactly_once(read_stream(c, S), written, acked, maybe)
    store._check()
    store.close()


# ---------------------------------------------------------------------- a writer after fork
def _in_child(body: Callable[[], bool]) -> Callable[[], int]:
    """Fork; the child runs ``body``. Returns the wait for its exit status: 0 if ``body`` returned
    True, 1 if False, 2 if it raised, 3 if it hung."""
    pid = os.fork()
    if pid == 0:
        code = 2
        try:
            signal.alarm(20)  # a hung child must not hang the suite
            code = 0 if body() else 1
        finally:
            os._exit(code)

    def wait() -> int:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.01)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return 3

    return wait


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize("flushed", [True, False])
def test_a_writer_used_in_a_forked_child_and_its_parent_loses_nothing(
    store: SegmentStore, flushed: bool
) -> None:
    """Both processes write with the writer made before the fork: each event stored once, none
    acknowledged as a duplicate (one writer id in two processes drops the other's events)."""
    with SegmentStoreServer(store) as srv, RemoteClient(("127.0.0.1", srv.port), timeout_s=20) as c:
        c.create_stream(S, 2)
        w = EventWriter(c, S)
        before = [w.write_event(f"k{i % 5}", b"before:%d" % i) for i in range(50)]
        if flushed:
            w.flush()

        def child() -> bool:
            futs = [w.write_event(f"k{i % 5}", b"child:%d" % i) for i in range(100)]
            w.close()
            acks = [f.result(10) for f in futs]
            return all(a.offset is not None for a in acks)

        wait = _in_child(child)  # the parent writes meanwhile, with the same writer
        futs = [w.write_event(f"k{i % 5}", b"parent:%d" % i) for i in range(100)]
        w.close()
        assert wait() == 0, "the child's writes failed, hung or were taken for duplicates"
        assert all(f.result(10).offset is not None for f in before + futs)
        got = read_stream(c, S)
        stored = sorted(p for ps in got.values() for p in ps)
        counts = ((b"before", 50), (b"child", 100), (b"parent", 100))
        expected = [b"%s:%d" % (who, i) for who, n in counts for i in range(n)]
        assert stored == sorted(expected)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_writer_with_a_given_id_refuses_to_write_in_a_forked_child(store: SegmentStore) -> None:
    """Its id names one writer: two processes writing with it would drop each other's events."""
    c = EmbeddedClient(store)
    c.create_stream(S, 1)
    w = EventWriter(c, S, writer_id=77)
    w.write_event("k", b"parent").result(10)

    def child() -> bool:
        try:
            w.write_event("k", b"child")
        except WriterError as e:
            return "fork" in str(e) and "77" in str(e)
        return False

    assert _in_child(child)() == 0
    w.write_event("k", b"parent again").result(10)
    w.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_transaction_stays_with_the_process_that_began_it(store: SegmentStore) -> None:
    c = EmbeddedClient(store)
    c.create_stream(S, 2)
    txn = TransactionalEventWriter(c, S).begin_txn()
    pending = txn.write_event("k", b"parent")

    def child() -> bool:
        try:
            txn.write_event("k", b"child")
        except TransactionError as e:
            return "forked" in str(e) and isinstance(pending.exception(1), WriterError)
        return False

    assert _in_child(child)() == 0
    txn.commit()
    assert read_stream(c, S) == {"k": [b"parent"]}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_bulk_writes_in_a_forked_child_are_a_new_writer_too(store: SegmentStore) -> None:
    """``write_encoded`` (the Spark sink's path) takes the same fork rule as ``write_event``."""
    import pyarrow as pa

    from readergroup.format.frame_batch import encode_events

    with SegmentStoreServer(store) as srv, RemoteClient(("127.0.0.1", srv.port), timeout_s=20) as c:
        c.create_stream(S, 2)
        w = EventWriter(c, S)
        w.write_event("k0", b"before").result(10)

        def bulk(who: bytes) -> None:
            keys = pa.array([f"k{i % 5}" for i in range(100)])
            w.write_encoded(encode_events(keys, pa.array([b"%s:%d" % (who, i) for i in range(100)])))

        def child() -> bool:
            bulk(b"child")
            w.close()
            return True

        wait = _in_child(child)
        bulk(b"parent")
        w.close()
        assert wait() == 0, "the child's bulk writes failed or hung"
        got = read_stream(c, S)
        stored = sorted(p for ps in got.values() for p in ps)
        expected = [b"before"] + [b"%s:%d" % (who, i) for who in (b"child", b"parent") for i in range(100)]
        assert stored == sorted(expected)
