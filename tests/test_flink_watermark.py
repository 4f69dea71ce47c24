"""Watermark combination across channels (StatusWatermarkValve) and heuristic strategies."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flink_compat.errors import InvalidConfigError
from flink_compat.strategies import WatermarkStrategy, WatermarksWithIdleness
from flink_compat.watermark import (
    MIN_TIMESTAMP,
    StatusWatermarkValve,
    ValveState,
    Watermark,
    WatermarkStatus,
)
from segmentstore import ManualClock

IDLE, ACTIVE = WatermarkStatus.IDLE, WatermarkStatus.ACTIVE


def test_combined_watermark_is_min_over_channels_and_emitted_only_when_it_increases() -> None:
    valve = StatusWatermarkValve(2)
    assert valve.input_watermark(Watermark(100), 0) == []  # channel 1 still at MIN
    assert valve.input_watermark(Watermark(50), 1) == [Watermark(50)]
    assert valve.input_watermark(Watermark(120), 1) == [Watermark(100)]
    assert valve.input_watermark(Watermark(110), 1) == []  # channel 1 went down: ignored
    assert valve.input_watermark(Watermark(130), 0) == [Watermark(120)]
    valve._check()


def test_idle_channel_does_not_hold_back_the_combined_watermark() -> None:
    valve = StatusWatermarkValve(3)
    valve.input_watermark(Watermark(10), 0)
    valve.input_watermark(Watermark(20), 1)
    assert valve.input_watermark_status(IDLE, 2) == [Watermark(10)]  # channel 2 (at MIN) left
    assert valve.input_watermark(Watermark(30), 0) == [Watermark(20)]
    assert valve.channel_status(2) is IDLE
    valve._check()


def test_all_channels_idle_flushes_the_max_and_goes_idle_then_active_again() -> None:
    valve = StatusWatermarkValve(2)
    valve.input_watermark(Watermark(10), 0)
    valve.input_watermark(Watermark(40), 1)
    assert valve.input_watermark_status(IDLE, 1) == []  # channel 0 (10) still holds the minimum
    assert valve.input_watermark_status(IDLE, 0) == [Watermark(40), IDLE]
    assert valve.last_output_status is IDLE
    assert valve.input_watermark(Watermark(50), 0) == []  # idle channels' watermarks are ignored
    assert valve.input_watermark_status(ACTIVE, 0) == [ACTIVE]
    valve._check()


def test_reactivated_channel_behind_the_output_is_ignored_until_it_catches_up() -> None:
    valve = StatusWatermarkValve(2)
    valve.input_watermark(Watermark(10), 0)
    valve.input_watermark(Watermark(10), 1)
    valve.input_watermark_status(IDLE, 1)
    assert valve.input_watermark(Watermark(100), 0) == [Watermark(100)]
    valve.input_watermark_status(ACTIVE, 1)
    assert valve.input_watermark(Watermark(50), 1) == []  # behind 100: not aligned, no regression
    assert valve.input_watermark(Watermark(200), 0) == [Watermark(200)]  # channel 1 is not counted...
    assert valve.input_watermark(Watermark(150), 1) == []
    assert valve.input_watermark(Watermark(250), 1) == []  # ...until it reaches the output (200)
    assert valve.input_watermark(Watermark(300), 0) == [Watermark(250)]  # now it holds the minimum
    valve._check()


def test_restored_valve_never_goes_below_the_restored_watermark() -> None:
    valve = StatusWatermarkValve(2)
    valve.restore_state(ValveState(1_000))
    assert valve.input_watermark(Watermark(500), 0) == []
    assert valve.input_watermark(Watermark(900), 1) == []
    assert valve.input_watermark(Watermark(1_200), 1) == []
    assert valve.input_watermark(Watermark(1_100), 0) == [Watermark(1_100)]
    valve._check()


def test_valve_rejects_bad_channels() -> None:
    with pytest.raises(InvalidConfigError, match="num_channels"):
        StatusWatermarkValve(0)
    with pytest.raises(InvalidConfigError, match="channel 2 out of range"):
        StatusWatermarkValve(2).input_watermark(Watermark(1), 2)


_inputs = st.lists(
    st.tuples(st.integers(0, 3), st.one_of(st.integers(0, 1_000), st.sampled_from([IDLE, ACTIVE]))),
    max_size=60,
)


@settings(max_examples=150)  # above the profile's 100: a pure valve, fast examples
@given(_inputs)
def test_valve_output_strictly_ascends_and_keeps_its_invariants(
    inputs: list[tuple[int, int | WatermarkStatus]],
) -> None:
    valve = StatusWatermarkValve(4)
    emitted: list[int] = []
    for channel, item in inputs:
        if isinstance(item, int):
            out = valve.input_watermark(Watermark(item), channel)
        else:
            out = valve.input_watermark_status(item, channel)
        emitted += [e.timestamp for e in out if isinstance(e, Watermark)]
        valve._check()  # aligned channels are never behind the output; idle output <=> all idle
        assert not emitted or emitted[-1] <= max(valve.channel_watermark(c) for c in range(4))
    assert emitted == sorted(set(emitted))


@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 10_000)), max_size=50))
def test_without_idleness_output_is_the_running_minimum_over_channels(inputs: list[tuple[int, int]]) -> None:
    valve = StatusWatermarkValve(3)
    marks = [MIN_TIMESTAMP] * 3
    last = MIN_TIMESTAMP
    for channel, wm in inputs:
        out = valve.input_watermark(Watermark(wm), channel)
        marks[channel] = max(marks[channel], wm)
        expected = [Watermark(min(marks))] if min(marks) > last else []
        assert out == expected
        last = max(last, min(marks))


class _Recorder:
    def __init__(self) -> None:
        self.elements: list[object] = []

    def emit_watermark(self, watermark: Watermark) -> None:
        self.elements.append(watermark)

    def mark_idle(self) -> None:
        self.elements.append(IDLE)

    def mark_active(self) -> None:
        self.elements.append(ACTIVE)


def test_bounded_out_of_orderness_is_max_seen_minus_bound_minus_one() -> None:
    gen = WatermarkStrategy.for_bounded_out_of_orderness(100).create_watermark_generator(ManualClock(0))
    out = _Recorder()
    for ts in (1_000, 1_500, 1_200):
        gen.on_event(None, ts, out)
    gen.on_periodic_emit(out)
    assert out.elements == [Watermark(1_399)]


def test_with_idleness_marks_idle_after_the_timeout_on_the_injected_clock() -> None:
    clock = ManualClock(0)
    gen = (
        WatermarkStrategy.for_bounded_out_of_orderness(0)
        .with_idleness(1_000)
        .create_watermark_generator(clock)
    )
    out = _Recorder()
    gen.on_event(None, 50, out)
    gen.on_periodic_emit(out)  # saw an event: emits
    clock.advance(200)
    gen.on_periodic_emit(out)  # first quiet check: starts the inactivity timer, still emits
    clock.advance(1_000)
    gen.on_periodic_emit(out)  # exactly the timeout: not yet idle
    clock.advance(1)
    gen.on_periodic_emit(out)
    gen.on_periodic_emit(out)  # idle once, not again
    assert out.elements == [Watermark(49), Watermark(49), Watermark(49), IDLE]
    assert isinstance(gen, WatermarksWithIdleness) and gen.is_idle
    gen._check()
    gen.on_event(None, 70, out)
    gen.on_periodic_emit(out)
    assert out.elements[-1] == Watermark(69)
    assert not gen.is_idle
    gen._check()


def test_strategy_options_are_validated() -> None:
    with pytest.raises(InvalidConfigError, match="max_out_of_orderness_ms"):
        WatermarkStrategy.for_bounded_out_of_orderness(-1)
    with pytest.raises(InvalidConfigError, match="idle_timeout_ms"):
        WatermarkStrategy.for_monotonous_timestamps().with_idleness(0)
    s = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda e, _ts: e * 2)
    assert s.create_timestamp_assigner().extract_timestamp(21, MIN_TIMESTAMP) == 42
    assert WatermarkStrategy.no_watermarks().create_timestamp_assigner().extract_timestamp("x", 7) == 7
