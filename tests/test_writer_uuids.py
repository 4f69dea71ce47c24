"""128-bit writer ids (``append(writer_uuid=...)``, Pravega's writers): deduplicated on the exact id,
apart from 64-bit writer ids, through eviction, restarts and crashes; old files still read."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from segmentstore import InvalidArgumentError, ManualClock, SegmentNotFoundError, SegmentStore, StoreConfig
from segmentstore.durable.snapshot import decode_segment_state, encode_segment_state, snapshot_segment

T0 = 1_000_000
HIGH = 2**127 + 42
"""Two writer ids that agree in their low 64 bits (a hash or cut to 64 bits would merge them)."""
LOW = 42


def _store(clock: ManualClock, data_dir: Path | None = None, **cfg: Any) -> SegmentStore:
    return SegmentStore(clock, StoreConfig(advancer_thread=False, **cfg), data_dir=data_dir)


def test_a_resent_block_is_acknowledged_and_not_stored_twice_per_exact_128_bit_id() -> None:
    with _store(ManualClock(T0)) as s:
        s.create_segment("seg")
        assert s.get_writer_event_number("seg", HIGH) is None
        first = s.append("seg", b"block-1", writer_uuid=HIGH, event_number=5)
        assert not first.duplicate and s.get_writer_event_number("seg", HIGH) == 5
        again = s.append("seg", b"block-1", writer_uuid=HIGH, event_number=5)
        older = s.append("seg", b"block-0", writer_uuid=HIGH, event_number=3)
        assert again.duplicate and older.duplicate and again.length == 0
        assert s.get_info("seg").length == len(b"block-1")
        # an id differing only in its high bits is another writer: its event 5 is new
        assert not s.append("seg", b"other", writer_uuid=LOW, event_number=5).duplicate
        # and a 64-bit writer id of the same low bits (kept as an attribute) is a third
        assert not s.append("seg", b"third", writer_id=LOW, event_number=5).duplicate
        assert s.get_attributes("seg")[LOW] == 5 and s.get_writer_event_number("seg", LOW) == 5
        assert s.read("seg", 0, 100).data == b"block-1otherthird"
        s._check()


def test_bad_writer_uuid_arguments_are_refused_and_change_nothing() -> None:
    with _store(ManualClock(T0)) as s:
        s.create_segment("seg")
        for kw, match in (
            (dict(writer_uuid=2**128, event_number=1), r"writer_uuid must be an int in \[0, 2\^128\)"),
            (dict(writer_uuid=-1, event_number=1), "writer_uuid must be"),
            (dict(writer_uuid=1, event_number=None), "event_number must be a 64-bit int"),
            (dict(writer_uuid=1, event_number=2**63), "event_number must be a 64-bit int"),
            (dict(writer_uuid=1, writer_id=1, event_number=1), "writer_id or writer_uuid, not both"),
            (dict(writer_uuid=True, event_number=1), "writer_uuid must be"),
        ):
            with pytest.raises(InvalidArgumentError, match=match):
                s.append("seg", b"x", **kw)
        assert s.get_info("seg").length == 0
        with pytest.raises(InvalidArgumentError, match="writer_uuid"):
            s.get_writer_event_number("seg", 2**128)
        with pytest.raises(SegmentNotFoundError):
            s.get_writer_event_number("missing", 1)


@pytest.mark.parametrize("durable", [False, True])
def test_an_evicted_segment_keeps_its_writer_table(tmp_path: Path, durable: bool) -> None:
    clock = ManualClock(T0)
    d = tmp_path / "d" if durable else None
    with _store(clock, d, eviction_age_ms=1_000, max_watermark_lag_ms=100) as s:
        s.create_segment("idle")
        s.create_segment("busy")
        s.append("idle", b"x", writer_uuid=HIGH, event_number=9)
        for _ in range(30):
            clock.advance(100)
            s.append("busy", b"b")
            s.advance_idle_watermarks()
        assert s.eviction_stats.cold == 1
        assert s.append("idle", b"x", writer_uuid=HIGH, event_number=9).duplicate  # reactivates it
        assert s.get_writer_event_number("idle", HIGH) == 9
        s._check()


@pytest.mark.parametrize("snapshot", [False, True])
def test_the_writer_table_survives_restarts_and_crashes(tmp_path: Path, snapshot: bool) -> None:
    clock = ManualClock(T0)
    d = tmp_path / "d"
    s = _store(clock, d, sync="always")
    s.create_segment("seg")
    for n in range(1, 4):
        clock.advance(1)
        s.append("seg", b"e%d" % n, writer_uuid=HIGH, event_number=n)
    s.append("seg", b"low", writer_uuid=LOW, event_number=1)
    if snapshot:
        s.snapshot()
    crashed = tmp_path / "crashed"
    shutil.copytree(d, crashed)  # what kill -9 leaves behind
    s.close()
    for where in (d, crashed):
        r = _store(ManualClock(T0), where)
        try:
            assert r.get_writer_event_number("seg", HIGH) == 3
            assert r.get_writer_event_number("seg", LOW) == 1
            assert r.append("seg", b"e3", writer_uuid=HIGH, event_number=3).duplicate
            assert not r.append("seg", b"e4", writer_uuid=HIGH, event_number=4).duplicate
            assert r.read("seg", 0, 100).data == b"e1e2e3lowe4"
            r._check()
        finally:
            r.close()


def test_segment_states_without_writer_uuids_keep_the_older_format() -> None:
    with _store(ManualClock(T0)) as s:
        s.create_segment("plain")
        s.append("plain", b"x", writer_id=3, event_number=1)
        s.create_segment("pravega")
        s.append("pravega", b"y", writer_uuid=HIGH, event_number=1)
        plain = s._container.segment("plain")
        pravega = s._container.segment("pravega")
        old = encode_segment_state(snapshot_segment(plain, 1, 0))
        assert len(old) == 13  # as older builds wrote (and read) it
        assert decode_segment_state(old, "old").writer_uuids == ()
        new = encode_segment_state(snapshot_segment(pravega, 2, 0))
        assert len(new) == 14
        assert decode_segment_state(new, "new").writer_uuids == ((HIGH, 1),)
