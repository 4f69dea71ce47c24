"""Ingestion clocks: ManualClock moves only when told (also backwards), WallClock reads real time."""

from __future__ import annotations

import threading
import time

import pytest

from segmentstore import Clock, ManualClock, WallClock


def test_manual_clock_starts_where_told_and_stays_there() -> None:
    c = ManualClock(1_234)
    assert c.now() == 1_234
    assert c.now() == 1_234
    assert ManualClock().now() == 0


def test_manual_clock_advance_returns_and_sets_new_time() -> None:
    c = ManualClock(100)
    assert c.advance(5) == 105
    assert c.now() == 105
    assert c.advance(0) == 105
    assert c.now() == 105


def test_manual_clock_set_can_step_back() -> None:
    c = ManualClock(1_000)
    assert c.set(2_000) == 2_000
    assert c.now() == 2_000
    assert c.set(10) == 10  # a wall-clock step back
    assert c.now() == 10


def test_manual_clock_refuses_negative_advance() -> None:
    c = ManualClock(50)
    with pytest.raises(ValueError, match="-3"):
        c.advance(-3)
    assert c.now() == 50


@pytest.mark.parametrize("bad", [1.5, "7", None, True, 2.0])
def test_manual_clock_rejects_non_int_milliseconds(bad: object) -> None:
    with pytest.raises(TypeError):
        ManualClock(bad)  # type: ignore[arg-type]
    c = ManualClock(9)
    with pytest.raises(TypeError):
        c.advance(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        c.set(bad)  # type: ignore[arg-type]
    assert c.now() == 9


def test_manual_clock_advances_from_many_threads_add_up() -> None:
    c = ManualClock(0)
    n_threads, per_thread = 4, 2_000

    def work() -> None:
        for _ in range(per_thread):
            c.advance(1)

    threads = [threading.Thread(target=work) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert c.now() == n_threads * per_thread


def test_wall_clock_reads_epoch_milliseconds_as_int() -> None:
    c = WallClock()
    before = time.time_ns() // 1_000_000
    now = c.now()
    after = time.time_ns() // 1_000_000
    assert type(now) is int
    assert before <= now <= after


def test_both_clocks_satisfy_the_clock_protocol() -> None:
    assert isinstance(WallClock(), Clock)
    assert isinstance(ManualClock(0), Clock)
    assert not isinstance(object(), Clock)


def test_reprs_name_the_clock() -> None:
    assert repr(ManualClock(42)) == "ManualClock(42)"
    assert repr(WallClock()) == "WallClock()"
