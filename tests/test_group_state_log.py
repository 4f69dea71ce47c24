"""The reader-group state log (issue 16): records, conditional updates, compaction, replicas, leases.

A group's state is a log of update batches in ``_system/_rg/<group>``; every
``ReaderGroup`` object is a replica. These tests run two replicas in one process (as two
processes would hold them), over the embedded and the remote client: conflicts and
catching up, a torn or corrupt batch never applied, a lost reply not applied twice,
compaction keeping the log bounded, joiners and laggards loading the snapshot,
checkpoints, resets and offline declarations across replicas, and reader leases.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from readergroup.config import ReaderGroupConfig, TimeDomain
from readergroup.errors import (
    GroupStateCorruptError,
    ReaderGroupExistsError,
    ReaderGroupNotFoundError,
    ReaderNotInGroupError,
)
from readergroup.group_state.checkpoint import Checkpoint
from readergroup.group_state.group_model import GroupModel
from readergroup.group_state.group_updates import (
    HEADER_BYTES,
    Acquire,
    AddReader,
    CheckpointReached,
    Complete,
    InitiateCheckpoint,
    Rebalance,
    Release,
    RemoveReader,
    Report,
    Reset,
    Snapshot,
    SuccessorPlan,
    decode_batches,
    encode_batch,
    encode_update,
)
from readergroup.group_state.state import state_segment
from readergroup.reading.group import ReaderGroup, ReaderGroupManager
from readergroup.reading.reader import EventReader, ReadKind
from readergroup.writing.writer import EventWriter
from segmentstore import ConnectionLostError, ManualClock, SegmentStore, StreamSegment
from segmentstore.client import EmbeddedClient, SegmentStoreClient

S = "test/shared"


def _config(**options: Any) -> ReaderGroupConfig:
    opts: dict[str, Any] = {"time_domain": TimeDomain.INGESTION_TIME, "position_report_interval_ms": 0}
    opts.update(options)
    return ReaderGroupConfig((S,), **opts)


def _write(client: SegmentStoreClient, clock: ManualClock, n: int, prefix: str = "e") -> list[bytes]:
    w = EventWriter(client, S)
    out = []
    for i in range(n):
        clock.advance(2)
        p = f"{prefix}{i}".encode()
        w.write_event(f"key{i % 7}", p)
        out.append(p)
    w.close()
    return out


def _drain(*readers: EventReader, rounds: int = 30) -> list[bytes]:
    got: list[bytes] = []
    for _ in range(rounds):
        idle = True
        for r in readers:
            for _ in range(10_000):
                e = r.read_next_event()
                if e.kind is ReadKind.EMPTY:
                    break
                idle = False
                if e.is_event:
                    assert e.payload is not None
                    got.append(e.payload)
        if idle:
            return got
    raise AssertionError("the readers never ran dry")


def _log_bytes(client: SegmentStoreClient, group: str) -> int:
    info = client.get_info(state_segment(group))
    return info.length - info.start_offset


# ---------------------------------------------------------------------- records
_SEG = StreamSegment("s/x", 3, 1, "s/x/3.#epoch.1", 0.25, 0.5, 1_000)
_UPDATES = [
    AddReader("r"),
    RemoveReader("r", 7, 0, None),
    RemoveReader("r", 7, 2, (("a", 1, -5),)),
    Report("r", 7, 0, (("a", 10, 99), ("b", 0, -(2**63)))),
    Complete("r", 7, 0, "a", 100, (SuccessorPlan(_SEG, ("a", "b"), 0, 5, ("b",)),)),
    Release("r", 7, 0, ("a", "b")),
    Acquire("r", 7, 0),
    Rebalance("r", 7, 1),
    InitiateCheckpoint("cp", 0),
    CheckpointReached("r", 7, 0, "cp"),
    Reset(3, ((_SEG, 4, 2**63 - 1),)),
    Snapshot({"any": [1, "x", None]}),
]


def test_every_update_round_trips_through_a_batch_frame() -> None:
    frame = encode_batch("gid", "origin", 5, _UPDATES)
    two = frame + encode_batch("gid", "origin", 6, [AddReader("q")])
    batches, used = decode_batches("seg", two, 100)
    assert used == len(two) and [b.offset for b in batches] == [100, 100 + len(frame)]
    assert list(batches[0].updates) == _UPDATES and batches[0].seq == 5 and batches[0].end == 100 + len(frame)
    cut, used_cut = decode_batches("seg", two[:-1], 100)  # a frame cut short is not a batch yet
    assert cut == batches[:1] and used_cut == len(frame)


_NAMES = st.text(max_size=12)  # any str: quotes, backslashes, control and non-ASCII characters
_INT64 = st.integers(-(2**63), 2**63 - 1)


@given(
    st.lists(
        st.builds(
            Report,
            _NAMES,
            _INT64,
            _INT64,
            st.lists(st.tuples(_NAMES, _INT64, _INT64), max_size=4).map(tuple),
        ),
        min_size=1,
        max_size=3,
    ),
    _NAMES,
    st.integers(0, 2**63 - 1),
)
def test_a_batch_of_reports_is_framed_as_the_json_of_every_other_batch(
    reports: list[Report], origin: str, seq: int
) -> None:
    """Reports (a reader's usual sync) take a shortcut to the same bytes; decoded, they are the same."""
    payload = json.dumps(
        {"g": "gid", "o": origin, "q": seq, "u": [encode_update(u) for u in reports]},
        separators=(",", ":"),
        allow_nan=False,
    ).encode()
    frame = encode_batch("gid", origin, seq, reports)
    assert frame[HEADER_BYTES:] == payload
    (batch,), _ = decode_batches("seg", frame, 0)
    assert list(batch.updates) == reports


@pytest.mark.parametrize("damage", ["crc", "magic", "version", "json"])
def test_a_corrupt_batch_is_refused_naming_its_offset(damage: str) -> None:
    frame = bytearray(encode_batch("gid", "o", 1, [AddReader("r")]))
    if damage == "crc":
        frame[-2] ^= 1
    elif damage == "magic":
        frame[0] = ord("X")
    elif damage == "version":
        frame[3] = 99
    else:
        import struct
        import zlib

        payload = b'{"g":"gid"}'
        frame = bytearray(struct.pack("<3sBII", b"RGS", 1, len(payload), zlib.crc32(payload)) + payload)
    with pytest.raises(GroupStateCorruptError, match="offset 40"):
        decode_batches("seg", bytes(frame), 40)


# ---------------------------------------------------------------------- replicas
def test_two_replicas_share_one_group_and_conflicts_serialise(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    client.create_stream(S, 4)
    a = ReaderGroup("g", _config(), client, clock)
    b = ReaderGroupManager(client, clock).get_reader_group("g")  # another process's replica
    assert b.config == a.config and b.segments() == a.segments()
    written = _write(client, clock, 120)
    ra, rb = a.create_reader("ra"), b.create_reader("rb")
    got = _drain(ra, rb)
    assert sorted(got) == sorted(written)  # exactly once, both replicas appending
    assert a.online_readers() == b.online_readers() == ["ra", "rb"]
    assert len(a.state.segments_of("ra")) == len(b.state.segments_of("rb")) == 2
    assert a.group_watermark == b.group_watermark and a.segments() == b.segments()
    assert a.state.model.to_obj() == b.state.model.to_obj()
    assert a.state.synchronizer.stats.conflicts + b.state.synchronizer.stats.conflicts > 0
    a._check()
    b._check()
    with pytest.raises(ReaderGroupExistsError):
        ReaderGroup("g", _config(), client, clock)
    with pytest.raises(ReaderGroupNotFoundError):
        ReaderGroup.open("nope", client, clock)


def test_the_log_stays_bounded_and_joiners_and_laggards_load_its_snapshot(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    client.create_stream(S, 3)
    a = ReaderGroup("g", _config(state_snapshot_interval=5), client, clock)
    lag = ReaderGroup.open("g", client, clock)  # never refreshed while the log is compacted
    r = a.create_reader("r")
    sizes = []
    for round_ in range(12):
        _write(client, clock, 10, prefix=f"r{round_}-")
        _drain(r)
        sizes.append(_log_bytes(client, "g"))
    sync = a.state.synchronizer
    assert sync.stats.snapshots_written >= 5
    assert max(sizes[4:]) < 3 * min(sizes[4:]) + 2_000, sizes  # bounded, not growing with the rounds
    assert client.get_info(state_segment("g")).start_offset > 0
    joiner = ReaderGroup.open("g", client, clock)
    assert joiner.state.model.to_obj() == a.state.model.to_obj()
    assert lag.segments() == a.segments()  # it fell behind a truncation: reloaded from the snapshot
    assert lag.state.synchronizer.stats.reloads >= 2
    for g in (a, lag, joiner):
        g._check()


def test_two_processes_compacting_at_once_leave_one_snapshot(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    client.create_stream(S, 1)
    a = ReaderGroup("g", _config(), client, clock)
    b = ReaderGroup.open("g", client, clock)
    a.create_reader("x")
    b.refresh()
    assert a.state.synchronizer.compact()
    assert not b.state.synchronizer.compact()  # it had not seen the first snapshot: refused
    b.refresh()
    assert b.state.synchronizer.compact()
    a.refresh()
    assert a.state.model.to_obj() == b.state.model.to_obj()
    a._check()
    b._check()


def test_a_torn_or_corrupt_batch_is_never_applied(clock: ManualClock, client: SegmentStoreClient) -> None:
    client.create_stream(S, 1)
    a = ReaderGroup("g", _config(), client, clock)
    before = a.state.model.to_obj()
    frame = encode_batch(a.state.model.group_id, "x", 1, [AddReader("evil")])
    client.append(state_segment("g"), frame[: len(frame) // 2])  # a half batch (no real append can)
    with pytest.raises(GroupStateCorruptError, match="no whole batch"):
        a.refresh()
    assert a.state.model.to_obj() == before and "evil" not in a.state.readers()
    with pytest.raises(GroupStateCorruptError):
        ReaderGroup.open("g", client, clock).create_reader("r")


@pytest.mark.parametrize(
    "updates",
    [
        [AddReader("evil"), Snapshot({"v": 1})],  # a snapshot is a batch of its own
        [Snapshot({"v": 1, "junk": 2})],  # a snapshot that is no state
        [],  # a batch of nothing
    ],
    ids=["snapshot-among-updates", "malformed-snapshot", "empty"],
)
def test_a_well_framed_but_malformed_batch_is_refused_not_half_applied(
    clock: ManualClock, client: SegmentStoreClient, updates: list[Any]
) -> None:
    """A batch with a good CRC whose content is no valid batch: GroupStateCorruptError, nothing applied.

    (Before: a snapshot among updates applied the updates before it and raised a raw
    TypeError, again on every refresh; a malformed snapshot raised a raw KeyError.)
    """
    client.create_stream(S, 1)
    a = ReaderGroup("g", _config(), client, clock)
    before, revision = a.state.model.to_obj(), a.state.revision
    at = client.get_info(state_segment("g")).length
    client.append(state_segment("g"), encode_batch(a.state.model.group_id, "x", 1, updates))
    for _ in range(2):
        with pytest.raises(GroupStateCorruptError, match=f"offset {at}"):
            a.refresh()
        assert a.state.model.to_obj() == before and a.state.revision == revision
    with pytest.raises(GroupStateCorruptError, match=f"offset {at}"):
        ReaderGroup.open("g", client, clock)


def test_a_malformed_snapshot_at_the_start_of_the_log_is_refused(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    client.create_stream(S, 1)
    a = ReaderGroup("g", _config(), client, clock)
    seg = state_segment("g")
    at = client.get_info(seg).length
    client.append(seg, encode_batch(a.state.model.group_id, "x", 1, [Snapshot({"v": 1})]))
    client.truncate(seg, at)  # as a compaction would
    with pytest.raises(GroupStateCorruptError, match=f"offset {at}"):
        ReaderGroup.open("g", client, clock)


def test_a_lost_reply_is_resolved_from_the_log_not_appended_twice(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    client.create_stream(S, 2)
    a = ReaderGroup("g", _config(), client, clock)
    real = client.append
    lost = {"n": 0}

    def flaky(name: str, data: bytes, expected_offset: int | None = None, **kw: Any) -> Any:
        out = real(name, data, expected_offset, **kw)
        if name == state_segment("g") and lost["n"] < 2:
            lost["n"] += 1
            raise ConnectionLostError("reply lost")
        return out

    client.append = flaky  # type: ignore[method-assign]
    try:
        r = a.create_reader("r")  # landed although the reply was lost
        assert a.online_readers() == ["r"]
        written = _write(client, clock, 20)
        assert sorted(_drain(r)) == sorted(written)
    finally:
        client.append = real  # type: ignore[method-assign]
    assert a.state.synchronizer.stats.lost_replies == 2
    a._check()


def test_a_snapshot_is_the_json_of_the_replica_in_every_state_it_passes_through(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    """Compaction writes ``to_json()`` (each segment's part encoded once and kept): the JSON of
    ``to_obj()`` byte for byte, with readers, unassigned and future segments (a scaled stream),
    a checkpoint in progress, odd names; and a replica loaded from it equals the one it came from."""
    client.create_stream(S, 3)
    group = ReaderGroup('g"\\ü', _config(), client, clock)
    seen: set[str] = set()

    def same() -> None:
        m = group.state.model
        text = m.to_json()
        assert text == json.dumps(m.to_obj(), separators=(",", ":"), allow_nan=False)
        assert GroupModel.from_obj(json.loads(text)).to_obj() == m.to_obj()
        seen.update(r.status for r in m.rows())
        seen.update(["checkpoint"] if m.checkpoints else [])

    same()
    a, b = group.create_reader('r"a'), group.create_reader("rß")
    _write(client, clock, 30)
    _drain(a, b)
    same()
    segs = sorted(client.get_stream(S).active_segments, key=lambda x: x.key_low)
    owner = {r.segment.name: r.owner for r in group.state.segments()}
    x, y = next((x, y) for x, y in itertools.pairwise(segs) if owner[x.name] != owner[y.name])
    client.scale_stream(S, [x.name, y.name], [(x.key_low, y.key_high)])  # merged: waits for both
    _write(client, clock, 30, prefix="f")
    _drain(a if owner[x.name] == 'r"a' else b)  # one predecessor completes, the other is still held
    same()
    group.initiate_checkpoint("cp")
    a.read_next_event()
    same()
    _drain(a, b)
    group.reader_offline("rß")  # its segments go back unassigned
    same()
    assert seen == {"assigned", "unassigned", "future", "checkpoint"}, seen
    group.state.synchronizer.compact()
    group._check()


# ---------------------------------------------------------------------- across replicas
def test_checkpoints_resets_and_offline_declarations_reach_every_replica(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    client.create_stream(S, 2)
    a = ReaderGroup("g", _config(), client, clock)
    b = ReaderGroup.open("g", client, clock)
    ra, rb = a.create_reader("ra"), b.create_reader("rb")
    first = _write(client, clock, 20)
    got = _drain(ra, rb)
    cp = b.initiate_checkpoint("cp1")  # initiated in one process, reached in both
    markers = []
    for r in (ra, rb):
        e = r.read_next_event()
        if not e.is_checkpoint:
            e = r.read_next_event()
        markers.append(e.checkpoint_name)
    assert markers == ["cp1", "cp1"]
    result = cp.result(timeout=5)
    assert isinstance(result, Checkpoint) and result.name == "cp1"
    second = _write(client, clock, 10, prefix="f")
    got += _drain(ra, rb)
    assert sorted(got) == sorted(first + second)
    epoch = a.reset_to(result)  # back to the checkpoint, from the other replica
    assert b.epoch == epoch == 1
    again = _drain(ra, rb)
    assert sorted(again) == sorted(second)  # the new epoch re-reads what followed the checkpoint
    a.reader_offline("rb")  # declared in one process, the reader lives in the other
    with pytest.raises(ReaderNotInGroupError):
        for _ in range(3):
            rb.read_next_event()
    assert b.online_readers() == ["ra"]
    a._check()
    b._check()


def test_an_offline_reader_that_comes_back_finds_itself_offline_and_reports_nothing(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    client.create_stream(S, 1)
    written = _write(client, clock, 10)
    a = ReaderGroup("g", _config(position_report_interval_ms=10**9), client, clock)
    b = ReaderGroup.open("g", client, clock)
    zombie = b.create_reader("z")
    for _ in range(5):
        zombie.read_next_event()
    a.reader_offline("z")  # it reported nothing: its segment returns at 0
    heir = a.create_reader("z")  # the same id again: another incarnation
    assert heir.token != zombie.token
    with pytest.raises(ReaderNotInGroupError):
        _drain(zombie)
    assert [r.position for r in a.segments()] == [0]  # the zombie's reads were never reported
    assert sorted(_drain(heir)) == sorted(written)
    b._check()


def _reads_until_it_raises(r: EventReader, error: type[Exception]) -> str:
    """Read (whatever is still buffered) until the reader raises ``error``; its message."""
    with pytest.raises(error) as info:
        for _ in range(1_000):
            r.read_next_event()
    return str(info.value)


@pytest.mark.parametrize("lease", [False, True])
def test_a_deleted_group_fails_the_readers_of_every_replica_naming_the_group(
    clock: ManualClock, client: SegmentStoreClient, lease: bool
) -> None:
    """Readers of the deleting process and of another one learn that the group was deleted, not
    that they were declared offline: at their next read, or sync, or (with a lease and a report
    interval longer than the test) at their next beat."""
    client.create_stream(S, 2)
    opts: dict[str, Any] = {"reader_timeout_ms": 0}
    if lease:
        opts = {"reader_timeout_ms": 1_000, "position_report_interval_ms": 10**9}
    mgr = ReaderGroupManager(client, clock)
    mgr.create_reader_group("g", _config(**opts))
    mine = mgr.create_reader("g", "mine")
    other = ReaderGroupManager(client, clock)
    theirs = other.create_reader("g", "theirs")
    _write(client, clock, 30)
    for r in (mine, theirs):
        for _ in range(3):
            r.read_next_event()
    assert other.list_reader_groups() == ["g"]
    mgr.delete_reader_group("g")
    assert other.list_reader_groups() == []
    if lease:
        clock.advance(600)  # their next beat finds the group gone
    for r in (mine, theirs):
        msg = _reads_until_it_raises(r, ReaderGroupNotFoundError)
        assert "'g'" in msg and "deleted" in msg and "offline" not in msg
        assert "'g'" in _reads_until_it_raises(r, ReaderGroupNotFoundError)  # and it stays so
    with pytest.raises(ReaderGroupNotFoundError, match="'_system/_rg/g'"):
        other.get_reader_group("g").online_readers()
    mine.close()  # nothing to leave
    with pytest.raises(ReaderGroupNotFoundError):
        mgr.delete_reader_group("g")


def test_a_reader_of_a_group_deleted_and_made_again_learns_its_group_is_gone(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    client.create_stream(S, 1)
    cfg = _config(reader_timeout_ms=1_000, position_report_interval_ms=10**9)
    mgr = ReaderGroupManager(client, clock)
    mgr.create_reader_group("g", cfg)
    old = ReaderGroupManager(client, clock).create_reader("g", "r")
    old.read_next_event()
    mgr.delete_reader_group("g")
    new = ReaderGroupManager(client, clock).create_reader_group("g", cfg)
    heir = new.create_reader("r")  # the same reader id in the new group
    clock.advance(600)  # the old reader beats: its heartbeat is not in the new group's segment
    msg = _reads_until_it_raises(old, ReaderGroupNotFoundError)
    assert "'g'" in msg and "created again" in msg
    written = _write(client, clock, 5)
    assert sorted(_drain(heir)) == sorted(written)  # the new group is untouched by the old reader
    assert new.online_readers() == ["r"]
    new._check()


# ---------------------------------------------------------------------- leases
def _lease_setup(
    clock: ManualClock, client: SegmentStoreClient
) -> tuple[ReaderGroup, ReaderGroup, EventReader, EventReader, list[bytes]]:
    client.create_stream(S, 2)
    cfg = _config(reader_timeout_ms=1_000, position_report_interval_ms=10**9)
    a = ReaderGroup("g", cfg, client, clock)
    b = ReaderGroup.open("g", client, clock)
    ra, rb = a.create_reader("ra"), b.create_reader("rb")
    written = _write(client, clock, 40)
    return a, b, ra, rb, written


def test_a_reader_that_stops_beating_is_declared_offline_after_its_timeout(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    a, b, ra, rb, written = _lease_setup(clock, client)
    got = _drain(ra, rb)
    assert sorted(got) == sorted(written)
    more = _write(client, clock, 20, prefix="m")
    for _ in range(4):  # rb reads a little, unreported, then its process stops
        rb.read_next_event()
    for _ in range(8):  # ra keeps reading: it beats, and watches rb's heartbeat stand still
        clock.advance(200)
        e = ra.read_next_event()
        if e.is_event and e.payload is not None:
            got.append(e.payload)
    assert a.online_readers() == ["ra"] and b.online_readers() == ["ra"]
    with pytest.raises(ReaderNotInGroupError):  # rb comes back: its lease is gone (fenced)
        rb.read_next_event()
    rest = _drain(ra)
    assert set(more) <= set(got + rest)  # nothing lost; rb's unreported reads are delivered again
    a._check()


def _heartbeat_keys(client: SegmentStoreClient) -> set[int]:
    from segmentstore.attributes import is_core_attribute

    return {k for k in client.get_attributes(state_segment("g")) if not is_core_attribute(k)}


def test_the_state_segment_keeps_a_heartbeat_per_online_reader_only(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    """Readers that closed, were taken offline or expired leave no attribute behind, however many
    came and went; one taken offline while alive learns at its next beat that its lease is gone."""
    a, b, ra, rb, _ = _lease_setup(clock, client)
    _drain(ra, rb)
    for i in range(6):  # readers come and go
        r = b.create_reader(f"temp-{i}")
        r.read_next_event()
        r.close()
    assert len(_heartbeat_keys(client)) == 2  # ra and rb
    a.reader_offline("rb")  # an operator takes a live reader offline
    assert len(_heartbeat_keys(client)) == 1
    clock.advance(600)  # past a quarter timeout: rb beats before it delivers again, and fails
    with pytest.raises(ReaderNotInGroupError):
        rb.read_next_event()
    rc = b.create_reader("rc")
    rc.read_next_event()  # then rc's process stops; ra's replica declares it offline
    assert a.expire_readers() == []  # (first sight of rc's heartbeat)
    clock.advance(1_200)
    ra.read_next_event()  # ra's reads watch the heartbeats too
    a.expire_readers()
    assert a.online_readers() == ["ra"]
    assert len(_heartbeat_keys(client)) == 1
    a._check()


def test_a_lease_counts_from_when_a_live_process_first_sees_the_heartbeat(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    """docs/reader-groups.md, "when a dead reader is declared offline": a process that first looks at a
    long-dead reader's heartbeat still waits a whole lease on its own clock from that look."""
    client.create_stream(S, 1)
    a = ReaderGroup("g", _config(reader_timeout_ms=1_000), client, clock)
    dead = a.create_reader("dead")
    dead.read_next_event()  # it beats once, then its process stops
    clock.advance(5_000)  # five leases later a process opens the group and looks
    late = ReaderGroup.open("g", client, clock)
    assert late.expire_readers() == []  # its first sight of the heartbeat's value
    clock.advance(999)
    assert late.expire_readers() == []
    clock.advance(1)
    assert late.expire_readers() == ["dead"]  # a whole lease since it first saw it
    assert a.online_readers() == []
    late._check()


def test_a_slow_reader_within_its_lease_keeps_its_segments(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    a, b, ra, rb, _ = _lease_setup(clock, client)
    _drain(ra, rb)
    for _ in range(20):  # both read now and then, never a whole timeout apart
        clock.advance(200)
        ra.read_next_event()
        rb.read_next_event()
    assert a.online_readers() == ["ra", "rb"]
    assert a.expire_readers() == []
    clock.advance(600)  # rb's process is gone from now on; ra goes on
    ra.read_next_event()
    assert a.expire_readers() == [] and a.online_readers() == ["ra", "rb"]
    clock.advance(600)
    assert a.expire_readers() == ["rb"]  # more than a timeout since ra's replica saw rb beat
    assert b.online_readers() == ["ra"]
    b._check()


def test_a_rejected_update_changes_nothing_in_any_replica() -> None:
    m = GroupModel.initial("g", "id", _config(), [(_SEG, 0, 5)])
    before = m.to_obj()
    bad: list[Callable[[], Any]] = [
        lambda: Report("ghost", 1, 0, ((_SEG.name, 3, 6),)),
        lambda: Acquire("ghost", 1, 0),
        lambda: Reset(5, ()),
        lambda: InitiateCheckpoint("cp", 3),
    ]
    for make in bad:
        assert not m.apply(make(), 100)
    assert m.to_obj() == before and m.rejected == len(bad)
    assert m.apply(AddReader("r"), 100) and m.apply(Acquire("r", 100, 0), 200)
    assert not m.apply(Report("r", 100, 0, ((_SEG.name, -1, 6),)), 300)  # below the acknowledged position
    assert GroupModel.from_obj(m.to_obj()).to_obj() == m.to_obj()
    m._check()


def test_a_heartbeat_or_fence_whose_reply_was_lost_is_resolved_not_raised(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    """A lost reply to a beat (or a fence) is looked up in the attribute, as a lost append in the log.

    (Before: the ``ConnectionLostError`` of a beat whose reply was lost, as in a server
    restart, came out of ``read_next_event``.)
    """
    a, b, ra, rb, written = _lease_setup(clock, client)
    real = client.update_attributes
    lost = {"n": 0}

    def flaky(name: str, updates: Any) -> Any:
        out = real(name, updates)
        if name == state_segment("g") and lost["n"] < 3:
            lost["n"] += 1
            raise ConnectionLostError("reply lost")
        return out

    client.update_attributes = flaky  # type: ignore[method-assign]
    try:
        got = _drain(ra, rb)
        clock.advance(300)  # a beat is due: its reply is lost, it landed
        got += [e.payload for e in (ra.read_next_event(), rb.read_next_event()) if e.payload is not None]
        assert lost["n"] >= 2
        got += _drain(ra, rb)
        assert sorted(got) == sorted(written)
        assert a.online_readers() == ["ra", "rb"]
        lost["n"] = 0
        for _ in range(8):  # rb is gone; ra's fence of it loses its reply
            clock.advance(200)
            ra.read_next_event()
        assert a.online_readers() == ["ra"] and lost["n"] >= 1
    finally:
        client.update_attributes = real  # type: ignore[method-assign]
    with pytest.raises(ReaderNotInGroupError):
        rb.read_next_event()
    a._check()
    b._check()


def test_a_release_naming_a_segment_twice_is_rejected() -> None:
    """(Before: accepted, the segment was unassigned twice and could be acquired twice.)"""
    m = GroupModel.initial("g", "id", _config(), [(_SEG, 0, 5)])
    assert m.apply(AddReader("r"), 100) and m.apply(Acquire("r", 100, 0), 200)
    before = m.to_obj()
    assert not m.apply(Release("r", 100, 0, (_SEG.name, _SEG.name)), 300)
    assert m.to_obj() == before
    m._check()


def test_a_busy_reader_learns_of_another_processs_checkpoint_within_a_quarter_lease(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    client.create_stream(S, 1)
    _write(client, clock, 200)
    cfg = _config(position_report_interval_ms=10**9, reader_timeout_ms=1_000, read_buffer_bytes=64)
    a = ReaderGroup("g", cfg, client, clock)
    b = ReaderGroup.open("g", client, clock)
    r = b.create_reader("r")
    for _ in range(5):
        assert not r.read_next_event().is_checkpoint
    cp = a.initiate_checkpoint("cp")
    assert not any(r.read_next_event().is_checkpoint for _ in range(5))  # busy: no sync due yet
    clock.advance(300)  # past a quarter of the lease: it beats, and syncs with the log
    assert any(r.read_next_event().is_checkpoint for _ in range(3))
    assert cp.result(timeout=5).name == "cp"


def test_a_log_that_lost_updates_a_replica_applied_is_a_clear_error(tmp_path: Any) -> None:
    """A data directory restored from an older copy under a running group: the replica is ahead of
    the log. The reader says what happened instead of a raw ``BadOffsetError``, and a reopened
    group goes on from what the store holds."""
    import shutil

    from segmentstore import SegmentStore, StoreConfig
    from segmentstore.client import RemoteClient
    from segmentstore.net.server import SegmentStoreServer

    clock = ManualClock(1_000_000)
    config = StoreConfig(advancer_thread=False)
    data, backup = tmp_path / "data", tmp_path / "backup"
    store = SegmentStore(clock=clock, config=config, data_dir=data)
    server = SegmentStoreServer(store)
    port = server.start()
    client = RemoteClient(("127.0.0.1", port), timeout_s=20)
    try:
        client.create_stream(S, 2)
        group = ReaderGroup("g", _config(), client, clock)
        reader = group.create_reader("r")
        written = _write(client, clock, 20)
        assert sorted(_drain(reader)) == sorted(written)
        server.stop()
        store.close()
        shutil.copytree(data, backup)  # the copy an operator will restore
        store = SegmentStore(clock=clock, config=config, data_dir=data)
        server = SegmentStoreServer(store, port=port)
        server.start()
        more = _write(client, clock, 20, "more")
        assert sorted(_drain(reader)) == sorted(more)  # the group's log grew past the copy
        server.stop()
        store.close()
        shutil.rmtree(data)
        shutil.copytree(backup, data)  # restored: the log is shorter than the replica
        store = SegmentStore(clock=clock, config=config, data_dir=data)
        server = SegmentStoreServer(store, port=port)
        server.start()
        with pytest.raises(GroupStateCorruptError, match="lost updates it had acknowledged"):
            for _ in range(5):
                group.refresh()
                _drain(reader)
        again = ReaderGroup.open("g", client, clock)
        assert again.state.readers() == ["r"]  # the state as the restored store holds it
    finally:
        client.close()
        server.stop()
        store.close()


def test_a_deletion_whose_reply_was_lost_still_fails_the_readers_as_deleted(
    clock: ManualClock, store: SegmentStore
) -> None:
    """Over a connection cut right after the store deleted the state (the reply is lost): the
    delete is resolved, and readers here and elsewhere learn that the group was deleted."""
    from faults import replies_lost_once

    elsewhere = EmbeddedClient(store)
    elsewhere.create_stream(S, 1)
    with replies_lost_once(store, store, "delete") as (client, proxy, applied):
        mgr = ReaderGroupManager(client, clock)
        mgr.create_reader_group("g", _config())
        mine = mgr.create_reader("g", "mine")
        theirs = ReaderGroupManager(elsewhere, clock).create_reader("g", "theirs")
        _write(elsewhere, clock, 10)
        mine.read_next_event()
        theirs.read_next_event()
        mgr.delete_reader_group("g")
        assert proxy.cuts >= 1 and len(applied["delete"]) == 1  # deleted once, its reply lost
        for r in (mine, theirs):
            assert "'g' was deleted" in _reads_until_it_raises(r, ReaderGroupNotFoundError)
        assert mgr.list_reader_groups() == []
