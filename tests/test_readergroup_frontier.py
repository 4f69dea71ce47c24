"""The frontier rules every engine shares (``readergroup.reading.frontier``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from readergroup.reading.frontier import (
    END_OF_TIME,
    NO_WATERMARK,
    event_time_watermark,
    frontier_watermark,
    ready_successors,
    waiting_for,
)

int64 = st.integers(NO_WATERMARK, END_OF_TIME)
lag = st.integers(0, 2**63 - 1)


@given(int64, lag)
def test_the_event_time_watermark_stays_in_int64_and_keeps_its_edges(w: int, lag_ms: int) -> None:
    e = event_time_watermark(w, lag_ms)
    assert NO_WATERMARK <= e <= END_OF_TIME
    if w == NO_WATERMARK:
        assert e == NO_WATERMARK  # none stays none
    elif w == END_OF_TIME:
        assert e == END_OF_TIME  # the end of a sealed stream stays the end
    else:
        assert e == max(NO_WATERMARK + 1, w - lag_ms)  # never falls to "none", never wraps
        assert e <= w


@given(int64, lag, lag)
def test_the_event_time_watermark_is_monotonic(w: int, a: int, b: int) -> None:
    assert event_time_watermark(w, max(a, b)) <= event_time_watermark(w, min(a, b))
    if w < END_OF_TIME:
        assert event_time_watermark(w, a) <= event_time_watermark(w + 1, a)


def test_a_negative_lag_is_refused() -> None:
    with pytest.raises(ValueError, match="-1"):
        event_time_watermark(5, -1)


def test_a_merge_successor_is_ready_only_when_every_predecessor_is_done() -> None:
    succ = [("m", ("a", "b")), ("s1", ("c",)), ("s2", ("c",))]
    assert ready_successors(succ, {"a"}) == []
    assert ready_successors(succ, {"a", "c"}) == ["s1", "s2"]
    assert ready_successors(succ, {"a", "b", "c"}) == ["m", "s1", "s2"]
    assert waiting_for(("a", "b"), {"a"}) == {"b"}


def test_the_frontier_watermark_is_the_minimum_of_what_is_still_read() -> None:
    assert frontier_watermark([30, 10, 20]) == 10
    assert frontier_watermark([30], final=[5]) == 30  # finished segments do not hold it back
    assert frontier_watermark([], final=[7, 9]) == 7  # all finished: their final watermarks
    assert frontier_watermark([]) == NO_WATERMARK
    assert frontier_watermark([30, 40], cap=35) == 30 and frontier_watermark([50], cap=35) == 35
