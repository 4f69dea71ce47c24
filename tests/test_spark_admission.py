"""Admission control's record scans asked for a micro-batch ahead (``spark_source.admission``).

What a query relies on: a planning after ``prepare_next`` admits exactly what one without it
admits, whatever happened in between (writes, a segment made again under the same name),
and its scans are answered from what was asked ahead when nothing moved.
"""

from __future__ import annotations

from typing import Any

import pytest

from readergroup.format.events import encode_event
from segmentstore import ManualClock, SegmentStore
from segmentstore.client import EmbeddedClient
from segmentstore.results import RecordScan
from spark_source.admission import Admission, Limit
from spark_source.offsets import SourceOffset
from spark_source.options import parse_source_options
from spark_source.planner import Planner


class _CountingScans(EmbeddedClient):
    """An embedded client that counts ``scan_records`` calls."""

    def __init__(self, store: SegmentStore) -> None:
        super().__init__(store)
        self.scans = 0

    def scan_records(self, name: str, offset: int, max_length: int, max_records: int | None = None) -> Any:
        self.scans += 1
        return super().scan_records(name, offset, max_length, max_records)


def _planner(client: EmbeddedClient) -> Planner:
    opts = parse_source_options(
        {"endpoint": "127.0.0.1:1", "stream": "s/a", "startingPosition": "earliest"}, streaming=True
    )
    return Planner(client, opts)


def _fill(clock: ManualClock, c: EmbeddedClient, n: int, size: int = 30) -> None:
    for seg in sorted(s.name for s in c.get_stream("s/a").active_segments):
        for i in range(n // 100):
            clock.advance(1)
            c.append(seg, b"".join(encode_event(f"k{j}", bytes((i + j) % size), i) for j in range(100)))


def _cuts(offset: SourceOffset) -> dict[str, int]:
    return dict(offset.streams["s/a"].positions)


@pytest.mark.parametrize("limit", [Limit(max_events=2_500), Limit(max_bytes=60_000), Limit(2_000, 50_000)])
def test_a_planning_after_scanning_ahead_admits_the_same_and_asks_the_store_nothing(limit: Limit) -> None:
    clock = ManualClock(1_000_000)
    with SegmentStore(clock=clock) as store:
        c = _CountingScans(store)
        c.create_stream("s/a", 3)
        _fill(clock, c, 20_000)
        ahead, plain = _planner(c), _planner(EmbeddedClient(store))
        a = ahead.next_offset(ahead.initial_offset(), limit, None)  # the first batch: the watermark only
        p = plain.next_offset(plain.initial_offset(), limit, None)
        batches = 0
        while True:
            ahead.prepare_next(a, limit)
            before = c.scans
            a2, p2 = ahead.next_offset(a, limit, None), plain.next_offset(p, limit, None)
            assert a2.to_dict() == p2.to_dict()
            if a2 is a:
                break
            assert c.scans == before, "the planning asked the store for a scan asked ahead"
            ahead._check()
            a, p = a2, p2
            batches += 1
        assert batches >= 8


def test_writes_between_scanning_ahead_and_the_planning_change_nothing_admitted() -> None:
    """More bytes arrive after the scans ahead: the planning goes on from their answers, equal to
    a planning without them, and asks the store only past them."""
    clock = ManualClock(1_000_000)
    limit = Limit(max_events=3_000)
    with SegmentStore(clock=clock) as store:
        c = _CountingScans(store)
        c.create_stream("s/a", 2)
        _fill(clock, c, 2_000)
        ahead, plain = _planner(c), _planner(EmbeddedClient(store))
        a = ahead.next_offset(ahead.initial_offset(), limit, None)
        p = plain.next_offset(plain.initial_offset(), limit, None)
        for round_ in range(6):
            ahead.prepare_next(a, limit)
            _fill(clock, c, 400 + 300 * round_, size=10 + round_)
            a, p = ahead.next_offset(a, limit, None), plain.next_offset(p, limit, None)
            assert a.to_dict() == p.to_dict()
        assert ahead._admission.hits > 0


def test_a_segment_made_again_under_its_name_is_scanned_again() -> None:
    """Answers are kept with the segment's creation time: a segment deleted and created again with
    the same name (other bytes) is walked anew."""
    clock = ManualClock(1_000_000)
    with SegmentStore(clock=clock) as store:
        c = EmbeddedClient(store)
        c.create_segment("x/y/0")
        c.append("x/y/0", b"".join(encode_event("k", bytes(10), 1) for _ in range(50)))
        adm = Admission(c, lambda stream: False)
        ends = {"x/y": {"x/y/0": 0}}
        created = {"x/y/0": c.get_info("x/y/0").creation_time}
        adm.prepare(ends, {("x/y", "x/y/0"): c.get_info("x/y/0").length}, Limit(max_events=20), created)
        c.delete("x/y/0")
        clock.advance(10)
        c.create_segment("x/y/0")
        c.append("x/y/0", b"".join(encode_event("key", bytes(40), 1) for _ in range(50)))
        info = c.get_info("x/y/0")
        again = {"x/y": {"x/y/0": 0}}
        adm.admit(again, {("x/y", "x/y/0"): info.length}, Limit(max_events=20), {"x/y/0": info.creation_time})
        assert adm.hits == 0
        assert again["x/y"]["x/y/0"] == c.scan_records("x/y/0", 0, info.length, 20).end


def test_a_kept_answer_serves_as_a_prefix_or_not_at_all() -> None:
    """A kept scan answers a later one from the same offset only where it fits in its bytes and records."""
    clock = ManualClock(1_000_000)
    with SegmentStore(clock=clock) as store:
        c = _CountingScans(store)
        c.create_segment("x/y/0")
        c.append("x/y/0", b"".join(encode_event("k", bytes(10), 1) for _ in range(100)))
        length = c.get_info("x/y/0").length
        adm = Admission(c, lambda stream: False)
        adm._created = {"x/y/0": c.get_info("x/y/0").creation_time}
        first = adm._scan("x/y/0", 0, length, 40)
        assert (first.records, c.scans) == (40, 1)
        assert adm._scan("x/y/0", 0, length, 60) == first  # a prefix of the larger scan
        assert adm._scan("x/y/0", 0, first.end, 40) == first
        assert c.scans == 1 and adm.hits == 2
        thirty = c.scan_records("x/y/0", 0, length, 30)
        assert adm._scan("x/y/0", 0, length, 30) == RecordScan(0, thirty.end, 30)  # asked: 40 do not fit
        assert adm._scan("x/y/0", 0, first.end - 1, None).records == 39  # does not fit: asked
        assert adm.hits == 2
