"""PDP-26's overview diagram as a test: two segments, one reader, W(11:55) ... W(12:00) ... W(12:01).

The diagram's reader delivers ``W(11:55) 1A 2A 1B 2B 2C W(12:00) 1C 1D W(12:01) ..``
and the reader group state holds ``S1(O=2, W=12:00)`` and ``S2(O=3, W=12:01)`` at the
checkpoint. The append times below reproduce it: the reader delivers the oldest
buffered event first, and reports positions (learning the group watermark) when its
report interval elapses on the group clock — which the test advances at the two
places the diagram shows a new watermark.
"""

from __future__ import annotations

from readergroup.config import ReaderGroupConfig, TimeDomain
from readergroup.format.events import encode_event
from readergroup.reading.group import ReaderGroup
from readergroup.reading.reader import EventRead
from segmentstore import ManualClock
from segmentstore.client import SegmentStoreClient

DAY = 1_625_788_800_000  # 2021-07-09 00:00 UTC, ms
INTERVAL = 60_000


def at(h: int, m: int, ms: int = 0) -> int:
    return DAY + (h * 60 + m) * 60_000 + ms


def _label(r: EventRead) -> str:
    if r.is_watermark:
        assert r.watermark is not None
        minutes = (r.watermark - DAY) // 60_000
        return f"W({minutes // 60}:{minutes % 60:02d})"
    if r.is_checkpoint:
        return f"chkpt({r.checkpoint_name})"
    if not r.is_event:
        return "-"
    assert r.payload is not None
    return r.payload.decode()


def test_the_reader_sees_the_diagrams_watermarks_in_the_diagrams_places(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    clock.set(at(11, 50))
    s1, s2 = (s.name for s in client.create_stream("pdp/diagram", 2).active_segments)
    writes = [
        (at(11, 55, 1), s1, "1A"),
        (at(11, 56), s2, "2A"),
        (at(11, 57), s1, "1B"),
        (at(11, 58), s2, "2B"),
        (at(11, 59), s2, "2C"),
        (at(12, 0, 1), s1, "1C"),  # S1's watermark after 1B is 12:00
        (at(12, 1), s1, "1D"),
        (at(12, 1, 1), s2, ".."),  # S2's watermark after 2C is 12:01
    ]
    offsets: dict[str, int] = {}
    for t, seg, label in writes:
        clock.set(t)
        res = client.append(seg, encode_event(label, label.encode()))
        offsets[label] = res.offset + res.length
    clock.set(at(12, 2, 1))
    client.update_attributes(s1, [])  # updateAttribute (LAST_WRITE_TIME): S1's tail watermark is 12:02

    group_clock = ManualClock(0)
    config = ReaderGroupConfig(
        ("pdp/diagram",), time_domain=TimeDomain.INGESTION_TIME, position_report_interval_ms=INTERVAL
    )
    group = ReaderGroup("diagram", config, client, group_clock)
    reader = group.create_reader("reader")

    seen = [_label(reader.read_next_event()) for _ in range(6)]
    group_clock.advance(INTERVAL)  # the reader reports positions: S1 after 1B, S2 after 2C
    seen.append(_label(reader.read_next_event()))
    checkpoint = group.initiate_checkpoint("chkpt")
    seen.append(_label(reader.read_next_event()))
    seen += [_label(reader.read_next_event()) for _ in range(2)]
    group_clock.advance(INTERVAL)  # reports again: S1 after 1D (tail watermark 12:02)
    seen += [_label(reader.read_next_event()) for _ in range(2)]

    assert seen == [
        "W(11:55)",
        "1A",
        "2A",
        "1B",
        "2B",
        "2C",
        "W(12:00)",
        "chkpt(chkpt)",
        "1C",
        "1D",
        "W(12:01)",
        "..",
    ]
    cp = checkpoint.result(timeout=0)
    assert {p.segment: (p.offset, p.watermark) for p in cp.positions} == {
        s1: (offsets["1B"], at(12, 0)),  # S1(O=2, W=12:00)
        s2: (offsets["2C"], at(12, 1)),  # S2(O=3, W=12:01)
    }
    assert cp.watermark == at(12, 0)
    assert group.group_watermark == at(12, 1)
    group._check()


def test_without_the_opt_in_the_same_reader_sees_no_watermarks(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    s1, s2 = (s.name for s in client.create_stream("pdp/plain", 2).active_segments)
    for seg, label in ((s1, "1A"), (s2, "2A"), (s1, "1B")):
        clock.advance(1_000)
        client.append(seg, encode_event(label, label.encode()))
    group_clock = ManualClock(0)
    group = ReaderGroup("plain", ReaderGroupConfig(("pdp/plain",)), client, group_clock)
    reader = group.create_reader("reader")
    seen = []
    for _ in range(5):
        group_clock.advance(INTERVAL)
        seen.append(_label(reader.read_next_event()))
    assert seen == ["1A", "2A", "1B", "-", "-"]
