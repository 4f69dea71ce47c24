"""Reader-group defects found in operation, one regression test each (issue 12).

Each runs over the embedded and the remote client (the ``client`` fixture).
"""

from __future__ import annotations

import pytest

from readergroup.config import ReaderGroupConfig, TimeDomain
from readergroup.reading.group import ReaderGroup
from readergroup.reading.reader import EventRead, EventReader, ReadKind
from readergroup.writing.writer import EventWriter
from segmentstore import ManualClock, StreamCut, TickingClock
from segmentstore.client import SegmentStoreClient

S = "test/defects"


def _group(client: SegmentStoreClient, clock: ManualClock, name: str = "g", **opts: object) -> ReaderGroup:
    o: dict[str, object] = {"time_domain": TimeDomain.INGESTION_TIME, "position_report_interval_ms": 0}
    o.update(opts)
    return ReaderGroup(name, ReaderGroupConfig((S,), **o), client, clock)  # type: ignore[arg-type]


def _events(reader: EventReader, limit: int = 10_000) -> list[EventRead]:
    out = []
    for _ in range(limit):
        r = reader.read_next_event(timeout_ms=0)
        if r.kind is ReadKind.EMPTY:
            return out
        if r.is_event:
            out.append(r)
    raise AssertionError("the reader never ran dry")


def test_merge_successors_on_a_ticking_clock(ticking: tuple[TickingClock, SegmentStoreClient]) -> None:
    """Defect 1: predecessors of a merge sealed in different milliseconds."""
    clock, c = ticking
    c.create_stream(S, 2)
    w = EventWriter(c, S)
    for i in range(20):
        w.write_event(f"k{i}", b"before")
    w.flush()  # writes are asynchronous: stored before the merge
    a, b = c.get_stream(S).active_segments
    merged = c.scale_stream(S, [a.name, b.name], [(0.0, 1.0)])[0]
    for i in range(5):
        w.write_event(f"k{i}", b"after")
    w.flush()
    group = _group(c, clock)
    reader = group.create_reader("r")
    got = _events(reader)
    assert [r.payload for r in got].count(b"after") == 5 and len(got) == 25
    assert {r.segment for r in got if r.payload == b"after"} == {merged.name}
    group._check()


def test_close_after_a_checkpoint_marker_does_not_redeliver(
    client: SegmentStoreClient, clock: ManualClock
) -> None:
    """Defect 5: a reader past a checkpoint's marker that closes keeps what it returned."""
    client.create_stream(S, 2)
    w = EventWriter(client, S)
    for i in range(10):
        clock.advance(1)
        w.write_event(f"k{i}", f"a{i}".encode())
    w.flush()
    group = _group(client, clock)
    r1, r2 = group.create_reader("r1"), group.create_reader("r2")
    first = _events(r1) + _events(r2)
    assert len(first) == 10
    cp = group.initiate_checkpoint("cp")
    assert r1.read_next_event(timeout_ms=0).is_checkpoint
    for i in range(10):
        clock.advance(1)
        w.write_event(f"k{i}", f"b{i}".encode())
    w.flush()
    after_marker = _events(r1)  # past the marker: r1 holds back its reports until cp completes
    r1.close()
    assert r2.read_next_event(timeout_ms=0).is_checkpoint
    assert cp.result(5).name == "cp"
    rest = _events(r2)
    payloads = [r.payload for r in first + after_marker + rest]
    assert sorted(payloads) == sorted(payloads and set(payloads)), "an event was delivered twice"
    assert len(payloads) == 20
    group._check()


def test_empty_means_nothing_readable_now(client: SegmentStoreClient, clock: ManualClock) -> None:
    """Defect 6: EMPTY only when nothing is readable, past empty sealed segments and marker-only blocks."""
    client.create_stream(S, 1)
    (seg,) = client.get_stream(S).active_segments
    for _ in range(3):  # empty sealed segments, one after the other
        (seg,) = client.scale_stream(S, [seg.name], [(0.0, 1.0)])
    w = EventWriter(client, S)
    for _ in range(50):
        w.note_time(clock.advance(1))  # marker-only blocks
    w.write_event("k", b"x")
    w.flush()
    group = _group(client, clock, read_buffer_bytes=64)
    reader = group.create_reader("r")
    seen = []
    for _ in range(100):
        r = reader.read_next_event(timeout_ms=0)
        if r.kind is ReadKind.EMPTY:
            break
        seen.append(r)
    assert [r.payload for r in seen if r.is_event] == [b"x"]


def test_is_event_is_a_property_like_the_others(client: SegmentStoreClient, clock: ManualClock) -> None:
    """Defect 7: ``if r.is_event:`` must not treat a watermark as an event."""
    client.create_stream(S, 1)
    EventWriter(client, S).write_event("k", b"x")
    group = _group(client, clock)
    reader = group.create_reader("r")
    kinds = []
    for _ in range(5):
        r = reader.read_next_event(timeout_ms=0)
        kinds.append((r.kind, bool(r.is_event), r.is_watermark, r.is_checkpoint))
        with pytest.raises(TypeError):
            r.is_event()  # type: ignore[operator]
        if r.kind is ReadKind.EMPTY:
            break
    for kind, ev, wm, ck in kinds:
        assert ev == (kind is ReadKind.EVENT) and wm == (kind is ReadKind.WATERMARK)
        assert ck == (kind is ReadKind.CHECKPOINT) and ev + wm + ck <= 1


def _key_in(low: float, high: float) -> str:
    from readergroup.format.routing import key_hash

    return next(k for k in (f"key{i}" for i in range(100_000)) if low <= key_hash(k) < high)


@pytest.mark.parametrize("restore", ["reset_to", "new_group"])
def test_per_key_order_holds_after_a_restore_across_split_then_merge(
    client: SegmentStoreClient, clock: ManualClock, restore: str
) -> None:
    """Defect 2: a checkpoint leaves out future segments; a merge successor must still wait."""
    client.create_stream(S, 2)
    a, b = client.get_stream(S).active_segments  # [0, .5), [.5, 1)
    w = EventWriter(client, S)
    left = _key_in(0.0, 0.5)
    k = _key_in(0.5625, 0.75)  # the key whose order is checked
    for i in range(30):
        clock.advance(1)
        w.write_event(left, f"a{i}".encode())
    w.flush()
    b1, b2 = client.scale_stream(S, [b.name], [(0.5, 0.75), (0.75, 1.0)])
    (m,) = client.scale_stream(S, [a.name, b1.name], [(0.0, 0.75)])  # b1 is empty
    numbered: list[bytes] = []

    def write_k() -> None:
        clock.advance(1)
        numbered.append(f"k{len(numbered)}".encode())
        w.write_event(k, numbered[-1]).result(10)

    write_k()  # into m: it needs all of a first
    # a group that has read b1 (empty): m is a future segment waiting for a
    cut = [(a.name, 0), (b1.name, 0), (b2.name, 0)]
    group = _group(client, clock, starting_cuts=(StreamCut(S, tuple(cut)),), read_buffer_bytes=64)
    reader = group.create_reader("r")
    for _ in range(3):
        reader.read_next_event(timeout_ms=0)
    assert any(r.status == "future" and r.segment.name == m.name for r in group.segments())
    cp = group.initiate_checkpoint("cp")
    assert reader.read_next_event(timeout_ms=0).is_checkpoint
    checkpoint = cp.result(5)
    assert m.name not in {p.segment for p in checkpoint.positions}
    # the stream moves on: m splits twice; b2 splits and merges again, then merges with m's part
    _m1, m2 = client.scale_stream(S, [m.name], [(0.0, 0.375), (0.375, 0.75)])
    write_k()
    _m21, m22 = client.scale_stream(S, [m2.name], [(0.375, 0.5625), (0.5625, 0.75)])
    write_k()
    c1, c2 = client.scale_stream(S, [b2.name], [(0.75, 0.875), (0.875, 1.0)])
    (c,) = client.scale_stream(S, [c1.name, c2.name], [(0.75, 1.0)])
    (_z,) = client.scale_stream(S, [m22.name, c.name], [(0.5625, 1.0)])
    write_k()
    if restore == "reset_to":
        group.reset_to(checkpoint)
        readers = [reader, group.create_reader("r2")]
    else:
        reader.close()
        group = _group(client, clock, "g2", starting_cuts=checkpoint.stream_cuts(), read_buffer_bytes=64)
        readers = [group.create_reader("q1"), group.create_reader("q2")]
    got: list[bytes] = []
    for _ in range(200):
        for r in readers:
            e = r.read_next_event(timeout_ms=0)
            if e.is_event and e.routing_key == k:
                assert e.payload is not None
                got.append(e.payload)
    assert got == numbered, "events of one key out of order after a restore"
    group._check()
