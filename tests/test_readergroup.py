"""Reader groups: sharing segments, crashes, scaling, futures, resets (epochs), idle progress, metrics."""

from __future__ import annotations

import pytest

from readergroup.config import ReaderGroupConfig, TimeDomain
from readergroup.errors import (
    InvalidPositionError,
    InvalidReaderGroupConfigError,
    ReaderExistsError,
    ReaderGroupExistsError,
    ReaderGroupNotFoundError,
)
from readergroup.format.events import encode_event
from readergroup.reading.group import ReaderGroup, ReaderGroupManager
from readergroup.reading.reader import EventRead, EventReader, ReadKind
from readergroup.writing.transaction import TransactionalEventWriter
from readergroup.writing.writer import EventWriter
from segmentstore import ManualClock, SegmentStore, StreamCut, StreamNotFoundError
from segmentstore.client import SegmentStoreClient

S = "test/group"


def _config(*streams: str, **options: object) -> ReaderGroupConfig:
    opts: dict[str, object] = {"time_domain": TimeDomain.INGESTION_TIME, "position_report_interval_ms": 0}
    opts.update(options)
    return ReaderGroupConfig(streams or (S,), **opts)  # type: ignore[arg-type]


class Tracker:
    """Reads with several readers and checks docs/design.md §4 invariants 1 and 2 on every read."""

    def __init__(self, group: ReaderGroup) -> None:
        self.group = group
        self.emitted: dict[int, int] = {}  # epoch -> highest watermark any reader emitted
        self.last: dict[tuple[str, int], int] = {}  # (reader, epoch) -> its last watermark
        self.events: list[EventRead] = []
        self.group_wm = group.group_watermark
        self.group_epoch = group.epoch

    def read(self, reader: EventReader) -> EventRead:
        r = reader.read_next_event()
        assert r.epoch == self.group.epoch, "a read of an older epoch was delivered"
        if r.is_watermark:
            assert r.watermark is not None
            key = (reader.reader_id, r.epoch)
            assert r.watermark > self.last.get(key, r.watermark - 1), "watermarks must strictly ascend"
            self.last[key] = r.watermark
            self.emitted[r.epoch] = max(self.emitted.get(r.epoch, r.watermark), r.watermark)
        elif r.is_event:
            assert r.ingestion_time is not None
            assert r.ingestion_time > self.emitted.get(r.epoch, r.ingestion_time - 1), "late ingestion"
            self.events.append(r)
        gw, epoch = self.group.group_watermark, self.group.epoch
        assert gw >= self.group_wm or epoch != self.group_epoch, "the group watermark decreased"
        self.group_wm, self.group_epoch = gw, epoch
        return r

    def drain(self, *readers: EventReader, rounds: int = 50) -> None:
        for _ in range(rounds):
            idle = True
            for rd in readers:
                for _ in range(10_000):
                    r = self.read(rd)
                    if r.kind is ReadKind.EMPTY:
                        break
                    idle = False
            if idle:
                return
        raise AssertionError("the readers never ran dry")

    def payloads(self) -> list[bytes]:
        return [r.payload for r in self.events if r.payload is not None]


def _write(
    client: SegmentStoreClient, clock: ManualClock, n: int, prefix: str = "e", stream: str = S
) -> None:
    w = EventWriter(client, stream)
    for i in range(n):
        clock.advance(3)
        w.write_event(f"key{i % 11}", f"{prefix}{i}".encode())
    w.close()


def test_two_readers_share_the_segments_and_read_every_event_once(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    client.create_stream(S, 4)
    group = ReaderGroup("g", _config(), client, clock)
    a, b = group.create_reader("a"), group.create_reader("b")
    t = Tracker(group)
    _write(client, clock, 200)
    t.drain(a, b)
    assert sorted(t.payloads()) == sorted(f"e{i}".encode() for i in range(200))
    assert len(group.state.segments_of("a")) == len(group.state.segments_of("b")) == 2
    c = group.create_reader("c")  # a third reader joins: the group rebalances to 2/1/1
    t.drain(a, b, c)
    sizes = sorted(len(group.state.segments_of(r)) for r in "abc")
    assert sizes == [1, 1, 2]
    _write(client, clock, 50, prefix="f")
    t.drain(a, b, c)
    assert sorted(t.payloads()) == sorted(
        [f"e{i}".encode() for i in range(200)] + [f"f{i}".encode() for i in range(50)]
    )
    group._check()


def test_a_caught_up_readers_syncs_leave_the_state_alone_until_the_group_changes(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    """Syncs with nothing to report append nothing and move no layout (only reports came), and a
    reader that skipped them still follows the next change: a reader joining, new events."""
    client.create_stream(S, 4)
    group = ReaderGroup("g", _config(), client, clock)
    a = group.create_reader("a")
    t = Tracker(group)
    _write(client, clock, 40)
    t.drain(a)
    log, model = group.state.segment, group.state.model
    length, layout = client.get_info(log).length, model.layout
    for _ in range(5):
        clock.advance(10)
        assert len(a.read_batch()) == 0
    assert client.get_info(log).length == length and group.state.model.layout == layout
    _write(client, clock, 10, prefix="r")  # reports only: the layout stands still
    t.drain(a)
    assert group.state.model.layout == layout and client.get_info(log).length > length
    b = group.create_reader("b")  # a new member and a rebalance: the layout moves
    assert group.state.model.layout > layout
    for _ in range(3):  # nothing new to read: still, a hands half of its segments to b
        clock.advance(10)
        a.read_batch()
        b.read_batch()
    assert len(group.state.segments_of("a")) == len(group.state.segments_of("b")) == 2
    _write(client, clock, 40, prefix="f")
    t.drain(a, b)
    expected = [f"{p}{i}".encode() for p, n in (("e", 40), ("r", 10), ("f", 40)) for i in range(n)]
    assert sorted(t.payloads()) == sorted(expected)
    group._check()


@pytest.mark.parametrize(
    ("client", "segments", "readers"),
    [("embedded", 9, 4), ("remote", 9, 4), ("embedded", 4_096, 1_000), ("remote", 410, 100)],
    indirect=["client"],
)
def test_readers_that_joined_together_hold_even_shares_after_one_round_of_syncs(
    clock: ManualClock, client: SegmentStoreClient, segments: int, readers: int
) -> None:
    """Pravega's acquire count (``round(segments / readers)``, then one each while any is left):
    every reader holds a share after one round, none is left with nothing to read while others
    hold ``ceil`` (with ``ceil``, 819 of 1,000 readers took 5 of 4,096 segments and 180 took none,
    then got them one release at a time: still rebalancing after 400 rounds). Over the wire at a
    tenth of the readers: each reader's replica reads every other reader's updates, so the work
    grows with the square of the readers (a minute at 1,000 on two cores), and the counts are
    the group state's, the same over either client."""
    client.create_stream(S, segments)
    group = ReaderGroup("g", _config(), client, clock)
    rs = [group.create_reader(f"r{i:04d}") for i in range(readers)]
    for _ in range(2):  # the first syncs hand out round(share) each, the second the rest one each
        for r in rs:
            r.read_batch()
    sizes = [len(group.state.segments_of(r.reader_id)) for r in rs]
    assert sum(sizes) == segments
    assert max(sizes) - min(sizes) <= 1, sorted(set(sizes))
    layout = group.state.model.layout
    for r in rs:  # settled: another round moves nothing
        r.read_batch()
    assert group.state.model.layout == layout


def test_a_crashed_readers_segments_are_redelivered_from_its_last_report(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    client.create_stream(S, 1)
    _write(client, clock, 30)
    # reports only when caught up (or at the interval), so the crash loses unreported progress
    group = ReaderGroup("g", _config(position_report_interval_ms=10**9), client, clock)
    a = group.create_reader("a")
    t = Tracker(group)
    got = [t.read(a) for _ in range(11)]
    assert got[0].is_watermark and all(r.is_event for r in got[1:])
    group.reader_offline("a")  # crash: nothing reported since the acquisition
    b = group.create_reader("b")
    t.drain(b)
    payloads = t.payloads()
    assert payloads[:10] == payloads[10:20]  # redelivered from position 0 ...
    assert sorted(set(payloads)) == sorted(f"e{i}".encode() for i in range(30))


def test_an_offline_reader_with_its_last_position_is_resumed_there(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    client.create_stream(S, 2)
    _write(client, clock, 40)
    group = ReaderGroup("g", _config(position_report_interval_ms=10**9), client, clock)
    a = group.create_reader("a")
    t = Tracker(group)
    for _ in range(15):
        t.read(a)
    pos = a.get_position()
    group.reader_offline("a", pos)
    for row in group.segments():
        assert row.owner is None and row.position == pos.as_dict()[row.segment.name]
        assert row.watermark == client.watermark_at(row.segment.name, row.position)
    b = group.create_reader("b")
    t.drain(b)
    assert sorted(t.payloads()) == sorted(f"e{i}".encode() for i in range(40))  # each exactly once
    with pytest.raises(InvalidPositionError):
        group.reader_offline("b", {"no/such/0.#epoch.0": 5})


def test_splits_and_merges_keep_per_key_order_and_successors_wait_for_all_predecessors(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    info = client.create_stream(S, 2)
    lo, hi = info.active_segments
    group = ReaderGroup("g", _config(), client, clock)
    a, b = group.create_reader("a"), group.create_reader("b")
    t = Tracker(group)
    w = EventWriter(client, S)
    n = 0

    def burst(k: int) -> None:
        nonlocal n
        for _ in range(k):
            clock.advance(2)
            w.write_event(f"key{n % 13}", f"{n}".encode())
            n += 1
        w.flush()

    burst(40)
    t.drain(a, b)
    left, right = client.scale_stream(S, [lo.name], [(0.0, 0.25), (0.25, 0.5)])  # split
    burst(40)
    merged = client.scale_stream(S, [right.name, hi.name], [(0.25, 1.0)])[0]  # merge
    burst(40)
    # only one predecessor of the merged segment is finished: it is a future segment
    for _ in range(3):
        t.read(a)
    futures = [r for r in group.segments() if r.status == "future"]
    assert [r.segment.name for r in futures] in ([merged.name], [])
    t.drain(a, b)
    assert sorted(int(p) for p in t.payloads()) == list(range(n))
    by_key: dict[str, list[int]] = {}
    for r in t.events:
        assert r.routing_key is not None and r.payload is not None
        by_key.setdefault(r.routing_key, []).append(int(r.payload))
    for key, numbers in by_key.items():
        assert numbers == sorted(numbers), f"events of {key} out of order"
    assert {r.segment.name for r in group.segments()} == {left.name, merged.name}
    group._check()


def test_a_successor_never_lowers_the_group_watermark(
    clock: ManualClock, client: SegmentStoreClient, store: SegmentStore
) -> None:
    info = client.create_stream(S, 2)
    lo, hi = info.active_segments
    group = ReaderGroup("g", _config(), client, clock)
    r = group.create_reader("r")
    t = Tracker(group)
    clock.advance(100)
    (succ,) = client.scale_stream(S, [lo.name], [(0.0, 0.5)])  # empty successor created now
    clock.advance(10_000)
    client.append(hi.name, encode_event("x", b"x"))  # the other segment moves far ahead
    t.drain(r)  # (the tracker checks the group watermark never decreases)
    final = client.get_info(lo.name).last_write_time - 1  # the sealed predecessor's final watermark
    row = next(x for x in group.segments() if x.segment.name == succ.name)
    assert row.watermark >= final and group.group_watermark == final
    clock.advance(store.config.max_watermark_lag_ms)
    assert succ.name in store.advance_idle_watermarks()  # the empty successor's tail moves on
    t.drain(r)
    assert group.group_watermark == clock.now() - 1


def test_idle_segments_advance_and_a_caught_up_group_follows_within_one_read(
    clock: ManualClock, client: SegmentStoreClient, store: SegmentStore
) -> None:
    client.create_stream(S, 3)
    group = ReaderGroup("g", _config(position_report_interval_ms=10**9), client, clock)
    a, b = group.create_reader("a"), group.create_reader("b")
    t = Tracker(group)
    _write(client, clock, 9)
    t.drain(a, b)
    cfg = store.config
    for _ in range(3):
        clock.advance(cfg.max_watermark_lag_ms + cfg.polling_period_ms)
        store.advance_idle_watermarks()
        for rd in (a, b):
            t.read(rd)
        bound = clock.now() - (cfg.max_watermark_lag_ms + cfg.polling_period_ms)
        assert group.group_watermark >= bound  # docs/design.md §4.3
        assert max(t.last.values()) >= bound


def test_reset_to_the_head_starts_a_new_epoch_and_drops_buffered_reads(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    client.create_stream(S, 2)
    _write(client, clock, 20)
    group = ReaderGroup("g", _config(), client, clock)
    r = group.create_reader("r")
    t = Tracker(group)
    for _ in range(6):
        t.read(r)  # the reader has more buffered
    old_wm = t.last[("r", 0)]
    epoch = group.reset_to(client.get_head_cut(S))
    assert epoch == 1 == group.epoch
    first = t.read(r)
    assert first.epoch == 1 and first.is_watermark and first.watermark is not None
    assert first.watermark <= old_wm  # a new epoch may start lower (PIP-194)
    t.events.clear()
    t.drain(r)
    assert sorted(t.payloads()) == sorted(f"e{i}".encode() for i in range(20))


def test_reset_to_the_tail_delivers_only_what_is_written_afterwards(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    client.create_stream(S, 2)
    _write(client, clock, 10)
    group = ReaderGroup("g", _config(), client, clock)
    r = group.create_reader("r")
    t = Tracker(group)
    t.read(r)
    group.reset_to([client.get_tail_cut(S)])
    _write(client, clock, 5, prefix="new")
    t.events.clear()
    t.drain(r)
    assert sorted(t.payloads()) == sorted(f"new{i}".encode() for i in range(5))


def test_a_bad_reset_target_leaves_the_group_as_it_was(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    info = client.create_stream(S, 2)
    client.create_stream("test/other", 1)
    _write(client, clock, 5)
    group = ReaderGroup("g", _config(), client, clock)
    before = group.segments()
    lo, hi = (s.name for s in info.active_segments)
    (succ,) = client.scale_stream(S, [lo, hi], [(0.0, 1.0)])
    bad = [
        client.get_head_cut("test/other"),  # a stream the group does not read
        StreamCut(S, ((lo, 0), (succ.name, 0))),  # overlapping key ranges
        StreamCut(S, ((lo, 10**9),)),  # beyond the segment's length
    ]
    for cut in bad:
        with pytest.raises(InvalidPositionError):
            group.reset_to(cut)
    assert group.epoch == 0 and group.segments() == before


def test_group_metrics_report_lag_unread_bytes_and_late_events(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    client.create_stream(S, 2)
    group = ReaderGroup("g", _config(max_event_time_lag_ms=0), client, clock)
    r = group.create_reader("r")
    w = EventWriter(client, S)
    for i in range(10):
        clock.advance(5)
        w.write_event(f"k{i}", b"x" * 10, event_time=0)  # event time far in the past: late once a wm exists
    w.close()
    m = group.metrics()
    total = sum(client.get_info(s.name).length for s in client.get_stream(S).active_segments)
    assert m.unread_bytes == total and m.events_delivered == 0
    t = Tracker(group)
    t.drain(r)
    clock.advance(1_000)
    m = group.metrics()
    assert m.unread_bytes == 0 and m.events_delivered == 10
    assert m.group_watermark == group.group_watermark
    assert m.watermark_lag_ms == clock.now() - group.group_watermark
    assert all(s.watermark_lag_ms == clock.now() - s.watermark for s in m.segments)
    assert m.late_events == 10 and m.late_ingestion_events == 0
    assert m.as_row()["segments"] == 2 and m.readers == ("r",)


def test_transactions_are_delivered_once_committed_and_never_when_aborted(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    client.create_stream(S, 2)
    group = ReaderGroup("g", _config(), client, clock)
    r = group.create_reader("r")
    t = Tracker(group)
    tw = TransactionalEventWriter(client, S)
    committed, aborted = tw.begin_txn(), tw.begin_txn()
    for i in range(6):
        clock.advance(1)
        committed.write_event(f"k{i}", f"c{i}".encode())
        aborted.write_event(f"k{i}", f"a{i}".encode())
    t.drain(r)
    assert t.payloads() == []
    clock.advance(50)
    committed.commit()
    aborted.abort()
    commit_time = clock.now()
    t.drain(r)
    assert sorted(t.payloads()) == sorted(f"c{i}".encode() for i in range(6))
    assert {e.ingestion_time for e in t.events} == {commit_time}  # a merge is one temporal operation


def test_the_group_watermark_is_the_minimum_over_all_its_streams(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    client.create_stream(S, 1)
    client.create_stream("test/second", 1)
    group = ReaderGroup("g", _config(S, "test/second"), client, clock)
    r = group.create_reader("r")
    t = Tracker(group)
    _write(client, clock, 5)
    slow = clock.now()
    clock.advance(1_000)
    _write(client, clock, 5, stream="test/second")
    t.drain(r)
    assert group.group_watermark == slow - 1  # the first stream's tail holds it back
    assert len(t.events) == 10


def test_manager_config_and_membership_errors(clock: ManualClock, client: SegmentStoreClient) -> None:
    client.create_stream(S, 1)
    mgr = ReaderGroupManager(client, clock)
    g = mgr.create_reader_group("g", _config())
    assert mgr.get_reader_group("g") is g and mgr.list_reader_groups() == ["g"]
    with pytest.raises(ReaderGroupExistsError):
        mgr.create_reader_group("g", _config())
    with pytest.raises(StreamNotFoundError):
        mgr.create_reader_group("h", _config("test/missing"))
    r = g.create_reader("r")
    with pytest.raises(ReaderExistsError):
        g.create_reader("r")
    assert g.online_readers() == ["r"]
    mgr.delete_reader_group("g")
    with pytest.raises(ReaderGroupNotFoundError):
        mgr.get_reader_group("g")
    with pytest.raises(ReaderGroupNotFoundError):
        mgr.delete_reader_group("g")
    with pytest.raises(ReaderGroupNotFoundError, match="reader group 'g' was deleted"):
        r.read_next_event()
    for bad in (
        {"streams": ()},
        {"streams": ("noscope",)},
        {"streams": (S, S)},
        {"streams": (S,), "position_report_interval_ms": -1},
        {"streams": (S,), "read_buffer_bytes": 1},
        {"streams": (S,), "time_domain": "ingestion"},
        {"streams": (S,), "starting_cuts": (StreamCut("test/other", ()),)},
    ):
        with pytest.raises(InvalidReaderGroupConfigError):
            ReaderGroupConfig(**bad)  # type: ignore[arg-type]


def test_a_merge_successor_waits_for_a_predecessor_not_yet_discovered(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    """A+Y1 -> M where Y1 is a successor of B: completing A first must not make M readable."""
    a, b = client.create_stream(S, 2).active_segments
    clock.advance(1)
    y1, y2 = client.scale_stream(S, [b.name], [(0.5, 0.75), (0.75, 1.0)])
    clock.advance(1)
    (m,) = client.scale_stream(S, [a.name, y1.name], [(0.0, 0.75)])
    group = ReaderGroup("g", _config(), client, clock)
    st = group.state
    st.add_reader("r")
    assert {seg.name for seg, _, _ in st.acquire("r")} == {a.name, b.name}

    def done(seg: str) -> None:
        end = client.get_info(seg).length
        st.report("r", [(seg, end, client.watermark_at(seg, end))])
        st.complete("r", seg, client.watermark_at(seg, end))

    def status() -> dict[str, tuple[str, tuple[str, ...]]]:
        return {row.segment.name: (row.status, row.waiting_for) for row in group.segments()}

    before = group.group_watermark
    done(a.name)
    assert status()[m.name] == ("future", (y1.name,))  # Y1 is still to come (after B)
    done(b.name)
    assert status()[y1.name] == ("unassigned", ()) and status()[y2.name] == ("unassigned", ())
    assert {seg.name for seg, _, _ in st.acquire("r")} == {y1.name, y2.name}
    done(y1.name)
    assert status()[m.name] == ("unassigned", ())
    assert group.group_watermark >= before
    group._check()
