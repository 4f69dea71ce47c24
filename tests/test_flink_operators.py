"""EventTimeOrderingOperator and the event-time windows, through their public operator API."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flink_compat.errors import CheckpointError, InvalidConfigError, MissingTimestampError
from flink_compat.job_checkpoint import JobCheckpoint, OperatorState
from flink_compat.operators import (
    LATE_DATA,
    CollectingOutput,
    EventTimeOrderingOperator,
    MapOperator,
    OutputTag,
)
from flink_compat.watermark import MAX_TIMESTAMP, StreamRecord, Watermark
from flink_compat.windows import (
    CountAggregate,
    ListAggregate,
    SlidingEventTimeWindows,
    TimeWindow,
    TumblingEventTimeWindows,
    WindowOperator,
    WindowResult,
)


def _ordering(tag: OutputTag | None = LATE_DATA) -> tuple[EventTimeOrderingOperator, CollectingOutput]:
    op, out = EventTimeOrderingOperator(tag), CollectingOutput()
    op.setup(out)
    return op, out


def test_ordering_operator_emits_in_event_time_order_when_the_watermark_passes() -> None:
    op, out = _ordering()
    for ts, v in [(30, "c"), (10, "a"), (20, "b"), (10, "a2"), (50, "e")]:
        op.process_element(StreamRecord(v, ts))
    assert out.elements == []
    op.process_watermark(Watermark(30))
    assert out.elements == [
        StreamRecord("a", 10),
        StreamRecord("a2", 10),  # ties keep arrival order
        StreamRecord("b", 20),
        StreamRecord("c", 30),
        Watermark(30),  # records due at a watermark come before it
    ]
    assert op.num_buffered == 1
    op._check()


def test_ordering_operator_sends_late_records_to_the_side_output_and_counts_them() -> None:
    op, out = _ordering()
    op.process_watermark(Watermark(100))
    op.process_element(StreamRecord("on-time", 101))
    op.process_element(StreamRecord("late", 100))  # <= watermark: late
    op.process_element(StreamRecord("very late", 3))
    assert op.num_late_records_dropped == 2
    assert out.side(LATE_DATA) == [StreamRecord("late", 100), StreamRecord("very late", 3)]
    op.process_watermark(Watermark(99))  # a lower watermark is ignored
    assert out.watermarks == [Watermark(100)]
    op.process_watermark(Watermark(MAX_TIMESTAMP))
    assert out.records == [StreamRecord("on-time", 101)]


def test_ordering_operator_without_a_side_output_only_counts_late_records() -> None:
    op, out = _ordering(None)
    op.process_watermark(Watermark(10))
    op.process_element(StreamRecord("late", 5))
    assert op.num_late_records_dropped == 1
    assert out.side_outputs == {}


def test_records_without_timestamps_are_rejected() -> None:
    op, _ = _ordering()
    with pytest.raises(MissingTimestampError, match="no timestamp"):
        op.process_element(StreamRecord("x"))


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("r"), st.integers(0, 200)),
        st.tuples(st.just("w"), st.integers(0, 200)),
    ),
    max_size=80,
)


@settings(max_examples=150)  # above the profile's 100: a pure operator model, fast examples
@given(_ops)
def test_ordering_operator_against_a_model(ops: list[tuple[str, int]]) -> None:
    op, out = _ordering()
    wm, late, seen = -(2**63), [], []
    for i, (kind, t) in enumerate(ops):
        if kind == "r":
            op.process_element(StreamRecord(i, t))
            seen.append((t, i))
            if t <= wm:
                late.append(StreamRecord(i, t))
        else:
            op.process_watermark(Watermark(t))
            wm = max(wm, t)
        op._check()
    op.process_watermark(Watermark(MAX_TIMESTAMP))
    on_time = sorted((t, i) for t, i in seen if StreamRecord(i, t) not in late)
    assert [(r.timestamp, r.value) for r in out.records] == on_time
    assert out.side(LATE_DATA) == late
    # Each emitted record comes after the previous watermark and before the next one.
    last_wm = -(2**63)
    for e in out.elements:
        if isinstance(e, Watermark):
            assert e.timestamp > last_wm
            last_wm = e.timestamp
        else:
            assert isinstance(e, StreamRecord) and e.timestamp is not None and e.timestamp > last_wm


def test_ordering_operator_state_survives_a_json_round_trip() -> None:
    op, _ = _ordering()
    op.process_watermark(Watermark(5))
    op.process_element(StreamRecord(("k", b"\x00\xff"), 9))
    op.process_element(StreamRecord(("k", b"x"), 7))
    op.process_element(StreamRecord("late", 1))
    cp = JobCheckpoint(1, None, (), (), ((op.snapshot_state(),),))
    restored_cp = JobCheckpoint.from_json(cp.to_json())
    assert restored_cp == cp
    op2, out2 = _ordering()
    op2.restore_state(restored_cp.operators[0][0])
    op2._check()
    assert op2.current_watermark == 5
    assert op2.num_late_records_dropped == 1
    op2.process_element(StreamRecord("late again", 5))  # the restored watermark still holds
    op2.process_watermark(Watermark(10))
    assert out2.records == [StreamRecord(("k", b"x"), 7), StreamRecord(("k", b"\x00\xff"), 9)]
    assert out2.side(LATE_DATA) == [StreamRecord("late again", 5)]


def test_restore_rejects_another_operators_state() -> None:
    op, _ = _ordering()
    with pytest.raises(CheckpointError, match="WindowOperator"):
        op.restore_state(OperatorState("WindowOperator", 0, {}))


# --- windows -----------------------------------------------------------------------------------


def test_window_assigners_follow_flink() -> None:
    assert TumblingEventTimeWindows.of(10).assign_windows(25) == (TimeWindow(20, 30),)
    assert TumblingEventTimeWindows.of(10, 3).assign_windows(25) == (TimeWindow(23, 33),)
    assert TumblingEventTimeWindows.of(10).assign_windows(-1) == (TimeWindow(-10, 0),)
    assert SlidingEventTimeWindows.of(30, 10).assign_windows(25) == (
        TimeWindow(0, 30),
        TimeWindow(10, 40),
        TimeWindow(20, 50),
    )
    assert TimeWindow(20, 30).max_timestamp() == 29
    with pytest.raises(InvalidConfigError, match="size"):
        TumblingEventTimeWindows.of(0)
    with pytest.raises(InvalidConfigError, match="slide"):
        SlidingEventTimeWindows.of(10, -1)


def _windows(**kw: object) -> tuple[WindowOperator, CollectingOutput]:
    op = WindowOperator(**kw)  # type: ignore[arg-type]
    out = CollectingOutput()
    op.setup(out)
    return op, out


def test_tumbling_window_fires_when_the_watermark_reaches_its_max_timestamp() -> None:
    op, out = _windows(assigner=TumblingEventTimeWindows.of(10), aggregate=CountAggregate(), key_selector=str)
    for v, ts in [("a", 1), ("a", 9), ("b", 5), ("a", 10)]:
        op.process_element(StreamRecord(v, ts))
    op.process_watermark(Watermark(8))
    assert out.records == []
    op.process_watermark(Watermark(9))
    assert sorted((r.value.key, r.value.value, r.timestamp) for r in out.records) == [
        ("a", 2, 9),
        ("b", 1, 9),
    ]
    assert op.num_open_windows == 1
    op._check()


def test_allowed_lateness_refires_late_records_and_drops_them_after_cleanup() -> None:
    late = OutputTag("late")
    op, out = _windows(
        assigner=TumblingEventTimeWindows.of(10),
        aggregate=ListAggregate(),
        allowed_lateness=5,
        late_output_tag=late,
    )
    op.process_element(StreamRecord("x", 3))
    op.process_watermark(Watermark(9))
    assert [r.value for r in out.records] == [WindowResult(None, TimeWindow(0, 10), ("x",), 0)]
    op.process_element(StreamRecord("y", 4))  # late, within lateness: fires again at once
    assert out.records[-1].value == WindowResult(None, TimeWindow(0, 10), ("x", "y"), 1)
    op.process_watermark(Watermark(14))  # cleanup time 9 + 5
    op._check()
    assert op.num_open_windows == 0
    op.process_element(StreamRecord("z", 2))
    assert out.side(late) == [StreamRecord("z", 2)]
    assert op.num_late_records_dropped == 1
    assert len(out.records) == 2


def test_sliding_windows_count_each_record_in_every_window() -> None:
    op, out = _windows(assigner=SlidingEventTimeWindows.of(20, 10), aggregate=CountAggregate())
    for ts in (5, 15, 25):
        op.process_element(StreamRecord(ts, ts))
    op.process_watermark(Watermark(MAX_TIMESTAMP))
    got = {(r.value.window.start, r.value.window.end): r.value.value for r in out.records}
    assert got == {(-10, 10): 1, (0, 20): 2, (10, 30): 2, (20, 40): 1}


@settings(max_examples=60)  # below the profile's 100: each example runs whole windows
@given(
    st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 100)), max_size=40),
    st.integers(1, 30),
    st.integers(1, 30),
    st.integers(0, 40),
)
def test_windows_match_a_brute_force_model_and_survive_restore(
    records: list[tuple[str, int]], size: int, slide: int, cut: int
) -> None:
    size = max(size, slide)
    assigner = SlidingEventTimeWindows.of(size, slide)
    op, out = _windows(assigner=assigner, aggregate=CountAggregate(), key_selector=lambda v: v[0])
    cut = min(cut, len(records))
    for i, (k, ts) in enumerate(records):
        if i == cut:  # restore into a fresh operator half-way through
            state = JobCheckpoint.from_json(
                JobCheckpoint(0, None, (), (), ((op.snapshot_state(),),)).to_json()
            )
            op = WindowOperator(assigner, CountAggregate(), key_selector=lambda v: v[0])
            op.setup(out)
            op.restore_state(state.operators[0][0])
        op.process_element(StreamRecord((k, ts), ts))
        op._check()
    op.process_watermark(Watermark(MAX_TIMESTAMP))
    expected: Counter[tuple[str, int, int]] = Counter()
    for k, ts in records:
        for w in assigner.assign_windows(ts):
            expected[(k, w.start, w.end)] += 1
    got = {(r.value.key, r.value.window.start, r.value.window.end): r.value.value for r in out.records}
    assert got == dict(expected)
    assert all(r.timestamp == r.value.window.max_timestamp() for r in out.records)


def test_map_operator_keeps_timestamps_and_forwards_watermarks() -> None:
    op, out = MapOperator(str.upper), CollectingOutput()
    op.setup(out)
    op.process_element(StreamRecord("a", 5))
    op.process_watermark(Watermark(7))
    assert out.elements == [StreamRecord("A", 5), Watermark(7)]
