"""Watermark advancer: idle progress (docs/design.md §4.3), candidates, future reads, counters, both modes."""

from __future__ import annotations

import logging
import random
import threading
from typing import Any

import pytest

from segmentstore import (
    LAST_WRITE_TIME,
    AttributeUpdate,
    ManualClock,
    SegmentStore,
    StoreConfig,
    WallClock,
)
from segmentstore.clock import monotonic_s

LAG = 1_000
POLL = 100


def _store(clock: ManualClock, **cfg: Any) -> SegmentStore:
    base: dict[str, Any] = dict(max_watermark_lag_ms=LAG, polling_period_ms=POLL, advancer_thread=False)
    return SegmentStore(clock, StoreConfig(**{**base, **cfg}))


@pytest.mark.parametrize("seed", range(4))
def test_an_idle_tail_watermark_is_never_older_than_lag_plus_polling_period(seed: int) -> None:
    rnd = random.Random(seed)
    clock = ManualClock(1_000_000)
    names = [f"s{i}" for i in range(5)]
    with _store(clock) as s:
        for n in names:
            s.create_segment(n)
        next_pass = clock.now() + POLL
        for _ in range(3_000):
            clock.advance(rnd.randint(0, 40))
            while clock.now() >= next_pass:  # the advancer runs once per polling period
                s.advance_idle_watermarks()
                next_pass += POLL
            if rnd.random() < 0.05:
                s.append(rnd.choice(names[:2]), b"x")  # only two segments ever see writes
            now = clock.now()
            for n in names:
                length = s.get_info(n).length
                tail = s.read(n, length, 10)
                assert tail.at_tail and tail.data == b""
                assert tail.watermark >= now - (LAG + POLL), (n, now, tail.watermark)
                assert s.watermark_at(n, length) == tail.watermark
        s._check()
        assert s.advancer_stats.segments_advanced > 0


def test_sealed_transaction_and_system_segments_are_never_touched() -> None:
    clock = ManualClock(1_000_000)
    with _store(clock) as s:
        s.create_segment("open")
        s.create_segment("sealed")
        s.seal("sealed")
        s.create_segment("_system/_commitStream")
        txn = s.create_transaction("open")
        s.append(txn, b"pending")
        untouched = ["sealed", "_system/_commitStream", txn]
        before = {n: s.get_attributes(n) for n in untouched}
        advanced: list[str] = []
        for _ in range(50):
            clock.advance(LAG)
            advanced += s.advance_idle_watermarks()
        assert set(advanced) == {"open"}
        assert len(advanced) == 50
        assert {n: s.get_attributes(n) for n in untouched} == before
        assert s.get_attributes("open")[LAST_WRITE_TIME] == clock.now()


def test_a_future_read_waiting_at_the_tail_completes_with_the_advanced_watermark() -> None:
    clock = ManualClock(1_000_000)
    with _store(clock) as s:
        s.create_segment("s")
        s.append("s", b"abc")
        fut = s.read_future("s", 3, 100)
        old_wm = fut.watermark
        clock.advance(LAG - 1)
        assert s.advance_idle_watermarks() == []
        assert not fut.done()
        clock.advance(1)
        assert s.advance_idle_watermarks() == ["s"]
        assert fut.done()
        r = fut.result(0)
        assert r.offset == 3 and r.data == b"" and r.at_tail and not r.end_of_segment
        assert r.watermark == clock.now() - 1 > old_wm
        assert s.watermark_at("s", 3) == r.watermark


def test_counters_count_passes_examined_and_advanced_segments() -> None:
    clock = ManualClock(1_000_000)
    with _store(clock) as s:
        for n in ("a", "b", "c"):
            s.create_segment(n)
        s.seal("c")
        assert s.advance_idle_watermarks() == []  # nothing idle yet
        clock.advance(LAG)
        s.update_attributes("b", [AttributeUpdate(1, 1)])  # b is busy
        assert s.advance_idle_watermarks() == ["a"]
        clock.advance(LAG)
        assert sorted(s.advance_idle_watermarks()) == ["a", "b"]
        st = s.advancer_stats
        assert (st.passes, st.segments_examined, st.segments_advanced, st.failed_passes) == (3, 9, 3, 0)


class _FlakyClock:
    """Wall-clock time whose next ``now()`` calls raise when armed."""

    def __init__(self) -> None:
        self._wall = WallClock()
        self.failures = 0
        self.lock = threading.Lock()

    def now(self) -> int:
        with self.lock:
            if self.failures:
                self.failures -= 1
                raise RuntimeError("clock glitch")
        return self._wall.now()


def _wait_for(cond: Any, what: str, timeout_s: float = 10.0) -> None:
    deadline = monotonic_s() + timeout_s
    while not cond():
        assert monotonic_s() < deadline, f"timed out waiting for {what}"
        threading.Event().wait(0.005)


def _advancer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "ingestwm-advancer" and t.is_alive()]


def test_background_mode_survives_a_failed_pass_and_stops_on_close(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = _FlakyClock()
    cfg = StoreConfig(max_watermark_lag_ms=1, polling_period_ms=5, advancer_thread=True)
    before = len(_advancer_threads())
    s = SegmentStore(clock, cfg)
    try:
        assert len(_advancer_threads()) == before + 1
        s.create_segment("s")
        first = s.get_info("s").last_write_time
        _wait_for(lambda: s.advancer_stats.segments_advanced >= 2, "two advances")
        with caplog.at_level(logging.ERROR, logger="segmentstore.core.advancer"):
            with clock.lock:
                clock.failures = 1
            _wait_for(lambda: s.advancer_stats.failed_passes == 1, "the failed pass")
            passes = s.advancer_stats.passes
            _wait_for(lambda: s.advancer_stats.passes >= passes + 2, "passes after the failure")
        assert any("clock glitch" in (r.exc_text or "") for r in caplog.records)
        assert s.get_info("s").last_write_time > first
        s._check()
    finally:
        s.close()
    assert len(_advancer_threads()) == before
    stopped = s.advancer_stats.passes
    threading.Event().wait(0.05)
    assert s.advancer_stats.passes == stopped


def test_the_wall_clock_starts_the_thread_and_a_manual_clock_does_not() -> None:
    before = len(_advancer_threads())
    with SegmentStore(WallClock(), StoreConfig(polling_period_ms=1_000)):
        assert len(_advancer_threads()) == before + 1
    with SegmentStore(ManualClock(0)):
        assert len(_advancer_threads()) == before
    assert len(_advancer_threads()) == before
