"""A failing ``_check()`` shows the structure's state (``segmentstore.checks``), bounded."""

from __future__ import annotations

import pytest

from flink_compat import (
    CollectingOutput,
    CountAggregate,
    StatusWatermarkValve,
    TumblingEventTimeWindows,
    Watermark,
    WindowOperator,
)
from segmentstore.checks import checked, state_repr


class _Range:
    __slots__ = ("high", "low")

    def __init__(self, low: int, high: int) -> None:
        self.low, self.high = low, high

    @checked
    def _check(self) -> None:
        assert self.low <= self.high


class _Holder:
    def __init__(self, inner: _Range) -> None:
        self.inner = inner
        self.items = list(range(10_000))

    @checked
    def _check(self) -> None:
        self.inner._check()


def test_a_failed_check_names_the_assert_and_shows_the_state() -> None:
    _Range(1, 2)._check()
    with pytest.raises(AssertionError) as info:
        _Range(5, 3)._check()
    msg = str(info.value)
    assert "5 <= 3" in msg  # pytest rewrites this module's asserts; library ones are not (below)
    assert "_Range state: _Range(high=3, low=5)" in msg
    assert isinstance(info.value.__cause__, AssertionError)  # the original assert, chained


def test_nested_checks_show_the_innermost_state_once_and_bounded() -> None:
    with pytest.raises(AssertionError) as info:
        _Holder(_Range(5, 3))._check()
    msg = str(info.value)
    assert msg.count("state:") == 1 and "_Range state" in msg
    assert len(state_repr(_Holder(_Range(0, 0)), limit=200)) <= 200


def test_a_real_structure_shows_its_fields() -> None:
    valve = StatusWatermarkValve(2)
    valve.input_watermark(Watermark(10), 0)
    valve._check()
    valve._last_output_watermark = 50  # corrupt it: channel 0 is aligned below the output
    with pytest.raises(AssertionError, match=r"(?s)channel 0 below the output.*_last_output_watermark=50"):
        valve._check()


def test_a_bare_library_assert_is_named_by_its_line() -> None:
    op = WindowOperator(TumblingEventTimeWindows.of(10), CountAggregate())
    op.setup(CollectingOutput())
    op._check()
    op._late = -1
    with pytest.raises(AssertionError, match=r"(?s)invariant failed: assert self._late >= 0 \(windows.py:"):
        op._check()
