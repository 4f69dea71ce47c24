"""``scan_records``: where length-prefixed records end, found inside the store (issue 14).

What a caller relies on (the Spark source's planner cuts micro-batches with it): the
answer is a record boundary, counts exactly the whole records that fit, never more than
asked; a call that stops at its per-call bound is continued from its end; records longer
than a copy chunk or spanning appends count like any other; the same over a served
store and with appends going on. Bad arguments are refused naming the segment.
"""

from __future__ import annotations

import itertools
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import segmentstore.core.read_index as read_index
from readergroup.format.events import encode_event
from segmentstore import ManualClock, SegmentStore, StoreConfig, TickingClock
from segmentstore.client import EmbeddedClient, SegmentStoreClient
from segmentstore.core.records import _walk_py, walk_records
from segmentstore.errors import BadOffsetError, InvalidArgumentError, SegmentTruncatedError
from segmentstore.limits import INT64_MAX
from segmentstore.results import RecordScan
from spark_source.reading import frame_ends, frame_span


def record(n: int, fill: int = 7) -> bytes:
    return struct.pack("<I", n) + bytes([fill % 256]) * n


def boundaries(sizes: list[int], base: int = 0) -> list[int]:
    out = [base]
    for n in sizes:
        out.append(out[-1] + 4 + n)
    return out


def expected(ends: list[int], i: int, max_length: int, max_records: int | None) -> tuple[int, int]:
    """(end, records) from ``ends[i]``: the whole records within ``max_length``, at most ``max_records``."""
    limit = ends[i] + max_length
    fit = [e for e in ends[i + 1 :] if e <= limit]
    if max_records is not None:
        fit = fit[:max_records]
    return (fit[-1] if fit else ends[i]), len(fit)


def scan_all(
    client: SegmentStoreClient, seg: str, offset: int, max_length: int, max_records: int | None
) -> tuple[int, int]:
    """Calls continued from each ``end`` until one finds nothing more (what ``frame_span`` does)."""
    pos, found = offset, 0
    while max_records is None or found < max_records:
        want = None if max_records is None else max_records - found
        scan = client.scan_records(seg, pos, offset + max_length - pos, want)
        assert scan.offset == pos and scan.end >= pos and scan.records >= 0
        if scan.records == 0:
            assert scan.end == pos
            break
        found += scan.records
        pos = scan.end
    return pos, found


_names = itertools.count()


@pytest.fixture(params=["memory", "disk"])
def where(
    request: pytest.FixtureRequest, client: SegmentStoreClient, tmp_path: Path
) -> Iterator[SegmentStoreClient]:
    """``client`` (embedded and remote, segments in memory), and an embedded client of a durable store."""
    if request.param == "memory":
        yield client
        return
    with SegmentStore(ManualClock(1_000), data_dir=tmp_path / "d") as durable:
        yield EmbeddedClient(durable)


_SETTINGS = settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])


@_SETTINGS
@example(sizes=[5, 0], split=[1], start=0, extra=0, max_records=None, chunk=64)  # a last record of 0 bytes
@given(
    sizes=st.lists(st.integers(0, 300), min_size=0, max_size=60),
    split=st.lists(st.integers(1, 500), min_size=1, max_size=8),
    start=st.integers(0, 59),
    extra=st.integers(-10, 4000),
    max_records=st.none() | st.integers(0, 70),
    chunk=st.sampled_from([8, 64, 1 << 20]),
)
def test_scan_counts_exactly_the_whole_records_that_fit(
    where: SegmentStoreClient,
    monkeypatch: pytest.MonkeyPatch,
    sizes: list[int],
    split: list[int],
    start: int,
    extra: int,
    max_records: int | None,
    chunk: int,
) -> None:
    """Over any appends (records spanning them), chunks and per-call bounds; in memory (walked in place,
    embedded and remote) and on disk (copied out)."""
    client = where
    monkeypatch.setattr(read_index, "SCAN_CHUNK_BYTES", chunk)
    monkeypatch.setattr(read_index, "SCAN_MAX_BYTES", 4 * chunk)
    seg = f"seg-{next(_names)}"
    client.create_segment(seg)
    data = b"".join(record(n, i) for i, n in enumerate(sizes))
    cuts = sorted({0, len(data), *(min(len(data), c) for c in split)})
    for a, b in itertools.pairwise(cuts):
        if b > a:
            client.append(seg, data[a:b])
    ends = boundaries(sizes)
    i = min(start, len(sizes))
    max_length = max(0, ends[-1] - ends[i] + extra)
    want = expected(ends, i, max_length, max_records)
    assert scan_all(client, seg, ends[i], max_length, max_records) == want
    one = client.scan_records(seg, ends[i], max_length, max_records)
    assert one.end in ends and one.records == ends.index(one.end) - i
    if one.records < want[1]:  # stopped early: only at the per-call bound
        assert one.end - ends[i] >= 4 * chunk
    info = client.get_info(seg)
    assert (info.length, info.start_offset) == (len(data), 0)  # nothing changed


@settings(max_examples=25)  # below the profile's 100: large segments per example
@given(
    sizes=st.lists(st.integers(0, 2000), min_size=20, max_size=200),
    max_records=st.integers(0, 250),
    trim=st.integers(0, 3000),
)
def test_the_numba_walk_equals_the_python_walk(sizes: list[int], max_records: int, trim: int) -> None:
    """Chunks from 32 KiB go to the kernel: it gives what the Python loop gives, to the byte."""
    buf = b"".join(record(n, i) for i, n in enumerate(sizes)) * 4
    buf = buf[: max(0, len(buf) - trim)]
    assert walk_records(buf, max_records) == _walk_py(buf, max_records)
    assert walk_records(buf, INT64_MAX) == _walk_py(buf, INT64_MAX)
    whole = b"".join(record(n) for n in sizes) * 4 + record(0)  # the last record has no bytes
    assert walk_records(whole, INT64_MAX) == _walk_py(whole, INT64_MAX) == (4 * len(sizes) + 1, len(whole))


def test_a_record_longer_than_a_chunk_counts_and_one_past_the_bound_does_not(
    client: SegmentStoreClient,
) -> None:
    big = 3 * read_index.SCAN_CHUNK_BYTES + 5
    sizes = [10, big, 0, 20]
    client.create_segment("big")
    client.append("big", b"".join(record(n) for n in sizes[:2])[:100])
    client.append("big", b"".join(record(n) for n in sizes)[100:])
    ends = boundaries(sizes)
    assert client.scan_records("big", 0, ends[-1]) == RecordScan(0, ends[-1], 4)
    assert client.scan_records("big", ends[1], ends[2] - ends[1]) == RecordScan(ends[1], ends[2], 1)
    assert client.scan_records("big", ends[1], ends[2] - ends[1] - 1) == RecordScan(ends[1], ends[1], 0)
    assert client.scan_records("big", 0, ends[-1], 0) == RecordScan(0, 0, 0)
    assert client.scan_records("big", ends[-1], 100) == RecordScan(ends[-1], ends[-1], 0)  # at the tail


def test_scans_go_on_while_writers_append(ticking: tuple[TickingClock, SegmentStoreClient]) -> None:
    """On a clock of its own and appends racing the scan: every answer is a boundary, counted right."""
    _, client = ticking
    client.create_segment("busy")
    frames = [encode_event(f"k{i % 5}", bytes(i % 200), None) for i in range(20_000)]
    stop = threading.Event()
    written: list[int] = [0]

    def writer() -> None:
        i = 0
        while not stop.is_set() and i < len(frames):
            chunk = b"".join(frames[i : i + 50])
            client.append("busy", chunk)
            i += 50
            written.append(written[-1] + len(chunk))

    t = threading.Thread(target=writer)
    t.start()
    try:
        sizes = [len(f) for f in frames]
        ends = [0]
        for n in sizes:
            ends.append(ends[-1] + n)
        at = {e: k for k, e in enumerate(ends)}
        pos = 0
        for _ in range(200):
            scan = client.scan_records("busy", pos, 1 << 30)
            assert scan.end in at and at[scan.end] - at[pos] == scan.records
            pos = scan.end
    finally:
        stop.set()
        t.join()
    end, n = frame_span(client, "busy", 0, 1 << 30)
    assert end == client.get_info("busy").length and n == at[end]


def test_errors_name_the_segment_and_leave_it_alone(client: SegmentStoreClient) -> None:
    client.create_segment("e")
    client.append("e", record(3) * 4)
    client.truncate("e", 7)
    with pytest.raises(SegmentTruncatedError, match=r"'e'.*0.*7"):
        client.scan_records("e", 0, 100)
    with pytest.raises(BadOffsetError, match=r"'e'.*29"):
        client.scan_records("e", 29, 100)
    with pytest.raises(InvalidArgumentError, match=r"'e'.*max_records.*-2"):
        client.scan_records("e", 7, 100, -2)
    assert client.scan_records("e", 7, 100) == RecordScan(7, 28, 3)


def test_frame_span_agrees_with_the_validating_walk(client: SegmentStoreClient) -> None:
    """The planner's span of event frames ends where the client-side frame walk says, for every budget."""
    client.create_segment("f")
    frames = [encode_event(f"k{i % 7}", bytes(i % 90), i) for i in range(3_000)]
    client.append("f", b"".join(frames[:1000]))
    client.append("f", b"".join(frames[1000:]))
    total = sum(map(len, frames))
    for max_bytes, max_frames in [(total, None), (total, 1), (total, 2999), (1000, None), (total // 3, 500)]:
        ends = frame_ends(client, "f", 0, max_bytes, max_frames)
        assert frame_span(client, "f", 0, max_bytes, max_frames) == (int(ends[-1]), len(ends))


def test_a_store_without_records_is_walked_but_not_judged() -> None:
    """Bytes that are not records give some boundary, never an error: the reader validates."""
    store = SegmentStore(clock=TickingClock(1))
    store.create_segment("raw")
    store.append("raw", b"\xff\xff\xff\x7f" + b"x" * 10)
    assert store.scan_records("raw", 0, 14) == RecordScan(0, 0, 0)
    store._check()
    store.close()


def test_scans_read_file_backed_and_evicted_segments(tmp_path: Path) -> None:
    """A durable store, small cache, the segment evicted: the same answers from disk, and after a restart."""
    clock = ManualClock(1_000_000)
    cfg = StoreConfig(
        max_watermark_lag_ms=1_000,
        polling_period_ms=100,
        eviction_age_ms=500,
        cache_bytes=4096,
        advancer_thread=False,
    )
    sizes = [(i * 37) % 700 for i in range(400)]
    data = b"".join(record(n, i) for i, n in enumerate(sizes))
    ends = boundaries(sizes)
    with SegmentStore(clock, cfg, data_dir=tmp_path / "d") as s:
        s.create_segment("cold")
        for k in range(0, len(data), 5_000):
            clock.advance(1)
            s.append("cold", data[k : k + 5_000])
        for _ in range(20):
            clock.advance(100)
            s.advance_idle_watermarks()
        assert s.eviction_stats.cold == 1
        assert s.scan_records("cold", ends[3], ends[-1]) == RecordScan(ends[3], ends[-1], len(sizes) - 3)
        end, n = expected(ends, 10, 10_000, 50)
        assert 0 < n < 50 and s.scan_records("cold", ends[10], 10_000, 50) == RecordScan(ends[10], end, n)
        assert s.scan_records("cold", ends[10], 10**6, 50) == RecordScan(ends[10], ends[60], 50)
    with SegmentStore(clock, cfg, data_dir=tmp_path / "d") as s:
        assert s.scan_records("cold", 0, ends[-1] - 1) == RecordScan(0, ends[-2], len(sizes) - 1)
        s._check()


def test_lost_replies_are_asked_again() -> None:
    """Both calls change nothing, so a reply lost with its connection is asked for again: same answers."""
    from faults import replies_lost_once

    store = SegmentStore(clock=TickingClock(1_000))
    store.create_segment("f")
    frames = [encode_event(f"k{i % 9}", bytes(i % 150), i) for i in range(20_000)]
    for k in range(0, len(frames), 500):
        store.append("f", b"".join(frames[k : k + 500]))
    want_scan = store.scan_records("f", 0, 1 << 30, 15_000)
    length = store.get_info("f").length
    want_runs = store.ingestion_runs("f", 0, length)
    with replies_lost_once(store, store, "scan_records", "ingestion_runs") as (c, proxy, applied):
        assert frame_span(c, "f", 0, 1 << 30, 15_000) == (want_scan.end, 15_000)
        assert np.array_equal(c.ingestion_runs("f", 0, length), want_runs)
        assert [len(applied[m]) for m in ("scan_records", "ingestion_runs")] == [2, 2] and proxy.cuts == 2
    store.close()
