"""The simulator's kernels against numpy: the recorder's per-batch counts (through the kernel's
compiled entries, the columns in any layout) with the ids kept or not, and the writers' framing."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.sim import recorder as recorder_module
from bench.sim import workloads
from bench.sim.recorder import Recorder
from bench.sim.workloads import FrameBuilder
from readergroup.format.events import NO_EVENT_TIME
from readergroup.reading.read_results import EventBatch

WRITERS = 3


def _batch(
    ids: list[tuple[int, int]],
    times: list[tuple[int, int]],
    large: bool,
    skip: int,
    epoch: int,
    wm: int | None,
) -> EventBatch:
    """A batch of events with these (writer, number) payloads and (ingestion, event) times; its
    payload array a slice ``skip`` events in (a nonzero Arrow offset)."""
    n = len(ids)
    pads = [bytes(skip and 3)] * skip
    payloads = pads + [w.to_bytes(4, "little") + s.to_bytes(4, "little") + b"xy" for w, s in ids]
    pays = pa.array(payloads, pa.large_binary() if large else pa.binary()).slice(skip)
    return EventBatch(
        epoch=epoch,
        watermark=wm,
        checkpoint_name=None,
        segments=("s",),
        segment_index=np.zeros(n, np.int64),
        offset=np.arange(n, dtype=np.int64),
        length=np.ones(n, np.int64),
        event_time=np.array([e for _, e in times], np.int64),
        ingestion_time=np.array([i for i, _ in times], np.int64),
        routing_key=pa.array(["k"] * n),
        payload=pays,
    )


def _state(rec: Recorder) -> tuple[object, ...]:
    return (
        rec._counts.tolist(),
        rec.duplicates,
        rec.events_unique,
        rec.group_emitted,
        rec.watermarks_returned,
        rec.watermark_violations,
    )


_time = st.one_of(st.just(NO_EVENT_TIME), st.integers(-50, 50))
_event = st.tuples(st.tuples(st.integers(0, WRITERS - 1), st.integers(0, 63)), st.tuples(_time, _time))
_batches = st.lists(
    st.tuples(
        st.lists(_event, max_size=40),
        st.booleans(),  # large binary
        st.integers(0, 2),  # events skipped by the slice
        st.integers(0, 1),  # epoch
        st.one_of(st.none(), st.integers(-60, 60)),  # watermark
        st.booleans(),  # columns strided (not C-contiguous views)
    ),
    max_size=6,
)


@settings(max_examples=60, deadline=None)
@given(batches=_batches, lag=st.integers(0, 20))
def test_the_kernel_counts_as_numpy_does_with_or_without_the_ids(
    batches: list[tuple[list[tuple[tuple[int, int], tuple[int, int]]], bool, int, int, int | None, bool]],
    lag: int,
) -> None:
    mp = pytest.MonkeyPatch()
    recs = [Recorder(["a", "b", "c"], lag, False) for _ in range(3)]
    for rec in recs:
        rec.allocate(64)
    try:
        mp.setattr(workloads, "_KERNEL_MIN_EVENTS", 1)
        mp.setattr(workloads, "_KERNEL_LOADED_MIN_EVENTS", 1)
        for events, large, skip, epoch, wm, strided in batches:
            batch = _batch([e[0] for e in events], [e[1] for e in events], large, skip, epoch, wm)
            if strided:  # another layout: the compiled entry reads it by its strides
                object.__setattr__(batch, "event_time", np.repeat(batch.event_time, 2)[::2])
            got = recs[0].on_batch(7, "r", batch)
            assert recs[1].count_batch(7, "r", batch) in (None, (recorder_module._NONE,) * 2)
            with mp.context() as numpy_only:
                numpy_only.setattr(recorder_module, "sim_kernels", lambda n: None)
                want = recs[2].on_batch(7, "r", batch)
            assert got[0].tolist() == want[0].tolist() == [e[0][0] for e in events]
            assert got[1].tolist() == want[1].tolist() == [e[0][1] for e in events]
            assert _state(recs[0]) == _state(recs[1]) == _state(recs[2])
    finally:
        mp.undo()
    assert recs[0].delivered.tolist() == recs[0]._counts[0].tolist()


def test_a_column_of_another_dtype_is_counted_by_numpy() -> None:
    """The kernel's compiled entry takes int64 columns only (unchecked): a batch with another is
    counted by numpy's path."""
    recs = [Recorder(["a"], 0, False) for _ in range(2)]
    batch = _batch([(0, i) for i in range(20)], [(i - 10, 1) for i in range(20)], False, 0, 0, 0)
    narrow = _batch([(0, i) for i in range(20)], [(i - 10, 1) for i in range(20)], False, 0, 0, 0)
    object.__setattr__(narrow, "ingestion_time", narrow.ingestion_time.astype(np.int32))
    for rec, b in zip(recs, (batch, narrow), strict=True):
        rec.allocate(64)
        w, s = rec.on_batch(0, "r", b)
        assert w.tolist() == [0] * 20 and s.tolist() == list(range(20))
    assert recs[0]._counts.tolist() == recs[1]._counts.tolist() == [[20], [11], [0]]


@settings(max_examples=60, deadline=None)
@given(
    events=st.lists(st.tuples(st.integers(0, 5), st.integers(-(2**40), 2**40), st.integers(0, 2**32 - 1))),
    key_seg=st.lists(st.integers(0, 3), min_size=6, max_size=6),
)
def test_frames_by_segment_are_the_events_framed_grouped_by_segment_stably(
    events: list[tuple[int, int, int]], key_seg: list[int]
) -> None:
    """The writers' kernel (``FrameBuilder.build_by_segment``) frames the events grouped by segment,
    each segment's in batch order, as ``build`` frames them one by one; its runs end where they do."""
    keys = [f"key-{i}" for i in range(6)]
    fb = FrameBuilder(2, keys, 12)
    key_idx = np.array([e[0] for e in events], np.int64)
    et = np.array([e[1] for e in events], np.int64)
    seqs = np.array([e[2] for e in events], np.int64)
    segs = np.array(key_seg, np.int64)
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(workloads, "_KERNEL_MIN_EVENTS", 1)
        mp.setattr(workloads, "_KERNEL_LOADED_MIN_EVENTS", 1)
        built = fb.build_by_segment(key_idx, et, seqs, segs, 4)
    finally:
        mp.undo()
    if not events:
        assert built is None
        return
    assert built is not None
    frames, seg_of, ends = built
    order = np.argsort(segs[key_idx], kind="stable")
    assert bytes(frames) == fb.build(key_idx[order], et[order], seqs[order])
    grouped = segs[key_idx][order]
    assert seg_of == sorted(set(grouped.tolist()))
    assert ends == [int(np.searchsorted(grouped, s, side="right")) for s in seg_of]


def test_account_entries_fall_back_to_the_kernel_without_numba_s_entry_points() -> None:
    """The compiled entries are numba's own attribute: a numba without it gives the kernel (dispatch)."""
    from bench.sim import _sim_kernels

    k = SimpleNamespace(overloads={"sig": object()})
    assert _sim_kernels._entry(k, "sig") is k
    assert _sim_kernels._entry(k, "other") is k
    assert all(callable(e) and e is not _sim_kernels.account for e in _sim_kernels.ACCOUNT_ENTRIES)
