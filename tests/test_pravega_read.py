"""ingestwm's readers on Pravega-framed streams (what the Pravega front door stores): the decoder
against a plain reference on random blocks, reader groups embedded and remote (payloads exact, no
routing key or event time, ingestion times and watermarks from the store), a group over both
framings, and a framing no reader decodes refused by name.

The real client's streams read by reader groups, flink_compat and Spark: ``test_pravega_client_read``.
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from readergroup.config import ReaderGroupConfig, TimeDomain
from readergroup.errors import FrameFormatError, StreamFramingError
from readergroup.format import pravega_frames as pf
from readergroup.format.events import NO_EVENT_TIME, block_arrays
from readergroup.format.pravega_frames import (
    decode_pravega_block,
    decode_pravega_events,
    encode_pravega_event,
    pravega_frame_ends_of,
    walk_pravega_frames,
)
from readergroup.reading.group import ReaderGroup
from readergroup.reading.reader import EventReader, ReadKind
from readergroup.writing.writer import EventWriter
from segmentstore import FRAMING_PRAVEGA, ManualClock, SegmentStore, StreamInfo
from segmentstore.client import EmbeddedClient, SegmentStoreClient
from segmentstore.controller.controller import controller_of
from segmentstore.controller.stream_config import StreamConfig

_HDR = struct.Struct(">ii")


def reference(buf: bytes, base: int) -> tuple[list[tuple[int, int, bytes]], int, int | None]:
    """The plain decoder: (offset, frame length, payload) of each whole frame, the bytes they take, and
    the offset of a malformed header (type not 0, negative length) or None."""
    out, pos = [], 0
    while pos + 8 <= len(buf):
        kind, n = _HDR.unpack_from(buf, pos)
        if kind != 0 or n < 0:
            return out, pos, base + pos
        if pos + 8 + n > len(buf):
            break
        out.append((base + pos, 8 + n, buf[pos + 8 : pos + 8 + n]))
        pos += 8 + n
    return out, pos, None


_payloads = st.lists(st.binary(max_size=300), max_size=60)


@pytest.mark.parametrize("kernels", [True, False], ids=["numba", "python"])
@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    payloads=_payloads,
    cut=st.integers(0, 40),
    base=st.integers(0, 2**40),
    corrupt=st.one_of(st.none(), st.tuples(st.integers(0, 59), st.integers(-(2**31), 2**31 - 1))),
)
def test_the_block_decoder_equals_a_plain_reference_on_random_blocks(
    kernels: bool,
    payloads: list[bytes],
    cut: int,
    base: int,
    corrupt: tuple[int, int] | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pf, "_NUMBA_MIN_BYTES", 0 if kernels else 2**62)
    monkeypatch.setattr(pf, "_NUMBA_LOADED_MIN_BYTES", 0 if kernels else 2**62)
    frames = [encode_pravega_event(p) for p in payloads]
    if corrupt is not None and frames:  # a header's type or length word replaced
        i, word = corrupt[0] % len(frames), corrupt[1]
        f = bytearray(frames[i])
        f[(i % 2) * 4 : (i % 2) * 4 + 4] = struct.pack(">i", word)
        frames[i] = bytes(f)
    buf = b"".join(frames)
    buf = buf[: max(0, len(buf) - cut)]
    want, consumed, bad = reference(buf, base)
    if bad is not None:
        for decode in (decode_pravega_block, decode_pravega_events):
            with pytest.raises(FrameFormatError, match=f"Pravega event frame at offset {bad}: "):
                decode(buf, base)
        with pytest.raises(FrameFormatError, match=f"at offset {bad - base}: "):
            pravega_frame_ends_of(buf)
        assert walk_pravega_frames(buf) == (bad - base, None, True)
        return
    block, got_consumed = decode_pravega_block(buf, base)
    assert got_consumed == consumed
    cols, _, _, key_bytes = block
    assert key_bytes == 0 and cols.shape[1] == len(want)
    assert cols[0].tolist() == [o for o, _, _ in want]
    assert cols[1].tolist() == [n for _, n, _ in want]
    assert set(cols[2].tolist()) <= {NO_EVENT_TIME}
    keys, pays = block_arrays(block)
    assert pays.to_pylist() == [p for _, _, p in want]
    assert keys.to_pylist() == [""] * len(want)  # (no key bytes: the reader makes them null)
    columns, c2 = decode_pravega_events(buf, base)
    assert c2 == consumed and columns.offsets.tolist() == cols[0].tolist()
    assert columns.routing_keys.null_count == len(want) and columns.payloads.to_pylist() == pays.to_pylist()
    assert (columns.event_times == NO_EVENT_TIME).all()
    ends, c3 = pravega_frame_ends_of(buf)
    assert c3 == consumed and ends.tolist() == [o - base + n for o, n, _ in want]
    whole, nxt, malformed = walk_pravega_frames(buf)
    assert whole == consumed and not malformed
    rest = buf[consumed:]
    assert nxt == (8 + _HDR.unpack_from(rest)[1] if len(rest) >= 8 else None)


def _pravega_stream(store: SegmentStore, name: str, segments: int) -> StreamInfo:
    ctl = controller_of(store)
    ctl.create_scope(name.split("/")[0])
    return ctl.create_stream_in_scope(
        name, dataclasses.replace(StreamConfig(), min_segments=segments), FRAMING_PRAVEGA
    )


def _append_as_pravega(
    store: SegmentStore, clock: ManualClock, info: StreamInfo, rounds: int
) -> dict[bytes, int]:
    """Blocks of Pravega frames appended to every segment, one block per segment and round, the clock
    moving 7 ms between rounds (as the wire front door stores a writer's blocks); payload -> its time."""
    times: dict[bytes, int] = {}
    for r in range(rounds):
        for i, seg in enumerate(info.active_segments):
            payloads = [f"r{r}-s{i}-e{j}".encode() * (j % 3 + 1) for j in range(r % 4 + 1)]
            result = store.append(seg.name, b"".join(encode_pravega_event(p) for p in payloads))
            times.update(dict.fromkeys(payloads, result.timestamp))
        clock.advance(7)
    return times


def _drain(readers: list[EventReader]) -> list:  # type: ignore[type-arg]
    out = []
    for _ in range(200):
        idle = True
        for rd in readers:
            r = rd.read_next_event()
            if r.kind is not ReadKind.EMPTY:
                idle = False
                out.append(r)
        if idle:
            return out
    raise AssertionError("the readers never ran dry")


def test_a_reader_group_reads_pravega_framed_events_with_ingestion_times(
    client: SegmentStoreClient, store: SegmentStore, clock: ManualClock
) -> None:
    info = _pravega_stream(store, "pv/s", 3)
    times = _append_as_pravega(store, clock, info, 12)
    group = ReaderGroup(
        "g",
        ReaderGroupConfig(("pv/s",), time_domain=TimeDomain.INGESTION_TIME, position_report_interval_ms=0),
        client,
        clock,
    )
    readers = [group.create_reader("a"), group.create_reader("b")]
    wm_before = group.group_watermark
    reads = _drain(readers)
    events = [r for r in reads if r.kind is ReadKind.EVENT]
    assert sorted(r.payload for r in events) == sorted(times)  # every event once, payload exact
    for r in events:
        assert r.routing_key is None and r.event_time is None  # Pravega stores neither
        assert r.ingestion_time == times[r.payload]  # the append's stamp
        assert r.length == 8 + len(r.payload)
    by_segment: dict[str, list[int]] = {}
    for r in events:
        by_segment.setdefault(r.segment, []).append(r.ingestion_time)
    assert all(t == sorted(t) for t in by_segment.values())
    marks = [r.watermark for r in reads if r.kind is ReadKind.WATERMARK]
    assert marks and group.group_watermark > wm_before and group.group_watermark >= max(times.values()) - 1
    for seg in info.active_segments:  # LAST_WRITE_TIME: the segment's last append, as for any segment
        last = max(
            t for p, t in times.items() if p.startswith(f"r11-s{int(seg.name.split('/')[-1][0])}-".encode())
        )
        assert client.get_info(seg.name).last_write_time == last
    # idle: nobody writes; the advancer moves the Pravega segments' tails and the caught-up group follows
    clock.advance(store.config.max_watermark_lag_ms + store.config.polling_period_ms + 1)
    assert set(store.advance_idle_watermarks()) >= {s.name for s in info.active_segments}
    before = group.group_watermark
    idle = _drain(readers)
    assert not [r for r in idle if r.kind is ReadKind.EVENT]
    assert (
        group.group_watermark > before
        and group.group_watermark >= clock.now() - store.config.max_watermark_lag_ms - 1
    )
    for rd in readers:
        rd._check()
        rd.close()


def test_a_group_over_both_framings_keeps_ingestwm_keys_and_gives_pravega_events_none(
    client: SegmentStoreClient, store: SegmentStore, clock: ManualClock
) -> None:
    info = _pravega_stream(store, "pv/mixed", 2)
    times = _append_as_pravega(store, clock, info, 5)
    client.create_stream("iw/keyed", 2)
    with EventWriter(client, "iw/keyed") as w:
        for i in range(40):
            w.write_event(f"k{i % 5}", f"iw-{i}".encode(), 1_000 + i)
    group = ReaderGroup(
        "mixed",
        ReaderGroupConfig(
            ("pv/mixed", "iw/keyed"), time_domain=TimeDomain.INGESTION_TIME, position_report_interval_ms=0
        ),
        client,
        clock,
    )
    reader = group.create_reader("r")
    got: dict[bytes, tuple[object, object]] = {}
    for _ in range(50):  # batches: several segments' blocks merged (the merge kernel once numba is loaded)
        b = reader.read_batch(7)
        for k, p, et in zip(
            b.routing_key.to_pylist(), b.payload.to_pylist(), b.event_time.tolist(), strict=True
        ):
            got[p] = (k, et)
    assert set(got) == set(times) | {f"iw-{i}".encode() for i in range(40)}
    for p, (k, et) in got.items():
        if p in times:
            assert k is None and et == NO_EVENT_TIME
        else:
            i = int(p.decode().split("-")[1])
            assert k == f"k{i % 5}" and et == 1_000 + i
    reader._check()
    reader.close()


def test_a_framing_no_reader_decodes_is_refused_naming_the_stream(
    store: SegmentStore, clock: ManualClock
) -> None:
    class Future(EmbeddedClient):
        def get_stream(self, stream: str) -> StreamInfo:
            return dataclasses.replace(super().get_stream(stream), framing="avro")

    c = Future(store)
    c.create_stream("fx/s")
    cfg = ReaderGroupConfig(("fx/s",), time_domain=TimeDomain.INGESTION_TIME)
    with pytest.raises(
        StreamFramingError, match=r"stream 'fx/s' holds 'avro'-framed events, which this reader"
    ):
        ReaderGroup("g", cfg, c, clock)
    group = ReaderGroup("g", cfg, EmbeddedClient(store), clock)  # created by another client...
    reader = ReaderGroup.open("g", c, clock).create_reader("r")  # ...read by one that sees the framing
    with pytest.raises(StreamFramingError, match="'avro'"):
        reader.read_next_event()
    assert group.name == "g"


def test_a_malformed_pravega_frame_in_a_segment_is_an_error_naming_its_offset(
    store: SegmentStore, clock: ManualClock
) -> None:
    info = _pravega_stream(store, "pv/bad", 1)
    seg = info.active_segments[0].name
    store.append(seg, encode_pravega_event(b"fine"))
    store.append(seg, _HDR.pack(7, 3) + b"abc")
    group = ReaderGroup("g", ReaderGroupConfig(("pv/bad",)), EmbeddedClient(store), clock)
    reader = group.create_reader("r")
    with pytest.raises(FrameFormatError, match="Pravega event frame at offset 12: type 7"):
        for _ in range(5):
            reader.read_next_event()


def test_large_pravega_events_span_blocks(
    client: SegmentStoreClient, store: SegmentStore, clock: ManualClock
) -> None:
    info = _pravega_stream(store, "pv/large", 1)
    seg = info.active_segments[0].name
    big = [np.random.default_rng(i).bytes(n) for i, n in enumerate((70_000, 5, 300_000))]
    for p in big:
        store.append(seg, encode_pravega_event(p))
    group = ReaderGroup("g", ReaderGroupConfig(("pv/large",), read_buffer_bytes=65_536), client, clock)
    events = [r for r in _drain([group.create_reader("r")]) if r.kind is ReadKind.EVENT]
    assert [r.payload for r in events] == big
