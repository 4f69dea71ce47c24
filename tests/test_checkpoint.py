"""Checkpoints: positions and watermarks of every segment, JSON, and resetting a group to one."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from readergroup.config import ReaderGroupConfig, TimeDomain
from readergroup.errors import (
    CheckpointAbortedError,
    DuplicateCheckpointError,
    InvalidCheckpointError,
    MaxCheckpointsExceededError,
)
from readergroup.group_state.checkpoint import Checkpoint, ReaderPosition, SegmentPosition
from readergroup.reading.group import ReaderGroup
from readergroup.reading.reader import EventReader, ReadKind
from readergroup.writing.writer import EventWriter
from segmentstore import ManualClock
from segmentstore.client import SegmentStoreClient

S = "test/checkpoint"


def _group(client: SegmentStoreClient, clock: ManualClock, segments: int = 2) -> ReaderGroup:
    client.create_stream(S, segments)
    cfg = ReaderGroupConfig((S,), time_domain=TimeDomain.INGESTION_TIME, position_report_interval_ms=0)
    return ReaderGroup("g", cfg, client, clock)


def _write(client: SegmentStoreClient, clock: ManualClock, n: int, prefix: str = "e") -> None:
    w = EventWriter(client, S)
    for i in range(n):
        clock.advance(2)
        w.write_event(f"k{i % 5}", f"{prefix}{i}".encode())
    w.close()


def _events(reader: EventReader, n: int | None = None) -> list[bytes]:
    """Payloads of the next ``n`` events (all, if None), skipping watermarks and markers."""
    out: list[bytes] = []
    while n is None or len(out) < n:
        r = reader.read_next_event()
        if r.kind is ReadKind.EMPTY:
            break
        if r.is_event and r.payload is not None:
            out.append(r.payload)
    return out


_names = st.text("abcxyz/.#0123456789", min_size=1, max_size=12)
_positions = st.lists(
    st.builds(
        SegmentPosition, st.just("s/t"), _names, st.integers(0, 2**62), st.integers(-(2**63), 2**63 - 1)
    ),
    unique_by=lambda p: p.segment,
    max_size=6,
)


@given(_positions, st.integers(0, 1_000), st.text(min_size=1, max_size=10))
def test_checkpoints_and_reader_positions_round_trip_through_json(
    positions: list[SegmentPosition], epoch: int, name: str
) -> None:
    cp = Checkpoint(name, "group", epoch, ("s/t",), tuple(positions))
    back = Checkpoint.from_json(cp.to_json())
    assert back == cp
    assert back.watermark == min((p.watermark for p in positions), default=None)
    assert back.as_dict() == {p.segment: p.offset for p in positions}
    (cut,) = back.stream_cuts()
    assert cut.stream == "s/t" and cut.as_dict() == back.as_dict()
    rp = ReaderPosition("r", epoch, tuple(positions))
    assert ReaderPosition.from_json(rp.to_json()) == rp


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        '{"name": "c"}',
        '{"name": "c", "group": "g", "epoch": 0, "streams": ["s/t"], "positions": [["s/t", "x", -1, 0]]}',
        '{"name": "c", "group": "g", "epoch": 0, "streams": ["s/t"], "positions": [["s/t", "x", 1]]}',
        '{"name": "c", "group": "g", "epoch": 0, "streams": ["s/t"], "positions": [["u/v", "x", 1, 2]]}',
        '{"name": "c", "group": "g", "epoch": 0, "streams": ["s/t"],'
        ' "positions": [["s/t", "x", 1, 2], ["s/t", "x", 3, 4]]}',
        '{"name": "", "group": "g", "epoch": 0, "streams": [], "positions": []}',
        '{"name": "c", "group": "g", "epoch": 0, "streams": ["s/t"], "positions": [["s/t", "x", "1", 2]]}',
    ],
)
def test_malformed_checkpoints_are_rejected_with_a_clear_error(text: str) -> None:
    with pytest.raises(InvalidCheckpointError):
        Checkpoint.from_json(text)


def test_a_checkpoint_holds_each_readers_positions_at_its_marker_and_the_watermarks_there(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    group = _group(client, clock)
    _write(client, clock, 60)
    a, b = group.create_reader("a"), group.create_reader("b")
    before_a, before_b = _events(a, 10), _events(b, 10)
    future = group.initiate_checkpoint("cp")
    got_a = [a.read_next_event() for _ in range(6)]  # a reaches the checkpoint and reads on
    assert got_a[0].is_checkpoint and got_a[0].checkpoint_name == "cp"
    after_a = [r.payload for r in got_a[1:] if r.payload is not None]
    assert not future.done()  # b has not reached it yet
    r = b.read_next_event()
    assert r.is_checkpoint
    cp = future.result(timeout=0)
    assert cp.name == "cp" and cp.group == "g" and cp.epoch == 0 and cp.streams == (S,)
    for p in cp.positions:
        assert p.watermark == client.watermark_at(p.segment, p.offset)
    rest = _events(a) + _events(b)
    # resetting to the checkpoint replays exactly what was read after each reader's marker
    group.reset_to(cp)
    replay = _events(a) + _events(b)
    assert sorted(replay) == sorted(after_a + rest)
    assert not set(replay) & set(before_a + before_b)
    assert len(before_a + before_b + after_a + rest) == 60
    group._check()


def test_at_most_max_outstanding_checkpoints_queue_and_one_more_changes_nothing(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    """Pravega's ``maxOutstandingCheckpointRequest`` (default 3; 2 here): one more is refused, named,
    and not queued, in every replica of the group; once the reader reached one, a new one is taken."""
    assert ReaderGroupConfig((S,)).max_outstanding_checkpoints == 3
    client.create_stream(S, 2)
    cfg = ReaderGroupConfig((S,), time_domain=TimeDomain.INGESTION_TIME, max_outstanding_checkpoints=2)
    group = ReaderGroup("g", cfg, client, clock)
    _write(client, clock, 10)
    r = group.create_reader("r")
    futures = [group.initiate_checkpoint(n) for n in ("one", "two")]
    with pytest.raises(MaxCheckpointsExceededError, match=r"'three'.*'one', 'two'.*=2"):
        group.initiate_checkpoint("three")
    other = ReaderGroup.open("g", client, clock)  # another process's replica, joined by name
    with pytest.raises(MaxCheckpointsExceededError):
        other.initiate_checkpoint("three")
    x = r.read_next_event()
    while not x.is_checkpoint:
        x = r.read_next_event()
    assert x.checkpoint_name == "one" and futures[0].result(timeout=0).name == "one"
    # "one" is done: room for one more, also from the other replica, which has not seen it yet
    # (a replica refuses only once it has caught up with the log)
    late = other.initiate_checkpoint("three")
    names = [x.checkpoint_name for x in (r.read_next_event() for _ in range(40)) if x.is_checkpoint]
    assert names == ["two", "three"]
    assert late.result(timeout=0).name == "three"
    group._check()


def test_checkpoints_queue_and_names_are_unique_per_epoch(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    group = _group(client, clock)
    _write(client, clock, 10)
    r = group.create_reader("r")
    first, second = group.initiate_checkpoint("one"), group.initiate_checkpoint("two")
    with pytest.raises(DuplicateCheckpointError):
        group.initiate_checkpoint("one")
    names = []
    for _ in range(30):
        x = r.read_next_event()
        if x.is_checkpoint:
            names.append(x.checkpoint_name)
    assert names == ["one", "two"]
    assert first.result(timeout=0).name == "one" and second.result(timeout=0).name == "two"
    assert first.result().as_dict() == second.result().as_dict()  # nothing read between the markers


def test_a_reader_going_offline_does_not_block_a_checkpoint(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    group = _group(client, clock)
    _write(client, clock, 20)
    a, b = group.create_reader("a"), group.create_reader("b")
    _events(a, 3)
    _events(b, 3)
    future = group.initiate_checkpoint("cp")
    assert a.read_next_event().is_checkpoint
    late = group.create_reader("late")  # joins during the checkpoint: gets nothing until it is done
    assert _events(late) == [] and not group.state.segments_of("late")
    group.reader_offline("b")
    cp = future.result(timeout=0)
    assert len(cp.positions) == 2
    assert _events(late)  # now it may acquire b's segment


def test_a_reset_aborts_pending_checkpoints_and_a_group_without_readers_checkpoints_at_once(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    group = _group(client, clock)
    _write(client, clock, 10)
    done = group.initiate_checkpoint("now")
    assert done.result(timeout=0).as_dict() == client.get_head_cut(S).as_dict()
    group.create_reader("r")
    pending = group.initiate_checkpoint("later")
    group.reset_to(client.get_tail_cut(S))
    with pytest.raises(CheckpointAbortedError):
        pending.result(timeout=0)
    group.initiate_checkpoint("now")  # names are per epoch
