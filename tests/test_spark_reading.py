"""The executors' read path without Spark: ``read_range`` against the per-event decoder and the store."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from readergroup.format.events import decode_frames, encode_event
from readergroup.format.producer_watermarks import encode_idle_marker, encode_watermark_marker
from segmentstore import ManualClock, SegmentStore
from segmentstore.client import EmbeddedClient, RemoteClient
from segmentstore.errors import InvalidArgumentError, SegmentNotFoundError
from segmentstore.net.server import SegmentStoreServer
from spark_source.errors import DataLossError
from spark_source.fetching import FIRST_READ_BYTES, READ_CHUNK_BYTES, fetched_ahead, whole_frame_reads
from spark_source.reading import (
    ARROW_SCHEMA,
    COLUMNS,
    MAX_TIMESTAMP_US,
    MIN_TIMESTAMP_US,
    BatchMeta,
    ingestion_times,
    read_range,
)

META = BatchMeta(5_000_000, 2_000)


def expected_rows(
    client: EmbeddedClient, stream: str, seg: str, begin: int, end: int
) -> list[dict[str, Any]]:
    """The rows ``read_range`` must give, from ``decode_frames`` and one ``watermark_at`` per event.

    Timestamps as int64 µs; event times beyond the years 1..9999 (what Spark and Python's
    datetime hold) saturate there (order kept, no wrap).
    """
    data = client.read(seg, begin, end - begin).data
    frames, used = decode_frames(data, begin)
    assert used == len(data)
    rows = []
    for f in frames:
        if not f.is_event:
            continue
        rows.append(
            {
                "stream": stream,
                "segment": seg,
                "offset": f.offset,
                "routing_key": f.routing_key,
                "payload": f.payload,
                "event_time": None if f.event_time is None else saturated_us(f.event_time),
                "ingestion_time": (client.watermark_at(seg, f.offset) + 1) * 1000,
                "watermark": META.watermark_us,
                "event_time_watermark": META.event_time_watermark_us,
                "kind": "event",
            }
        )
    return rows


def saturated_us(ms: int) -> int:
    return max(MIN_TIMESTAMP_US // 1000, min(MAX_TIMESTAMP_US // 1000, ms)) * 1000


def read_rows(client: Any, stream: str, seg: str, begin: int, end: int, **kw: Any) -> list[dict[str, Any]]:
    """``read_range``'s rows, timestamps as int64 µs."""
    batches = list(read_range(client, stream, seg, begin, end, META, **kw))
    assert all(b.schema.equals(ARROW_SCHEMA) and b.num_rows > 0 for b in batches)
    table = pa.Table.from_batches(batches, ARROW_SCHEMA)
    ints = [pa.field(f.name, pa.int64()) if pa.types.is_timestamp(f.type) else f for f in ARROW_SCHEMA]
    rows: list[dict[str, Any]] = table.cast(pa.schema(ints)).to_pylist()
    return rows


def fill(
    clock: ManualClock, client: EmbeddedClient, seg: str, rng: np.random.Generator, appends: int
) -> None:
    """Appends of 1-300 frames (events of every shape, writer markers), a clock step before some."""
    for a in range(appends):
        frames = []
        for i in range(int(rng.integers(1, 300))):
            r = int(rng.integers(0, 20))
            if r == 0:
                frames.append(encode_watermark_marker(3, i))
            elif r == 1:
                frames.append(encode_idle_marker(4))
            elif r == 2:
                frames.append(encode_event("", bytes(int(rng.integers(5_000, 90_000))), None))  # long frames
            else:
                t = None if r == 3 else int(rng.integers(-(2**62), 2**62))
                frames.append(encode_event(f"k-{i % 13}-ü", rng.bytes(int(rng.integers(0, 60))), t))
        if a % 3:
            clock.advance(int(rng.integers(1, 5)))
        client.append(seg, b"".join(frames))


@pytest.mark.parametrize(("chunk", "ahead"), [(4 << 20, 2), (1 << 16, 2), (50_000, 0), (7_000, 1)])
def test_read_range_gives_the_per_event_decoders_rows(chunk: int, ahead: int) -> None:
    """Every column, also across reads that cut frames, frames longer than a read, markers, merges."""
    clock = ManualClock(1_000_000)
    with SegmentStore(clock=clock) as store:
        c = EmbeddedClient(store)
        c.create_segment("s/a/0")
        rng = np.random.default_rng(chunk)
        fill(clock, c, "s/a/0", rng, 20)
        txn = c.create_transaction("s/a/0")
        c.append(txn, b"".join(encode_event(f"t{i}", b"x" * i, i) for i in range(500)))
        clock.advance(10)
        c.seal(txn)
        c.merge_transaction(txn)
        fill(clock, c, "s/a/0", rng, 10)
        length = c.get_info("s/a/0").length
        cuts = sorted(
            {0, length, *(f.end_offset for f in decode_frames(c.read("s/a/0", 0, length).data)[0][::997])}
        )
        for begin, end in ((0, length), (cuts[1], cuts[-2]), (cuts[2], cuts[3])):
            got = read_rows(c, "s/a", "s/a/0", begin, end, ahead=ahead, chunk_bytes=chunk)
            assert got == expected_rows(c, "s/a", "s/a/0", begin, end)


@pytest.mark.parametrize("ahead", [0, 2])
def test_read_range_asks_again_for_runs_answered_in_parts(
    monkeypatch: pytest.MonkeyPatch, ahead: int
) -> None:
    """With the store answering 2 ingestion runs per call, every event still gets its own time."""
    import segmentstore.core.watermark_index as wi

    clock = ManualClock(1_000_000)
    with SegmentStore(clock=clock) as store:
        c = EmbeddedClient(store)
        c.create_segment("s/a/0")
        for i in range(40):  # 40 runs: every append at its own millisecond
            clock.advance(1)
            c.append("s/a/0", b"".join(encode_event(f"k{i}", bytes(j), i) for j in range(i % 5 + 1)))
        length = c.get_info("s/a/0").length
        monkeypatch.setattr(wi, "MAX_RUNS", 2)
        got = read_rows(c, "s/a", "s/a/0", 0, length, ahead=ahead, chunk_bytes=1 << 16)
        assert len({r["ingestion_time"] for r in got}) == 40
        assert got == expected_rows(c, "s/a", "s/a/0", 0, length)


def test_a_range_asks_for_ingestion_runs_once_per_few_reads() -> None:
    """Runs are asked for ``RUNS_AHEAD_READS`` reads ahead and cut per read: the same times, fewer calls."""
    from spark_source.fetching import RUNS_AHEAD_READS, _RunsWindow

    clock = ManualClock(1_000_000)
    with SegmentStore(clock=clock) as store:
        c = EmbeddedClient(store)
        c.create_segment("s/a/0")
        for i in range(60):  # short frames, each append at its own millisecond
            clock.advance(1)
            c.append("s/a/0", b"".join(encode_event(f"k{j}", bytes(j % 40), i) for j in range(20)))
        c.create_segment("s/a/1")
        fill(clock, c, "s/a/1", np.random.default_rng(5), 8)  # frames longer than the reads too
        calls = {"read": 0, "ingestion_runs": 0}

        def counting(name: str) -> Any:
            real = getattr(c, name)

            def counted(*args: Any) -> Any:
                calls[name] += 1
                return real(*args)

            return counted

        for name in calls:
            setattr(c, name, counting(name))
        length = c.get_info("s/a/0").length
        got = read_rows(c, "s/a", "s/a/0", 0, length, ahead=0, chunk_bytes=1 << 10)
        assert got == expected_rows(c, "s/a", "s/a/0", 0, length)
        assert calls["read"] >= 8 * RUNS_AHEAD_READS
        assert calls["ingestion_runs"] <= calls["read"] // RUNS_AHEAD_READS + 2, calls
        length = c.get_info("s/a/1").length
        window = _RunsWindow(c, "s/a/1", length, 1 << 16)
        ends = [f.end_offset for f in decode_frames(c.read("s/a/1", 0, length).data)[0]]
        for a, b in zip([0, *ends[:-1]][::7], ends[6::7], strict=False):
            runs = window.runs(a, b)
            window._check()
            assert runs[0, 0] >= a and runs[0, -1] >= b - 1 and (runs.shape[1] == 1 or runs[0, -2] < b - 1)
            offsets = np.arange(a, b, dtype=np.int64)
            want = ingestion_times(c, "s/a/1", offsets).tolist()
            assert (
                want
                == np.repeat(runs[1], np.diff(np.searchsorted(offsets, runs[0], "right"), prepend=0)).tolist()
            )


def test_read_range_over_the_wire() -> None:
    clock = ManualClock(1_000_000)
    with SegmentStore(clock=clock) as store, SegmentStoreServer(store) as server:
        c = EmbeddedClient(store)
        c.create_segment("s/a/0")
        fill(clock, c, "s/a/0", np.random.default_rng(1), 40)
        length = c.get_info("s/a/0").length
        with RemoteClient(("127.0.0.1", server.port), read_ahead=False) as remote:
            got = read_rows(remote, "s/a", "s/a/0", 0, length, chunk_bytes=1 << 18)
        assert got == expected_rows(c, "s/a", "s/a/0", 0, length)


def test_prefetch_hands_its_reply_to_the_read_with_the_same_arguments() -> None:
    """``RemoteClient.prefetch``: the read takes the reply asked for ahead; a reply at the tail, or
    a failure, is asked for again by the read, which then sees what is there now."""
    clock = ManualClock(1_000_000)
    with SegmentStore(clock=clock) as store, SegmentStoreServer(store) as server:
        c = EmbeddedClient(store)
        c.create_segment("s")
        c.append("s", bytes(range(200)))
        asked: list[tuple[str, int, int]] = []
        real = store.read

        def counted(name: str, offset: int, max_length: int) -> Any:
            asked.append((name, offset, max_length))
            return real(name, offset, max_length)

        want = real("s", 10, 50)
        store.read = counted  # type: ignore[method-assign]
        with RemoteClient(("127.0.0.1", server.port), read_ahead=False) as remote:
            remote.prefetch("s", 10, 50)
            assert remote.read("s", 10, 50) == want
            assert asked == [("s", 10, 50)]  # asked once, ahead
            assert remote.read("s", 10, 50) == want  # taken once: asked again
            assert len(asked) == 2
            remote.prefetch("s", 150, 100)  # reaches the tail: the read asks again
            threading.Event().wait(0.05)
            clock.advance(5)
            c.append("s", b"more")
            tail = remote.read("s", 150, 100)
            assert tail == real("s", 150, 100) and tail.data.endswith(b"more")
            assert asked[2:] == [("s", 150, 100), ("s", 150, 100)]
            remote.prefetch("gone", 0, 10)  # a failure is the read's to report
            with pytest.raises(SegmentNotFoundError):
                remote.read("gone", 0, 10)
            remote.prefetch("s", -1, 10)  # refused by the store: likewise
            with pytest.raises(InvalidArgumentError, match="read offset must be >= 0, got -1"):
                remote.read("s", -1, 10)


def test_over_the_wire_each_read_is_asked_for_before_the_one_in_hand_is_decoded() -> None:
    """``read_range`` over ``RemoteClient`` without a fetch thread: each next read is on its way while
    the task works on the one before (a batch per read here), and no read is asked for twice."""
    clock = ManualClock(1_000_000)
    with SegmentStore(clock=clock) as store, SegmentStoreServer(store) as server:
        c = EmbeddedClient(store)
        c.create_segment("s/a/0")
        for i in range(20):
            clock.advance(1)
            c.append("s/a/0", b"".join(encode_event(f"k{j}", bytes(j % 40), i) for j in range(1000)))
        length = c.get_info("s/a/0").length
        want = expected_rows(c, "s/a", "s/a/0", 0, length)
        asked: list[int] = []
        real = store.read

        def counted(name: str, offset: int, max_length: int) -> Any:
            asked.append(offset)
            return real(name, offset, max_length)

        store.read = counted  # type: ignore[method-assign]
        with RemoteClient(("127.0.0.1", server.port), read_ahead=False) as remote:
            batches = []
            for b in read_range(remote, "s/a", "s/a/0", 0, length, META, ahead=0, chunk_bytes=1 << 16):
                batches.append(b)
                last = asked[-1] + 2 * (1 << 16) >= length  # the next read is the last: not asked ahead
                for _ in range(500):  # the next read reaches the server without this loop asking for it
                    if len(asked) > len(batches) or last:
                        break
                    threading.Event().wait(0.01)
                assert len(asked) > len(batches) or last, (len(batches), asked)
        ints = [pa.field(f.name, pa.int64()) if pa.types.is_timestamp(f.type) else f for f in ARROW_SCHEMA]
        got = pa.Table.from_batches(batches, ARROW_SCHEMA).cast(pa.schema(ints)).to_pylist()
        assert got == want
        assert len(asked) == len(set(asked)) == len(batches) > 10  # each read once


def test_over_the_wire_a_large_range_starts_with_a_small_read_and_asks_the_next_at_once() -> None:
    """A range of more than a read and ``FIRST_READ_BYTES`` over ``RemoteClient``: its first batch comes
    from a read of at most those bytes (a Spark task's JVM thread waits for it), the next, a whole
    read, is asked for before that batch is handed on, and every event comes once, in order."""
    clock = ManualClock(1_000_000)
    with SegmentStore(clock=clock) as store, SegmentStoreServer(store) as server:
        c = EmbeddedClient(store)
        c.create_segment("s/a/0")
        chunk = b"".join(encode_event(f"k{j % 64}", bytes(32), j) for j in range(4096))
        while c.get_info("s/a/0").length < 2 * READ_CHUNK_BYTES + FIRST_READ_BYTES:
            clock.advance(1)
            c.append("s/a/0", chunk)
        length = c.get_info("s/a/0").length
        frames = [f.offset for f in decode_frames(c.read("s/a/0", 0, length).data, 0)[0] if f.is_event]
        asked: list[tuple[int, int]] = []
        real = store.read

        def counted(name: str, offset: int, max_length: int) -> Any:
            asked.append((offset, max_length))
            return real(name, offset, max_length)

        store.read = counted  # type: ignore[method-assign]
        with RemoteClient(("127.0.0.1", server.port), read_ahead=False) as remote:
            batches = read_range(remote, "s/a", "s/a/0", 0, length, META, ahead=0)
            first = next(batches)
            for _ in range(500):  # the second read reaches the server while the first batch is in hand
                if len(asked) > 1:
                    break
                threading.Event().wait(0.01)
            rest = list(batches)
        n = first.num_rows
        assert asked[0] == (0, FIRST_READ_BYTES) and 0 < n < len(frames) // 8
        assert frames[n] <= FIRST_READ_BYTES  # the first batch: the whole frames of the first read
        assert len(asked) > 1 and asked[1] == (frames[n], READ_CHUNK_BYTES)  # asked for at once
        assert all(size == READ_CHUNK_BYTES for _, size in asked[1:-1]), asked
        offsets = pa.concat_arrays([b["offset"] for b in [first, *rest]]).to_numpy()
        assert offsets.tolist() == frames


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(st.tuples(st.integers(1, 200), st.integers(0, 3)), min_size=1, max_size=30),
    picks=st.lists(st.integers(0, 10**6), min_size=0, max_size=400),
)
def test_ingestion_times_are_one_watermark_at_per_event(
    steps: list[tuple[int, int]], picks: list[int]
) -> None:
    """One ``ingestion_runs`` call gives every offset ``watermark_at + 1``, however times change."""
    clock = ManualClock(1_000_000)
    with SegmentStore(clock=clock) as store:
        c = EmbeddedClient(store)
        c.create_segment("seg")
        for n, step in steps:
            clock.advance(step)
            c.append("seg", bytes(n))
        length = c.get_info("seg").length
        offsets = np.unique(np.array([0, *picks], np.int64) % length)
        calls = []
        real = c.ingestion_runs

        def counting(name: str, begin: int, end: int) -> np.ndarray:
            calls.append((begin, end))
            return real(name, begin, end)

        c.ingestion_runs = counting  # type: ignore[method-assign]
        got = ingestion_times(c, "seg", offsets)
        assert got.tolist() == [c.watermark_at("seg", int(o)) + 1 for o in offsets]
        assert got.tolist() == [c.ingestion_time_at("seg", int(o)) for o in offsets]
        assert calls == [(int(offsets[0]), int(offsets[-1]) + 1)]


def test_a_range_truncated_under_the_reader_follows_fail_on_data_loss() -> None:
    clock = ManualClock(1_000_000)
    with SegmentStore(clock=clock) as store:
        c = EmbeddedClient(store)
        c.create_segment("s/a/0")
        frames = [encode_event(f"k{i:04d}", bytes(100), i) for i in range(2_000)]
        c.append("s/a/0", b"".join(frames))
        length = c.get_info("s/a/0").length
        cut = 1_000 * len(frames[0])
        c.truncate("s/a/0", cut)
        with pytest.raises(DataLossError, match=r"data at offset 0 is gone.*failOnDataLoss"):
            list(read_range(c, "s/a", "s/a/0", 0, length, META, chunk_bytes=20_000))
        warnings: list[str] = []
        lenient = BatchMeta(META.watermark_ms, 0, fail_on_data_loss=False)
        got = list(read_range(c, "s/a", "s/a/0", 0, length, lenient, warnings.append, chunk_bytes=20_000))
        offsets = [o for b in got for o in b.column("offset").to_pylist()]
        assert offsets == [i * len(frames[0]) for i in range(1_000, 2_000)]
        assert len(warnings) == 1 and f"skipping to {cut}" in warnings[0]
        c.delete("s/a/0")
        warnings.clear()
        assert list(read_range(c, "s/a", "s/a/0", cut, length, lenient, warnings.append)) == []
        assert "skipping the rest of the range" in warnings[0]


def test_a_planned_end_inside_a_frame_is_data_loss() -> None:
    with SegmentStore(clock=ManualClock(1)) as store:
        c = EmbeddedClient(store)
        c.create_segment("seg")
        c.append("seg", encode_event("k", bytes(50)) * 3)
        with pytest.raises(DataLossError, match="bytes before offset 100 are not a whole frame"):
            list(whole_frame_reads(c, "s", "seg", 0, 100, chunk_bytes=16))


def test_fetched_ahead_keeps_order_raises_in_place_and_stops_when_closed() -> None:
    def items(n: int, fail: bool) -> Iterator[int]:
        yield from range(n)
        if fail:
            raise ValueError("boom")

    assert list(fetched_ahead(lambda: items(50, False), 2)) == list(range(50))
    got: list[int] = []
    with pytest.raises(ValueError, match="boom"):
        for i in fetched_ahead(lambda: items(5, True), 3):
            got.append(i)
    assert got == list(range(5))
    before = threading.active_count()
    gen = fetched_ahead(lambda: items(10**9, False), 2)
    assert next(gen) == 0
    gen.close()
    assert threading.active_count() == before
    assert list(fetched_ahead(lambda: items(3, False), 0)) == [0, 1, 2]


def test_columns_are_the_schema() -> None:
    assert tuple(f.name for f in ARROW_SCHEMA) == COLUMNS
