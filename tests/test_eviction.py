"""Eviction of inactive segments: idle ones go despite advancing, come back whole, and advanced."""

from __future__ import annotations

import dataclasses
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from segmentstore import (
    LAST_WRITE_TIME,
    AttributeUpdate,
    ManualClock,
    SegmentExistsError,
    SegmentStore,
    StoreConfig,
)

LAG = 1_000
POLL = 100
AGE = 5_000
T0 = 1_000_000


def _store(clock: ManualClock, data_dir: Path | None = None, **cfg: Any) -> SegmentStore:
    base: dict[str, Any] = dict(
        max_watermark_lag_ms=LAG, polling_period_ms=POLL, eviction_age_ms=AGE, advancer_thread=False
    )
    return SegmentStore(clock, StoreConfig(**{**base, **cfg}), data_dir=data_dir)


def _passes(s: SegmentStore, clock: ManualClock, ms: int) -> None:
    for _ in range(ms // POLL):
        clock.advance(POLL)
        s.advance_idle_watermarks()


def dump(s: SegmentStore) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in sorted(s.list_segments()):
        info = s.get_info(name)
        start, length = info.start_offset, info.length
        out[name] = (
            info,
            s.get_attributes(name),
            s.read(name, start, length - start).data,
            [s.watermark_at(name, p) for p in range(start, length + 1)],
            s.watermarks_at(name, np.arange(start, length + 1)).tolist(),  # the batch kernels agree
            s.scan_records(name, start, length - start),  # walks file-backed data like memory
        )
    return out


@pytest.fixture(params=["memory", "disk"])
def data_dir(request: pytest.FixtureRequest, tmp_path: Path) -> Path | None:
    return None if request.param == "memory" else tmp_path / "d"


def test_idle_segments_are_evicted_although_the_advancer_keeps_advancing_them(data_dir: Path | None) -> None:
    clock = ManualClock(T0)
    with _store(clock, data_dir) as s:
        s.create_segment("idle")
        s.create_segment("busy")

        def run(ms: int) -> None:
            for _ in range(ms // POLL):
                clock.advance(POLL)
                s.append("busy", b"b")
                s.advance_idle_watermarks()

        run(2 * AGE)
        st = s.eviction_stats
        assert (st.active, st.cold, st.evicted) == (1, 1, 1)
        assert s.advancer_stats.segments_advanced >= AGE // LAG - 1  # it was advanced while active
        assert s.advancer_stats.segments_evicted == 1
        assert sorted(s.list_segments()) == ["busy", "idle"]
        assert s.exists("idle")
        advanced = s.advancer_stats.segments_advanced
        run(5 * LAG)
        assert s.advancer_stats.segments_advanced == advanced  # no more work for an evicted segment
        s._check()


def test_a_reactivated_segment_comes_back_whole_and_advanced(data_dir: Path | None) -> None:
    clock = ManualClock(T0)
    with _store(clock, data_dir, cache_bytes=4096) as s:
        s.create_segment("s")
        for i in range(40):
            clock.advance(3)
            s.append("s", bytes([i]) * (100 + i), writer_id=3, event_number=i)
        s.update_attributes("s", [AttributeUpdate(8, 88)])
        s.truncate("s", 250)
        before = dump(s)["s"]
        _passes(s, clock, AGE + 2 * POLL)
        assert s.eviction_stats.cold == 1
        _passes(s, clock, LAG)  # evicted segments are not advanced ...
        assert s.eviction_stats.cold == 1
        now = clock.now()
        info = s.get_info("s")  # reactivates: idle past the lag, so the watermark moves at once
        assert s.eviction_stats.reactivated == 1 and s.eviction_stats.cold == 0
        assert info.last_write_time == now
        assert s.read("s", info.length, 10).watermark == now - 1
        after = dump(s)["s"]
        assert after[0] == dataclasses.replace(before[0], last_write_time=now)
        del after[1][LAST_WRITE_TIME], before[1][LAST_WRITE_TIME]
        assert after[1] == before[1]  # user attributes and CREATION_TIME
        assert after[2] == before[2]
        assert after[3][:-1] == before[3][:-1]  # every watermark below the tail is unchanged
        s.append("s", b"more", writer_id=3, event_number=39)  # the writer's event number survived
        assert s.get_info("s").length == info.length
        s._check()


def test_reactivation_within_the_lag_and_of_sealed_segments_does_not_advance(data_dir: Path | None) -> None:
    clock = ManualClock(T0)
    with _store(clock, data_dir, max_watermark_lag_ms=10 * AGE) as s:
        s.create_segment("fresh")
        s.create_segment("sealed")
        s.append("sealed", b"final")
        s.seal("sealed")
        lwt = {n: s.get_info(n).last_write_time for n in ("fresh", "sealed")}
        _passes(s, clock, AGE + 2 * POLL)
        assert s.eviction_stats.cold == 2
        for n in ("fresh", "sealed"):
            assert s.get_info(n).last_write_time == lwt[n]
        assert s.read("sealed", 5, 1).end_of_segment
        assert s.eviction_stats.advanced_on_reactivation == 0


def test_the_least_recently_used_beyond_the_cap_are_evicted(data_dir: Path | None) -> None:
    clock = ManualClock(T0)
    with _store(clock, data_dir, max_active_segments=3, eviction_age_ms=10**9) as s:
        for i in range(6):
            clock.advance(1)
            s.create_segment(f"s{i}")
        for i in (3, 1, 5):
            clock.advance(1)
            s.append(f"s{i}", b"x")
        clock.advance(1)
        evicted_before = s.eviction_stats.evicted
        s.advance_idle_watermarks()
        st = s.eviction_stats
        assert (st.active, st.cold, st.evicted - evicted_before) == (3, 3, 3)
        clock.advance(1)
        s.append("s0", b"y")  # reactivates s0; the cap is enforced again at the next pass
        s.advance_idle_watermarks()
        assert s.eviction_stats.active == 3
        assert s.read("s0", 0, 10).data == b"y"
        assert sorted(s.list_segments()) == [f"s{i}" for i in range(6)]


def test_segments_with_waiting_reads_stay_active(data_dir: Path | None) -> None:
    clock = ManualClock(T0)
    with _store(clock, data_dir, max_watermark_lag_ms=10**9) as s:
        s.create_segment("watched")
        s.create_segment("other")
        fut = s.read_future("watched", 0, 10)
        _passes(s, clock, 2 * AGE)
        assert s.eviction_stats.cold == 1 and s.exists("other")
        assert not fut.done()
        s.append("watched", b"data")
        assert fut.result(0).data == b"data"


def test_evicted_names_behave_like_existing_segments(data_dir: Path | None) -> None:
    clock = ManualClock(T0)
    with _store(clock, data_dir) as s:
        s.create_segment("p")
        s.create_segment("q")
        s.append("p", b"parent")
        t = s.create_transaction("p")
        s.append(t, b"+txn")
        s.seal(t)
        _passes(s, clock, AGE + 2 * POLL)
        assert s.eviction_stats.cold == 3
        with pytest.raises(SegmentExistsError):
            s.create_segment("q")
        s.merge_transaction(t)  # both the transaction and its parent come back
        assert s.read("p", 0, 100).data == b"parent+txn"
        s.delete("q")
        assert not s.exists("q")
        s.create_segment("q")
        s._check()


@pytest.mark.parametrize("seed", range(3))
def test_eviction_changes_nothing_a_user_can_see(tmp_path: Path, seed: int) -> None:
    """The same random workload with heavy eviction (and restarts) and without any."""
    results = []
    for evict in (False, True):
        rnd = random.Random(seed)
        clock = ManualClock(T0)
        cfg: dict[str, Any] = dict(max_watermark_lag_ms=10**12)  # no advancing: outputs must match
        if evict:
            cfg.update(eviction_age_ms=30, max_active_segments=2, snapshot_every_ops=17, cache_bytes=2048)
        d = tmp_path / f"d{evict}"
        s = _store(clock, d, **cfg)
        names = [f"s{i}" for i in range(6)]
        for n in names:
            s.create_segment(n)
        evicted = 0
        for step in range(300):
            clock.advance(rnd.randint(0, 20))
            n = rnd.choice(names)
            r = rnd.random()
            if r < 0.5:
                s.append(n, rnd.randbytes(rnd.randint(1, 300)))
            elif r < 0.6:
                s.update_attributes(n, [AttributeUpdate(2, step)])
            elif r < 0.7:
                info = s.get_info(n)
                s.truncate(n, rnd.randint(info.start_offset, info.length))
            elif r < 0.75:
                t = s.create_transaction(n)
                s.append(t, b"t" * rnd.randint(1, 50))
                s.seal(t)
                s.advance_idle_watermarks()
                s.merge_transaction(t)
            elif r < 0.95:
                s.advance_idle_watermarks()
            elif evict:  # a crash, then recovery, in the middle of it all
                crashed = tmp_path / f"crash{step}"
                shutil.copytree(d, crashed)
                evicted += s.eviction_stats.evicted
                s.close()
                shutil.rmtree(d)
                crashed.rename(d)
                s = _store(clock, d, **cfg)
            if step % 25 == 0:
                s._check()
        if evict:
            assert evicted + s.eviction_stats.evicted > 50
        results.append(dump(s))
        s._check()
        s.close()
    assert results[0] == results[1]


def test_evicted_segments_survive_restarts_and_crashes(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    d = tmp_path / "d"
    s = _store(clock, d, max_watermark_lag_ms=10**9)
    s.create_segment("cold")
    s.create_segment("warm")
    s.append("cold", b"cold data")
    s.update_attributes("cold", [AttributeUpdate(4, 44)])
    _passes(s, clock, AGE + 2 * POLL)
    assert s.eviction_stats.cold == 2
    s.append("warm", b"w")
    want = dump(s)  # reactivates both
    _passes(s, clock, AGE + 2 * POLL)
    assert s.eviction_stats.cold == 2
    shutil.copytree(d, tmp_path / "evicted-crash")  # evicted, no snapshot since
    s.snapshot()
    shutil.copytree(d, tmp_path / "evicted-snap")  # the snapshot refers to the state files
    bang = s.append("cold", b"!").timestamp  # reactivated and changed after the snapshot
    shutil.copytree(d, tmp_path / "changed-crash")
    s.close()
    for name, extra in (("evicted-crash", b""), ("evicted-snap", b""), ("changed-crash", b"!"), ("d", b"!")):
        with _store(ManualClock(T0), tmp_path / name, max_watermark_lag_ms=10**9) as r:
            got = dump(r)
            assert got["warm"] == want["warm"], name
            attrs = dict(want["cold"][1])
            if extra:
                attrs[LAST_WRITE_TIME] = bang
            assert got["cold"][1] == attrs, name
            assert got["cold"][2] == b"cold data" + extra, name
            r._check()
