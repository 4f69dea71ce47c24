"""A reader group's state stays bounded by what is live (issue 23, item 7).

However many checkpoints complete and however often the streams scale, a group's state
(its snapshot, which its compacted log is bounded by) holds only the incomplete
segments, the online readers, the checkpoints in progress and the latest
``checkpoints_kept`` completed ones: finished segments and old checkpoints are dropped,
as Pravega's ``ReaderGroupState`` drops them. A state log written before (snapshot
version 1) still reads.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from readergroup.config import ReaderGroupConfig, TimeDomain
from readergroup.errors import DuplicateCheckpointError, InvalidReaderGroupConfigError
from readergroup.group_state.group_model import GroupModel
from readergroup.group_state.state import state_segment
from readergroup.reading.group import ReaderGroup
from readergroup.reading.reader import EventReader, ReadKind
from readergroup.writing.writer import EventWriter
from segmentstore import ManualClock, SegmentStore, StoreConfig
from segmentstore.client import EmbeddedClient, SegmentStoreClient

_STEPS = 1_000


def _scale(client: SegmentStoreClient, stream: str, rng: random.Random) -> None:
    """Split a segment (up to 4 active), else merge two neighbours."""
    act = client.get_stream(stream).active_segments
    if len(act) < 4 and (len(act) < 2 or rng.random() < 0.5):
        s = act[rng.randrange(len(act))]
        mid = s.key_low + (s.key_high - s.key_low) * rng.uniform(0.2, 0.8)
        client.scale_stream(stream, [s.name], [(s.key_low, mid), (mid, s.key_high)])
    else:
        k = rng.randrange(len(act) - 1)
        a, b = act[k], act[k + 1]
        client.scale_stream(stream, [a.name, b.name], [(a.key_low, b.key_high)])


def _read_dry(readers: list[EventReader], into: set[bytes]) -> int:
    """Read each reader until it has nothing; the payloads go ``into``. Returns the reads."""
    n = 0
    for r in readers:
        for _ in range(1_000):
            e = r.read_next_event()
            if e.kind is ReadKind.EMPTY:
                break
            n += 1
            if e.is_event and e.payload is not None:
                into.add(e.payload)
    return n


def _bound(m: GroupModel, widest: int) -> int:
    """Bytes the state may take for what is live: incomplete segments, readers, checkpoints in
    progress, and the kept checkpoints (each at most ``widest`` positions)."""
    live = len(m.entries) + len(m.readers) + len(m.checkpoints) * (1 + len(m.entries))
    return 1_000 + 250 * live + m.config.checkpoints_kept * (200 + 150 * widest)


@settings(max_examples=2)  # two: each example runs a whole group over a store
@given(
    seed=st.integers(0, 2**32 - 1),
    streams=st.integers(1, 2),
    readers=st.integers(1, 3),
    kept=st.integers(1, 4),
)
def test_thousands_of_checkpoints_and_scalings_leave_the_state_bounded(
    seed: int, streams: int, readers: int, kept: int
) -> None:
    rng = random.Random(seed)
    clock = ManualClock(1_000_000)
    store = SegmentStore(clock=clock, config=StoreConfig(advancer_thread=False))
    client = EmbeddedClient(store)
    names = [f"s/{i}" for i in range(streams)]
    for s in names:
        client.create_stream(s, 1 + rng.randrange(3))
    cfg = ReaderGroupConfig(
        tuple(names),
        time_domain=TimeDomain.INGESTION_TIME,
        position_report_interval_ms=0,
        reader_timeout_ms=0,
        checkpoints_kept=kept,
    )
    group = ReaderGroup("g", cfg, client, clock)
    writers = {s: EventWriter(client, s) for s in names}
    rs = [group.create_reader(f"r{i}") for i in range(readers)]
    next_id, completed = readers, 0
    written: set[bytes] = set()
    delivered: set[bytes] = set()
    widest = 0
    try:
        for step in range(_STEPS):
            clock.advance(1)
            s = names[rng.randrange(streams)]
            if rng.random() < 0.6:
                _scale(client, s, rng)
            for _ in range(rng.randrange(3)):
                payload = f"e{len(written)}".encode()
                writers[s].write_event(f"k{rng.randrange(20)}", payload).result(5)
                written.add(payload)
            if len(rs) > 1 and rng.random() < 0.02:  # a reader crashes; another joins
                crashed = rs.pop(rng.randrange(len(rs)))
                group.reader_offline(crashed.reader_id, crashed.get_position())
                rs.append(group.create_reader(f"r{next_id}"))
                next_id += 1
            future = group.initiate_checkpoint(f"cp{step}")
            for _ in range(3):  # (a reader may wait for the others to reach the marker)
                _read_dry(rs, delivered)
                if future.done():
                    break
            assert future.done(), f"step {step}: checkpoint not complete with every reader dry"
            cp = future.result()
            completed += 1
            widest = max(widest, len(cp.positions), len(group.state.model.entries))
            group._check()
            m = group.state.model
            size = len(json.dumps(m.to_obj()))
            assert size <= _bound(m, widest), (
                f"step {step}: state of {size} bytes for {len(m.entries)} segments, {len(m.readers)} "
                f"readers, {len(m.checkpoints)} checkpoints in progress, {len(m.completed)} completed "
                f"segments kept, {len(m.results)} completed checkpoints kept"
            )
            assert not m.completed  # nothing can name a finished segment again
        for _ in range(50):
            if not _read_dry(rs, delivered):
                break
        assert completed == _STEPS and written == delivered
        assert len(group.state.model.results) == kept
    finally:
        client.close()
        store.close()


def test_an_old_checkpoint_name_is_free_again_once_it_is_no_longer_kept(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    client.create_stream("s/a", 1)
    cfg = ReaderGroupConfig(("s/a",), checkpoints_kept=2, max_outstanding_checkpoints=5)
    group = ReaderGroup("g", cfg, client, clock)
    r = group.create_reader("r")
    other = ReaderGroup.open("g", client, clock)  # another process initiates, r reaches them
    futures = [other.initiate_checkpoint(f"cp{i}") for i in range(5)]
    with pytest.raises(DuplicateCheckpointError):  # in progress
        other.initiate_checkpoint("cp0")
    assert [r.read_next_event().checkpoint_name for _ in range(5)] == [f"cp{i}" for i in range(5)]
    # all five completed in one refresh of the initiator's replica, though it keeps only two
    assert [f.result(timeout=5).name for f in futures] == [f"cp{i}" for i in range(5)]
    assert [cp.name for _, cp in other.state.model.results] == ["cp3", "cp4"]
    with pytest.raises(DuplicateCheckpointError):  # kept
        other.initiate_checkpoint("cp4")
    again = other.initiate_checkpoint("cp0")  # dropped: free again, and a new checkpoint
    assert r.read_next_event().checkpoint_name == "cp0"
    assert again.result(timeout=5).name == "cp0" and futures[0].result().name == "cp0"
    group._check()
    other._check()
    with pytest.raises(InvalidReaderGroupConfigError, match="checkpoints_kept"):
        ReaderGroupConfig(("s/a",), checkpoints_kept=0)


def test_checkpoints_completed_at_once_beyond_those_kept_all_reach_their_futures(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    """The last reader leaving completes every queued checkpoint in one update; one is kept."""
    client.create_stream("s/a", 2)
    cfg = ReaderGroupConfig(("s/a",), checkpoints_kept=1, max_outstanding_checkpoints=4)
    group = ReaderGroup("g", cfg, client, clock)
    r = group.create_reader("r")
    futures = [group.initiate_checkpoint(f"cp{i}") for i in range(4)]
    assert not any(f.done() for f in futures)
    r.close()  # it never reached them: now nobody is left to wait for
    assert [f.result(timeout=0).name for f in futures] == ["cp0", "cp1", "cp2", "cp3"]
    assert [cp.name for _, cp in group.state.model.results] == ["cp3"]
    group._check()


# ---------------------------------------------------------------------- old logs
_V1_LOG = Path(__file__).with_name("group_state_v1.rgs")


def _v1_history(client: SegmentStoreClient, clock: ManualClock) -> None:
    """The store history the version-1 log was written against (same clock, same names).

    The log was written by the code before snapshot version 2: a group ``g`` on this
    history, with reader ``r1`` reading it through six completed checkpoints ``cp0..5``,
    then ``r2`` joining and checkpoint ``pending`` initiated (``r1`` past its marker).
    """
    client.create_stream("s/a", 2)
    for _ in range(3):
        clock.advance(5)
        s = client.get_stream("s/a").active_segments[0]
        mid = (s.key_low + s.key_high) / 2
        client.scale_stream("s/a", [s.name], [(s.key_low, mid), (mid, s.key_high)])
        clock.advance(5)
        a, b = client.get_stream("s/a").active_segments[:2]
        client.scale_stream("s/a", [a.name, b.name], [(a.key_low, b.key_high)])


def test_a_state_log_of_snapshot_version_1_still_reads(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    _v1_history(client, clock)
    log = _V1_LOG.read_bytes()
    first: dict[str, Any] = json.loads(log[12 : 12 + int.from_bytes(log[4:8], "little")])["u"][0][1]
    assert first["v"] == 1 and "checkpoint_names" in first  # the old format indeed
    client.create_segment(state_segment("g"))
    client.append(state_segment("g"), log)
    group = ReaderGroup.open("g", client, clock)
    m = group.state.model
    assert sorted(m.readers) == ["r1", "r2"]
    assert [cp.name for cp in m.checkpoints] == ["pending"]
    assert [cp.name for _, cp in m.results] == ["cp3", "cp4", "cp5"]  # the latest checkpoints_kept
    assert not m.completed  # a version-1 list of every completed segment is dropped
    group._check()
    with pytest.raises(DuplicateCheckpointError):
        group.initiate_checkpoint("cp5")
    group.initiate_checkpoint("cp0")  # no longer kept
    group.reader_offline("r1")
    group.reader_offline("r2")
    r = group.create_reader("r3")
    w = EventWriter(client, "s/a")
    for i in range(10):
        clock.advance(1)
        w.write_event(f"k{i}", f"e{i}".encode()).result(5)
    got = []
    for _ in range(100):
        e = r.read_next_event()
        if e.is_event:
            got.append(e.payload)
    assert sorted(got) == sorted(f"e{i}".encode() for i in range(10))
    assert group.state.synchronizer.compact()  # a version-2 snapshot now starts the log
    again = ReaderGroup.open("g", client, clock)
    assert again.state.model.to_obj() == group.state.model.to_obj()
    group._check()
