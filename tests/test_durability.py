"""Durable store: restart and crash recovery restore everything; damaged files are handled as documented.

A crash (kill -9) is simulated in-process by copying the data directory while the store
is open: that is exactly what a killed process leaves behind (every record is written to
the OS before it is acknowledged; unflushed segment tails are lost with the process).
The subprocess kill -9 loop is in ``test_crash.py``.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from segmentstore import (
    AttributeUpdate,
    AttributeUpdateType,
    DataCorruptionError,
    ManualClock,
    SegmentStore,
    StoreConfig,
    StoreLockedError,
)
from segmentstore.clock import monotonic_s
from segmentstore.core.operations import (
    Append,
    CreateSegment,
    Delete,
    MergeTransaction,
    Operation,
    Seal,
    Truncate,
    UpdateAttributes,
)
from segmentstore.durable.log import OpLog, log_files, scan_log
from segmentstore.durable.log_codec import decode_operation, encode_operation

T0 = 1_000_000
QUIET = dict(advancer_thread=False)
UUIDS = (2**127 + 7, 7, 2**64 + 7)  # 128-bit writer ids (Pravega's); the last two agree in their low 64 bits


def _open(d: Path, clock: ManualClock, **cfg: Any) -> SegmentStore:
    return SegmentStore(clock, StoreConfig(**{**QUIET, **cfg}), data_dir=d)


def dump(s: SegmentStore) -> dict[str, Any]:
    """Everything a user can observe of a store, offset by offset."""
    out: dict[str, Any] = {"last_ts": s.last_timestamp}
    for name in sorted(s.list_segments()):
        info = s.get_info(name)
        start, length = info.start_offset, info.length
        out[name] = (
            info,
            s.get_attributes(name),
            [s.get_writer_event_number(name, u) for u in UUIDS],
            s.read(name, start, length - start).data,
            [s.watermark_at(name, p) for p in range(start, length + 1)],
            s.watermarks_at(name, np.arange(start, length + 1)).tolist(),  # the batch kernels agree
            [s.ingestion_time_at(name, p) for p in range(start, length)],
        )
    return out


def crash_copy(src: Path, dst: Path) -> Path:
    """What a kill -9 of the process holding ``src`` would leave on disk right now."""
    shutil.copytree(src, dst)
    return dst


def populate(s: SegmentStore, clock: ManualClock) -> None:
    """Every kind of operation and state: appends, writer ids, batches, attributes, txns, seal..."""
    s.create_segment("a")
    s.create_segment("b")
    s.create_segment("c")
    for i in range(30):
        clock.advance(1 + i % 3)
        s.append("a", bytes([65 + i % 26]) * (1 + i % 7), writer_id=7, event_number=i)
        if i % 4 == 0:
            s.append_batch("b", [b"e1", b"ev2", b"event3"])
        if i % 5 == 0:
            s.append("b", b"pravega block", writer_uuid=UUIDS[i % 2], event_number=10 * i)
    assert s.append("b", b"resent", writer_uuid=UUIDS[0], event_number=0).duplicate
    s.update_attributes("a", [AttributeUpdate(5, 50), AttributeUpdate(6, 1, AttributeUpdateType.ACCUMULATE)])
    s.update_attributes("a", [AttributeUpdate(6, 2, AttributeUpdateType.ACCUMULATE)])
    s.update_attributes("b", [AttributeUpdate(9, 3, AttributeUpdateType.REPLACE_IF_EQUALS, None)])
    t1 = s.create_transaction("a")
    s.append(t1, b"transactional bytes")
    clock.advance(5)
    s.seal(t1)
    s.merge_transaction(t1)
    t2 = s.create_transaction("b")  # stays open
    s.append(t2, b"open txn")
    t3 = s.create_transaction("b")  # sealed, not merged
    s.append(t3, b"sealed txn")
    s.seal(t3)
    s.truncate("a", 17)
    s.seal("c")
    s.delete("c")
    s.create_segment("c")  # same name again, new segment
    s.append("c", b"reborn")
    clock.advance(20_000)
    assert s.advance_idle_watermarks()  # trivial updates are logged too
    clock.set(clock.now() - 5_000)  # a wall-clock step back: timestamps must not follow
    s.append("b", b"after step back")
    s.seal("b")


@pytest.mark.parametrize("every", [1_000_000, 5])
@pytest.mark.parametrize("crash", [False, True])
def test_restart_restores_everything(tmp_path: Path, every: int, crash: bool) -> None:
    clock = ManualClock(T0)
    d = tmp_path / "d"
    s = _open(d, clock, snapshot_every_ops=every, cache_bytes=4096)
    populate(s, clock)
    before = dump(s)
    s._check()
    if crash:
        d = crash_copy(d, tmp_path / "crashed")
    s.close()
    r = _open(d, ManualClock(T0), snapshot_every_ops=every, cache_bytes=4096)
    try:
        r._check()
        assert dump(r) == before
        stats = r.durable_stats
        assert stats is not None
        if crash and every > 100:
            assert stats.recovery.operations_replayed > 50  # really came from the log
    finally:
        r.close()


def test_timestamps_stay_monotonic_when_the_clock_is_far_behind_after_restart(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    s = _open(tmp_path / "d", clock)
    s.create_segment("s")
    clock.advance(10_000)
    last = s.append("s", b"x").timestamp
    wm_tail = s.watermark_at("s", 1)
    d = crash_copy(tmp_path / "d", tmp_path / "c")
    s.close()
    behind = ManualClock(T0 - 10**9)
    for path in (tmp_path / "d", d):
        r = _open(path, behind)
        try:
            assert r.last_timestamp >= last
            res = r.append("s", b"y")
            assert res.timestamp >= last
            assert r.get_info("s").last_write_time >= last
            assert r.watermark_at("s", 1) >= wm_tail
            assert r.watermark_at("s", 2) >= r.watermark_at("s", 1)
            r._check()
        finally:
            r.close()


def _log_files(d: Path) -> list[Path]:
    return sorted((d / "log").glob("wal-*.log"))


def _crashed_store_with_appends(tmp_path: Path, n: int) -> tuple[Path, list[bytes]]:
    clock = ManualClock(T0)
    s = _open(tmp_path / "d", clock)
    s.create_segment("s")
    payloads = [bytes([i % 251]) * (10 + i) for i in range(n)]
    for p in payloads:
        clock.advance(1)
        s.append("s", p)
    d = crash_copy(tmp_path / "d", tmp_path / "c")
    s.close()
    return d, payloads


@pytest.mark.parametrize("cut", [1, 7, 9, 25])
def test_torn_tail_is_cut_off_with_a_warning(
    tmp_path: Path, cut: int, caplog: pytest.LogCaptureFixture
) -> None:
    d, payloads = _crashed_store_with_appends(tmp_path, 6)
    last = _log_files(d)[-1]
    size = last.stat().st_size
    last_record = 8 + len(encode_operation(Append(1, 1, "s", 0, payloads[-1])))  # frame + payload
    with open(last, "r+b") as f:
        f.truncate(size - cut)
    with caplog.at_level(logging.WARNING, logger="segmentstore.durable.log"):
        r = _open(d, ManualClock(T0))
    try:
        warnings = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
        assert len(warnings) == 1
        assert str(last) in warnings[0]
        assert f"offset {size - last_record}" in warnings[0]
        want = b"".join(payloads[:-1])
        assert r.read("s", 0, 10_000).data == want
        r.append("s", b"more")  # the log continues cleanly after the cut
        r._check()
    finally:
        r.close()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="segmentstore.durable.log"):
        r = _open(d, ManualClock(T0))
    try:
        assert not [rec for rec in caplog.records if rec.levelno >= logging.WARNING]
        assert r.read("s", 0, 10_000).data == want + b"more"
    finally:
        r.close()


def test_zero_filled_tail_is_torn_not_corrupt(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d, payloads = _crashed_store_with_appends(tmp_path, 3)
    with open(_log_files(d)[-1], "ab") as f:
        f.write(b"\0" * 100)
    with caplog.at_level(logging.WARNING, logger="segmentstore.durable.log"):
        r = _open(d, ManualClock(T0))
    try:
        assert r.read("s", 0, 10_000).data == b"".join(payloads)
        assert any("torn" in rec.getMessage() for rec in caplog.records)
    finally:
        r.close()


@pytest.mark.parametrize("where", ["frame", "payload"])
def test_corrupt_record_in_the_middle_stops_startup(tmp_path: Path, where: str) -> None:
    d, _ = _crashed_store_with_appends(tmp_path, 6)
    log = _log_files(d)[-1]
    raw = bytearray(log.read_bytes())
    first = 8  # after the file magic: the CreateSegment record
    create_len = int.from_bytes(raw[first : first + 4], "little")
    second = first + 8 + create_len  # the first append
    pos = second + 4 if where == "frame" else second + 30  # the CRC, or a payload byte
    raw[pos] ^= 0x5A
    log.write_bytes(bytes(raw))
    with pytest.raises(DataCorruptionError) as e:
        _open(d, ManualClock(T0))
    assert str(log) in str(e.value)
    assert f"offset {second}" in str(e.value)
    # nothing was cut: the file is as damaged as before, and the directory is not left locked
    assert log.read_bytes() == bytes(raw)
    with pytest.raises(DataCorruptionError):
        _open(d, ManualClock(T0))


def test_damage_in_an_earlier_log_file_is_corruption(tmp_path: Path) -> None:
    d, _ = _crashed_store_with_appends(tmp_path, 4)
    s = _open(d, ManualClock(T0))  # recovery starts a second log file
    s.append("s", b"second file")
    d2 = crash_copy(d, tmp_path / "c2")
    s.close()
    first = _log_files(d2)[0]
    with open(first, "r+b") as f:  # a torn-looking end, but it is not the last file
        f.truncate(first.stat().st_size - 3)
    with pytest.raises(DataCorruptionError, match=str(first)):
        _open(d2, ManualClock(T0))


def test_corrupt_snapshot_stops_startup(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with _open(tmp_path / "d", clock) as s:
        s.create_segment("s")
        s.append("s", b"data")
    snap = next((tmp_path / "d").glob("snapshot-*.snap"))
    raw = bytearray(snap.read_bytes())
    raw[-3] ^= 0xFF
    snap.write_bytes(bytes(raw))
    with pytest.raises(DataCorruptionError, match=str(snap)):
        _open(tmp_path / "d", clock)


def test_missing_segment_file_stops_startup(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with _open(tmp_path / "d", clock) as s:
        s.create_segment("s")
        s.append("s", b"data")
    for f in (tmp_path / "d" / "segments").iterdir():
        f.unlink()
    with pytest.raises(DataCorruptionError, match="missing"):
        _open(tmp_path / "d", clock)


def test_a_second_store_on_the_same_directory_is_refused(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    s = _open(tmp_path / "d", clock)
    try:
        s.create_segment("s")
        with pytest.raises(StoreLockedError, match=str(tmp_path / "d")):
            _open(tmp_path / "d", clock)
        assert s.append("s", b"still fine").offset == 0  # the refused open changed nothing
    finally:
        s.close()
    with _open(tmp_path / "d", clock) as r:
        assert r.read("s", 0, 100).data == b"still fine"
        other = subprocess.run(
            [sys.executable, "-c", _OTHER_PROCESS, str(tmp_path / "d")],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert other.stdout.startswith("StoreLockedError"), other.stdout + other.stderr
        assert str(tmp_path / "d") in other.stdout
    not_a_dir = subprocess.run(
        [sys.executable, "-c", _OTHER_PROCESS, str(tmp_path / "d" / "LOCK")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert not_a_dir.stdout.startswith("InvalidArgumentError")  # a clear error, not an OSError


_OTHER_PROCESS = """
import sys
from segmentstore import SegmentStore, StoreConfig
try:
    SegmentStore(config=StoreConfig(advancer_thread=False), data_dir=sys.argv[1]).close()
    print("opened")
except Exception as e:
    print(type(e).__name__, e)
"""


def test_the_log_rolls_into_files_that_read_back_in_order(tmp_path: Path) -> None:
    ops: list[Operation] = [CreateSegment(1, 5, "s")]
    ops += [Append(i, 5 + i, "s", 10 * (i - 2), bytes([i]) * 10) for i in range(2, 60)]
    log = OpLog(tmp_path, "none", roll_bytes=300)
    for op in ops:
        log.write(op)
    log._check()
    log.close()
    files = log_files(tmp_path)
    assert len(files) > 5
    assert list(scan_log(tmp_path)) == ops
    assert list(scan_log(tmp_path, after_seq=30)) == ops[30:]
    files[2][1].write_bytes(files[2][1].read_bytes()[:-1])  # damage inside, not at the end
    with pytest.raises(DataCorruptionError, match=files[2][1].name):
        list(scan_log(tmp_path))


def _random_workload(s: SegmentStore, clock: ManualClock, seed: int) -> None:
    import random

    rnd = random.Random(seed)
    names = ["x", "y", "z"]
    for n in names:
        s.create_segment(n)
    for i in range(150):
        clock.advance(rnd.randint(0, 3))
        n = rnd.choice(names)
        r = rnd.random()
        if r < 0.7:
            s.append(n, rnd.randbytes(rnd.randint(1, 40)))
        elif r < 0.8:
            s.update_attributes(n, [AttributeUpdate(1, i)])
        elif r < 0.9:
            t = s.create_transaction(n)
            s.append(t, rnd.randbytes(rnd.randint(1, 40)))
            s.seal(t)
            s.merge_transaction(t)
        else:
            info = s.get_info(n)
            s.truncate(n, rnd.randint(info.start_offset, info.length))


@pytest.mark.parametrize("seed", [1, 2])
def test_snapshots_with_log_truncation_recover_like_the_full_log(tmp_path: Path, seed: int) -> None:
    dumps = []
    for every, name in ((1_000_000, "full"), (9, "snap")):
        clock = ManualClock(T0)
        s = _open(tmp_path / name, clock, snapshot_every_ops=every)
        _random_workload(s, clock, seed)
        crashed = crash_copy(tmp_path / name, tmp_path / f"{name}-crash")
        stats = s.durable_stats
        assert stats is not None
        if every == 9:
            assert stats.snapshots >= 10
            assert len(_log_files(tmp_path / name)) <= 2  # older log files were deleted
            assert len(list((tmp_path / name).glob("snapshot-*.snap"))) == 1
        s.close()
        with _open(crashed, ManualClock(T0)) as r:
            r._check()
            dumps.append(dump(r))
    assert dumps[0] == dumps[1]


@pytest.mark.parametrize("sync", ["always", "interval", "none"])
def test_every_sync_policy_survives_a_process_crash(tmp_path: Path, sync: str) -> None:
    clock = ManualClock(T0)
    s = _open(tmp_path / "d", clock, sync=sync, sync_interval_ms=5)
    s.create_segment("s")
    for i in range(50):
        s.append("s", bytes([i]) * 3)
    if sync == "always":
        stats = s.durable_stats
        assert stats is not None and stats.log_syncs >= 50
    if sync == "interval":  # the group commit happens in the background
        deadline = monotonic_s() + 30
        while (st_ := s.durable_stats) is not None and st_.log_syncs == 0:
            assert monotonic_s() < deadline, "the log flusher never synced"
            threading.Event().wait(0.005)
    d = crash_copy(tmp_path / "d", tmp_path / "c")
    s.close()
    with _open(d, ManualClock(T0)) as r:
        assert r.read("s", 0, 1000).data == b"".join(bytes([i]) * 3 for i in range(50))


def test_memory_is_bounded_by_the_cache_not_the_data(tmp_path: Path) -> None:
    cap = 200_000
    clock = ManualClock(T0)
    data: dict[str, bytearray] = {n: bytearray() for n in "abcd"}
    with _open(tmp_path / "d", clock, cache_bytes=cap) as s:
        for n in data:
            s.create_segment(n)
        for i in range(400):
            n = "abcd"[i % 4]
            chunk = bytes([i % 256]) * (5000 + i)
            s.append(n, chunk)
            data[n] += chunk
            stats = s.durable_stats
            assert stats is not None and stats.cache_used <= cap
        total = sum(len(v) for v in data.values())
        assert total > 10 * cap
        for n, want in data.items():
            for off in range(0, len(want), 70_001):  # reads across block boundaries
                assert s.read(n, off, 100_000).data == bytes(want[off : off + 100_000])
            stats = s.durable_stats
            assert stats is not None and stats.cache_used <= cap
        assert stats is not None and stats.cache_misses > 0
        s._check()


# ---------------------------------------------------------------- codec
_i64 = st.integers(-(2**63), 2**63 - 1)
_name = st.text(min_size=1, max_size=20)
_ops = st.one_of(
    st.builds(CreateSegment, _i64, _i64, _name, st.none() | _name),
    st.builds(Append, _i64, _i64, _name, _i64, st.binary(max_size=50), st.none() | _i64, st.none() | _i64),
    st.builds(  # a 128-bit writer id (kept apart from the 64-bit attributes)
        Append, _i64, _i64, _name, _i64, st.binary(max_size=50), st.none(), _i64, st.integers(0, 2**128 - 1)
    ),
    st.builds(MergeTransaction, _i64, _i64, _name, _name, _i64, _i64),
    st.builds(UpdateAttributes, _i64, _i64, _name, st.lists(st.tuples(_i64, _i64), max_size=5).map(tuple)),
    st.builds(  # with removals (value None)
        UpdateAttributes,
        _i64,
        _i64,
        _name,
        st.lists(st.tuples(_i64, st.none() | _i64), max_size=5).map(tuple),
    ),
    st.builds(Seal, _i64, _i64, _name),
    st.builds(Truncate, _i64, _i64, _name, _i64),
    st.builds(Delete, _i64, _i64, _name),
)


@settings(max_examples=200)  # above the profile's 100: a pure codec, fast examples
@given(op=_ops, flip=st.integers(0, 10_000))
def test_codec_round_trips_every_operation_and_rejects_garbage(op: Operation, flip: int) -> None:
    raw = encode_operation(op)
    assert decode_operation(raw) == op
    assert decode_operation(memoryview(raw)) == op
    damaged = bytearray(raw)
    damaged[flip % len(raw)] ^= 0xFF
    with contextlib.suppress(DataCorruptionError):  # it may decode (a flipped payload byte) ...
        decode_operation(bytes(damaged))  # ... but never fails with anything else
    with pytest.raises(DataCorruptionError):
        decode_operation(raw[: len(raw) // 2] if not isinstance(op, Append) else raw[:10])
