"""Wide streams (issue 39): planning in one store call however many segments, input partitions by size.

No Spark needed: the planner runs over an embedded client that counts its calls, and the
batch reader's ``partitions()`` over a served store.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from readergroup.writing.writer import EventWriter
from segmentstore import ManualClock, SegmentStore
from segmentstore.client import EmbeddedClient
from segmentstore.net.server import SegmentStoreServer
from spark_source.errors import DataLossError, InvalidOptionError
from spark_source.offsets import SourceOffset
from spark_source.options import DEFAULT_MAX_PARTITION_BYTES, parse_source_options
from spark_source.partitioning import pack_ranges, split_range
from spark_source.planner import READ_ALL, Limit, Planner, SegmentRange
from spark_source.reading import BatchMeta, read_range
from spark_source.source import IngestBatchReader, IngestPartition, IngestStreamReader

START = 1_000_000


class Counting:
    """An ``EmbeddedClient`` that counts the store calls made through it, by name."""

    def __init__(self, inner: EmbeddedClient) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.inner, name)
        if not callable(fn):
            return fn

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return fn(*args, **kwargs)

        return call


def _wide(segments: int, events: int = 200) -> tuple[ManualClock, EmbeddedClient]:
    clock = ManualClock(START)
    client = EmbeddedClient(SegmentStore(clock=clock))
    client.create_stream("s/a", segments)
    with EventWriter(client, "s/a") as w:
        for i in range(events):
            clock.advance(1)
            w.write_event(f"k{i}", b"p%d" % i, clock.now())
    return clock, client


def _planner(client: Any, **extra: str) -> Planner:
    opts = parse_source_options(
        {"endpoint": "127.0.0.1:1", "stream": "s/a", "startingPosition": "earliest", **extra}, streaming=True
    )
    return Planner(client, opts)


@pytest.mark.parametrize("segments", [4, 64])
def test_a_micro_batch_is_planned_in_one_store_call_however_wide_the_stream(segments: int) -> None:
    clock, inner = _wide(segments)
    client = Counting(inner)
    p = _planner(client)
    start = p.initial_offset()
    first = p.next_offset(start, READ_ALL, None)  # the starting watermark
    client.calls.clear()
    end = p.next_offset(first, READ_ALL, None)
    assert client.calls == {"segment_states": 1}
    assert sum(r.end - r.begin for r in p.ranges(first, end)) == sum(
        inner.get_info(s.name).length for s in inner.get_stream("s/a").active_segments
    )
    clock.advance(60_000)  # idle: the advancer moves the watermark; one call again
    inner.store.advance_idle_watermarks()
    client.calls.clear()
    idle = p.next_offset(end, READ_ALL, None)
    assert client.calls == {"segment_states": 1} and idle.watermark > end.watermark
    assert p.ranges(end, idle) == []


def test_with_time_domain_event_a_micro_batch_asks_no_segment_one_by_one() -> None:
    """The writers' watermark reads their markers where data moved; infos come from the one call."""
    clock, inner = _wide(32)
    client = Counting(inner)
    p = _planner(client, timeDomain="event")
    start = p.next_offset(p.initial_offset(), READ_ALL, None)  # meets every segment once
    client.calls.clear()
    end = p.next_offset(start, READ_ALL, None)
    assert client.calls == {"segment_states": 1}
    with EventWriter(inner, "s/a") as w:
        w.write_event("k1", b"late", clock.now())
    client.calls.clear()
    p.next_offset(end, READ_ALL, None)
    assert client.calls["segment_states"] == 1 and client.calls["get_info"] == 0
    assert 0 < client.calls["read"] <= 4  # the one segment written: its markers scanned


def test_successors_that_join_cost_one_more_call_not_one_per_segment() -> None:
    clock, inner = _wide(8)
    p = _planner(Counting(inner))
    client = p._client
    assert isinstance(client, Counting)
    start = p.next_offset(p.initial_offset(), READ_ALL, None)
    segs = [s.name for s in inner.get_stream("s/a").active_segments]
    inner.scale_stream("s/a", segs, [(i / 16, (i + 1) / 16) for i in range(16)])
    with EventWriter(inner, "s/a") as w:
        for i in range(64):
            clock.advance(1)
            w.write_event(f"k{i}", b"q", clock.now())
    client.calls.clear()
    end = p.next_offset(start, READ_ALL, None)
    assert client.calls == {"segment_states": 2}  # the frontier, then the 16 that joined
    assert len([s for s in end.streams["s/a"].positions if "epoch.1" in s]) == 16
    assert sum(r.end - r.begin for r in p.ranges(start, end) if "epoch.1" in r.segment) == sum(
        inner.get_info(s.name).length for s in inner.get_stream("s/a").active_segments
    )


def test_with_a_limit_the_ends_watermarks_cost_one_call_more() -> None:
    _, inner = _wide(16)
    client = Counting(inner)
    p = _planner(client)
    start = p.next_offset(p.initial_offset(), READ_ALL, None)
    client.calls.clear()
    p.next_offset(start, Limit(max_events=20), None)
    assert client.calls["segment_states"] == 2
    assert client.calls["get_info"] == client.calls["watermark_at"] == 0


# ---------------------------------------------------------------- input partitions by size
def _r(seg: str, begin: int, end: int, stream: str = "s/a") -> SegmentRange:
    return SegmentRange(stream, seg, begin, end)


def test_ranges_are_packed_whole_up_to_the_size_in_order() -> None:
    ranges = [_r(f"s/a/{i}", 0, 30) for i in reversed(range(10))] + [_r("s/a/big", 5, 500)]
    parts = pack_ranges(ranges, 100)
    assert [[r.segment for r in p] for p in parts][:2] == [
        [f"s/a/{i}" for i in range(3)],
        ["s/a/3", "s/a/4", "s/a/5"],
    ]
    assert all(sum(r.end - r.begin for r in p) <= 100 or len(p) == 1 for p in parts)
    assert Counter(r for p in parts for r in p) == Counter(ranges)  # every range once, none cut
    assert [p for p in parts if any(r.segment == "s/a/big" for r in p)] == [[_r("s/a/big", 5, 500)]]
    assert pack_ranges([], 100) == []


def test_a_task_reads_a_predecessor_before_its_successor() -> None:
    ranges = [_r("s/a/12.#epoch.2", 0, 10), _r("s/a/7.#epoch.1", 0, 10), _r("s/a/5.#epoch.0", 0, 10)]
    [part] = pack_ranges(ranges, 100)  # by name alone, 12 would come first
    assert [r.segment for r in part] == ["s/a/5.#epoch.0", "s/a/7.#epoch.1", "s/a/12.#epoch.2"]


def _events_of(client: EmbeddedClient, rs: list[SegmentRange]) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for r in rs:
        for b in read_range(client, r.stream, r.segment, r.begin, r.end, BatchMeta(0, 0)):
            out.extend(zip(b.column("segment").to_pylist(), b.column("offset").to_pylist(), strict=True))
    return out


def test_min_partitions_splits_large_ranges_at_frame_boundaries_in_order() -> None:
    _, client = _wide(2, events=300)
    ranges = [_r(s.name, 0, client.get_info(s.name).length) for s in client.get_stream("s/a").active_segments]
    whole = pack_ranges(ranges, DEFAULT_MAX_PARTITION_BYTES)
    assert len(whole) == 1  # small: one task
    parts = pack_ranges(ranges, DEFAULT_MAX_PARTITION_BYTES, 6, lambda r, n: split_range(client, r, n))
    assert 6 <= len(parts) <= 8
    flat = [r for p in parts for r in p]
    for seg in {r.segment for r in ranges}:
        mine = [r for r in flat if r.segment == seg]
        assert [r.begin for r in mine[1:]] == [r.end for r in mine[:-1]]  # consecutive, in order
    assert _events_of(client, flat) == _events_of(client, ranges)  # every cut at a frame boundary
    assert pack_ranges(ranges, DEFAULT_MAX_PARTITION_BYTES, 1) == whole


def test_split_range_gives_a_frame_longer_than_a_part_alone() -> None:
    client = EmbeddedClient(SegmentStore(clock=ManualClock(START)))
    client.create_stream("s/a", 1)
    seg = client.get_stream("s/a").active_segments[0].name
    with EventWriter(client, "s/a") as w:
        for size in (10, 3000, 10):
            w.write_event("k", b"x" * size, START)
    r = _r(seg, 0, client.get_info(seg).length)
    parts = split_range(client, r, 100)
    assert parts[0].begin == 0 and parts[-1].end == r.end and len(parts) >= 3
    assert any(p.end - p.begin > 3000 for p in parts)
    assert _events_of(client, parts) == _events_of(client, [r])


def _rows(batches: Any) -> list[dict[str, Any]]:
    return [row for b in batches for row in b.to_pylist()]


def test_a_task_of_many_small_ranges_reads_them_in_few_calls_as_read_range_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import spark_source.partitioning as partitioning

    _, inner = _wide(64, events=600)
    segs = [s.name for s in inner.get_stream("s/a").active_segments]
    ranges = [_r(seg, 0, inner.get_info(seg).length) for seg in segs if inner.get_info(seg).length]
    meta = BatchMeta(START + 5, 0)
    want = _rows(b for r in ranges for b in read_range(inner, r.stream, r.segment, r.begin, r.end, meta))
    monkeypatch.setattr(partitioning, "GROUP_RANGES", 10)
    client = Counting(inner)
    got = list(partitioning.read_ranges(client, ranges, meta))  # type: ignore[arg-type]
    assert _rows(got) == want and len(want) == 600  # the same rows, in range order
    assert client.calls == {"read_ranges": -(-len(ranges) // 10)} and len(got) == client.calls["read_ranges"]
    # a range read_ranges cannot give whole is read as read_range reads it, and reports what it reports
    inner.truncate(ranges[3].segment, ranges[3].end)
    with pytest.raises(DataLossError, match=ranges[3].segment.replace(".", "\\.")):
        list(partitioning.read_ranges(inner, ranges, meta))
    skipped = _rows(partitioning.read_ranges(inner, ranges, BatchMeta(START + 5, 0, fail_on_data_loss=False)))
    assert skipped == [row for row in want if row["segment"] != ranges[3].segment]


@pytest.mark.parametrize("option", ["maxPartitionBytes", "minPartitions"])
@pytest.mark.parametrize("bad", ["0", "-1", "1.5", "lots"])
def test_bad_partition_options_name_the_option(option: str, bad: str) -> None:
    with pytest.raises(InvalidOptionError, match=f"option {option} must be an int > 0, got '{bad}'"):
        parse_source_options({"endpoint": "h:1", "stream": "s/a", option: bad}, streaming=True)


# ---------------------------------------------------------------- the source's partitions, served
@pytest.fixture
def served() -> Iterator[tuple[EmbeddedClient, str]]:
    _, client = _wide(64, events=2000)
    server = SegmentStoreServer(client.store)
    port = server.start()
    try:
        yield client, f"127.0.0.1:{port}"
    finally:
        server.stop()


def _covered(parts: list[IngestPartition]) -> dict[str, int]:
    got: dict[str, int] = {}
    for p in parts:
        for r in p.ranges:
            got[r.segment] = got.get(r.segment, 0) + r.end - r.begin
    return got


def test_a_batch_read_of_a_wide_stream_is_few_tasks_and_reads_every_byte(
    served: tuple[EmbeddedClient, str],
) -> None:
    client, endpoint = served
    lengths = {s.name: client.get_info(s.name).length for s in client.get_stream("s/a").active_segments}
    opts = {"endpoint": endpoint, "stream": "s/a"}
    parts = list(IngestBatchReader(parse_source_options(opts, streaming=False)).partitions())
    assert len(parts) == 1 and _covered(parts) == lengths  # type: ignore[arg-type]
    small = parse_source_options({**opts, "maxPartitionBytes": "2000"}, streaming=False)
    parts = list(IngestBatchReader(small).partitions())
    total = sum(lengths.values())
    assert total // 2000 <= len(parts) <= 2 * total // 2000 + 1  # two neighbours hold more than 2000
    assert all(sum(r.end - r.begin for r in p.ranges) <= 2000 for p in parts)  # type: ignore[attr-defined]
    assert _covered(parts) == lengths  # type: ignore[arg-type]
    many = parse_source_options({**opts, "minPartitions": "100"}, streaming=False)
    parts = list(IngestBatchReader(many).partitions())
    assert len(parts) >= 100 and _covered(parts) == lengths  # type: ignore[arg-type]


def test_a_streaming_micro_batch_of_a_wide_stream_is_packed_and_keeps_its_watermark_row(
    served: tuple[EmbeddedClient, str],
) -> None:
    _, endpoint = served
    reader = IngestStreamReader(
        parse_source_options(
            {"endpoint": endpoint, "stream": "s/a", "startingPosition": "earliest"}, streaming=True
        )
    )
    try:
        start = reader.initialOffset()
        first = reader.latestOffset(start, reader.getDefaultReadLimit())
        end = reader.latestOffset(first, reader.getDefaultReadLimit())
        parts = list(reader.partitions(first, end))
        assert len(parts) == 1 and len(parts[0].ranges) == 64  # type: ignore[attr-defined]
        assert SourceOffset.from_dict(end).watermark >= SourceOffset.from_dict(first).watermark
    finally:
        reader.stop()


def test_a_range_holding_only_markers_is_a_batch_of_no_rows() -> None:
    """A range of watermark markers and no events (``timeDomain=event``): zero rows, not an error."""
    import numpy as np

    from readergroup.format.frame_batch import decode_events
    from spark_source.reading import ARROW_SCHEMA, events_batch

    cols, _ = decode_events(b"", 0)
    batch = events_batch("s/t", "s/t/0.#epoch.0", BatchMeta(1_000, 0), cols, np.empty(0, np.int64))
    assert batch.num_rows == 0 and batch.schema == ARROW_SCHEMA
