"""Tests of the per-segment watermark index (docs/design.md §1, PDP-26 representation)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from segmentstore.core.watermark_index import WatermarkIndex

CT = 1_000  # creation time used throughout


class RefIndex:
    """Plain reference model: a list of (end_offset, timestamp) writes."""

    def __init__(self, creation_time: int, start_offset: int = 0) -> None:
        self.writes: list[tuple[int, int]] = []
        self.start = start_offset
        self.length = start_offset
        self.tail = creation_time

    def write(self, end: int, ts: int) -> None:
        assert end > self.length and ts >= self.tail
        self.writes.append((end, ts))
        self.length, self.tail = end, ts

    def time(self, ts: int) -> None:
        assert ts >= self.tail
        self.tail = ts

    def truncate(self, s: int) -> None:
        assert self.start <= s <= self.length
        self.start = s

    def ingestion_time_at(self, o: int) -> int:
        assert self.start <= o < self.length
        for end, ts in self.writes:
            if o < end:
                return ts
        raise AssertionError("unreachable")

    def watermark_at(self, p: int) -> int:
        assert self.start <= p <= self.length
        return self.tail - 1 if p == self.length else self.ingestion_time_at(p) - 1


def _agree(idx: WatermarkIndex, ref: RefIndex, kernels: bool = True) -> None:
    """Scalar and batch answers of ``idx`` equal the reference model everywhere."""
    idx._check()
    assert (idx.start_offset, idx.length, idx.tail_time) == (ref.start, ref.length, ref.tail)
    ps = np.arange(ref.start, ref.length + 1, dtype=np.int64)
    want = np.array([ref.watermark_at(int(p)) for p in ps], dtype=np.int64)
    assert [idx.watermark_at(int(p)) for p in ps] == want.tolist()
    assert np.array_equal(idx.watermarks_at(ps), want)
    assert np.array_equal(idx.watermarks_at(ps[::-1]), want[::-1])
    if not kernels:
        return
    # past the small-batch path: the parallel kernels, sorted and shuffled
    reps = 200 // len(ps) + 1
    assert np.array_equal(idx.watermarks_at(np.repeat(ps, reps)), np.repeat(want, reps))
    perm = np.random.default_rng(len(ps)).permutation(len(ps) * reps)
    assert np.array_equal(idx.watermarks_at(np.tile(ps, reps)[perm]), np.tile(want, reps)[perm])
    if ref.length > ref.start:
        bytes_ = ps[:-1]
        assert np.array_equal(idx.ingestion_times_at(bytes_), want[:-1] + 1)
        assert [idx.ingestion_time_at(int(p)) for p in bytes_] == (want[:-1] + 1).tolist()


# ---------------------------------------------------------------------- basics


def test_empty_segment_has_the_minus_one_entry() -> None:
    idx = WatermarkIndex(CT)
    assert (idx.length, idx.start_offset, idx.tail_time, idx.creation_time) == (0, 0, CT, CT)
    assert len(idx) == 1
    offs, wms = idx.entries()
    assert offs.tolist() == [-1] and wms.tolist() == [CT - 1]
    assert idx.watermark_at(0) == CT - 1
    assert idx.watermarks_at(np.array([0, 0])).tolist() == [CT - 1, CT - 1]
    with pytest.raises(ValueError, match="offset 0"):
        idx.ingestion_time_at(0)
    idx._check()


def test_restored_empty_segment_with_start_offset() -> None:
    idx = WatermarkIndex(CT, start_offset=500)
    assert (idx.length, idx.start_offset, len(idx)) == (500, 500, 1)
    assert idx.watermark_at(500) == CT - 1
    with pytest.raises(ValueError, match="499"):
        idx.watermark_at(499)
    idx.record_write(510, CT + 3)
    assert idx.watermark_at(500) == CT + 2
    assert idx.ingestion_time_at(509) == CT + 3
    idx._check()


def test_writes_and_lookups() -> None:
    idx = WatermarkIndex(CT)
    idx.record_write(10, 1005)
    idx.record_write(30, 1007)
    idx.record_write(31, 1020)
    assert len(idx) == 4
    assert [idx.ingestion_time_at(o) for o in (0, 9, 10, 29, 30)] == [1005, 1005, 1007, 1007, 1020]
    assert [idx.watermark_at(p) for p in (0, 9, 10, 29, 30, 31)] == [
        1004,
        1004,
        1006,
        1006,
        1019,
        1019,
    ]
    offs, wms = idx.entries()
    assert offs.tolist() == [-1, 9, 29, 30] and wms.tolist() == [CT - 1, 1004, 1006, 1019]
    idx._check()


def test_watermark_never_decreases_with_position() -> None:
    idx = WatermarkIndex(CT)
    rng = np.random.default_rng(5)
    end, ts = 0, CT
    for _ in range(300):
        end += int(rng.integers(1, 20))
        ts += int(rng.integers(0, 3))
        idx.record_write(end, ts)
    wm = idx.watermarks_at(np.arange(idx.length + 1))
    assert np.all(np.diff(wm) >= 0)
    assert wm[0] >= CT - 1


def test_same_timestamp_writes_share_an_entry() -> None:
    idx = WatermarkIndex(CT)
    idx.record_write(5, CT)  # same ts as creation: the -1 entry stays separate
    assert len(idx) == 2
    for end in range(6, 50):
        idx.record_write(end, CT)
    assert len(idx) == 2
    assert idx.entries()[0].tolist() == [-1, 48]
    assert idx.watermark_at(0) == idx.watermark_at(49) == CT - 1
    idx.record_write(60, CT + 1)
    assert len(idx) == 3
    assert idx.watermark_at(48) == CT - 1 and idx.watermark_at(49) == CT
    idx._check()


def test_tail_raise_moves_tail_only_and_keeps_memory() -> None:
    idx = WatermarkIndex(CT)
    idx.record_write(100, CT + 1)
    n, nbytes = len(idx), idx.nbytes
    for t in range(CT + 1, CT + 20_001):
        idx.record_time(t)
    assert (len(idx), idx.nbytes) == (n, nbytes)
    assert idx.tail_time == CT + 20_000
    assert idx.watermark_at(100) == CT + 19_999
    assert idx.watermark_at(99) == CT
    # a write at the raised tail time is a new entry (its ts differs from the last write's)
    idx.record_write(101, CT + 20_000)
    assert len(idx) == n + 1 and idx.watermark_at(100) == CT + 19_999
    idx._check()


def test_numpy_integer_scalars_accepted() -> None:
    idx = WatermarkIndex(np.int64(CT), np.int32(0))
    idx.record_write(np.int64(10), np.int64(CT + 1))
    idx.record_time(np.uint16(CT + 2))
    assert idx.watermark_at(np.int64(3)) == CT
    assert idx.watermark_at(np.int64(10)) == CT + 1
    assert type(idx.watermark_at(np.int64(3))) is int
    assert type(idx.length) is int and type(idx.tail_time) is int
    idx._check()


# ---------------------------------------------------------------------- errors


def test_misuse_raises_value_error_naming_the_value() -> None:
    idx = WatermarkIndex(CT)
    idx.record_write(10, CT + 5)
    with pytest.raises(ValueError, match="end_offset 10"):
        idx.record_write(10, CT + 6)
    with pytest.raises(ValueError, match="end_offset 3"):
        idx.record_write(3, CT + 6)
    with pytest.raises(ValueError, match="timestamp 1004"):
        idx.record_write(20, CT + 4)
    with pytest.raises(ValueError, match="timestamp 1004"):
        idx.record_time(CT + 4)
    with pytest.raises(ValueError, match="offset 11"):
        idx.watermark_at(11)
    with pytest.raises(ValueError, match="offset -1"):
        idx.watermark_at(-1)
    with pytest.raises(ValueError, match="offset 10"):
        idx.ingestion_time_at(10)
    with pytest.raises(ValueError, match="integer"):
        idx.record_write(20.0, CT + 6)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="integer"):
        idx.watermark_at("3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="int64"):
        idx.record_write(2**63, CT + 6)
    with pytest.raises(ValueError, match="timestamp 9223372036854775809 is outside the int64"):
        idx.record_write(20, 2**63 + 1)
    with pytest.raises(ValueError, match="int64"):
        idx.record_time(2**63)
    with pytest.raises(ValueError, match="negative"):
        WatermarkIndex(CT, -1)
    with pytest.raises(ValueError, match="truncation offset 11"):
        idx.truncate(11)
    idx.truncate(5)
    with pytest.raises(ValueError, match="truncation offset 4"):
        idx.truncate(4)
    with pytest.raises(ValueError, match="offset 4"):
        idx.watermark_at(4)
    # nothing above changed the index
    assert (idx.length, idx.tail_time, idx.start_offset) == (10, CT + 5, 5)
    idx._check()


def test_batch_misuse() -> None:
    idx = WatermarkIndex(CT)
    idx.record_write(10, CT + 5)
    with pytest.raises(ValueError, match="dtype float64"):
        idx.watermarks_at(np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="offset 11 \\(at position 2\\)"):
        idx.watermarks_at(np.array([1, 2, 11, 3]))
    with pytest.raises(ValueError, match="offset -1"):
        idx.watermarks_at(np.array([5, -1]))
    big = np.arange(500) % 10
    big[321] = 12  # out of range in the middle of an unsorted big batch
    with pytest.raises(ValueError, match="offset 12 \\(at position 321\\)"):
        idx.watermarks_at(big)
    srt = np.zeros(500, np.int64)
    srt[300:] = 11  # sorted, last one out of range
    with pytest.raises(ValueError, match="offset 11 \\(at position 499\\)"):
        idx.watermarks_at(srt)
    with pytest.raises(ValueError, match="offset 10"):
        idx.ingestion_times_at(np.array([0, 10]))
    with pytest.raises(ValueError, match="int64"):
        idx.watermarks_at(np.array([1, 2]), out=np.empty(2, np.int32))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="shape"):
        idx.watermarks_at(np.array([1, 2]), out=np.empty(3, np.int64))
    with pytest.raises(ValueError, match="contiguous"):
        idx.watermarks_at(np.array([1, 2]), out=np.empty(4, np.int64)[::2])
    with pytest.raises(ValueError, match="int64 range"):
        idx.watermarks_at(np.array([2**63], np.uint64))


# ---------------------------------------------------------------------- batch


def _big_index(n: int, seed: int, dup_every: int = 0) -> WatermarkIndex:
    rng = np.random.default_rng(seed)
    ends = np.cumsum(rng.integers(1, 50, n))
    tss = CT + np.cumsum(rng.integers(0, 3, n))
    idx = WatermarkIndex(CT)
    idx.record_writes(ends, tss)
    return idx


@pytest.mark.parametrize("nq", [1, 7, 64, 65, 1000, 40_000])
def test_batch_equals_scalar_random_and_sorted(nq: int) -> None:
    idx = _big_index(20_000, seed=nq)
    rng = np.random.default_rng(nq)
    q = rng.integers(0, idx.length + 1, nq)
    q[: min(nq, 3)] = idx.length  # tail queries too
    rng.shuffle(q)
    want = np.array([idx.watermark_at(int(x)) for x in q])
    for flag in (None, False, True):  # True on unsorted data must still be right
        assert np.array_equal(idx.watermarks_at(q, assume_sorted=flag), want)
    qs = np.sort(q)
    ws = np.array([idx.watermark_at(int(x)) for x in qs])
    for flag in (None, False, True):
        assert np.array_equal(idx.watermarks_at(qs, assume_sorted=flag), ws)
    b = q[q < idx.length]
    assert np.array_equal(idx.ingestion_times_at(b), [idx.ingestion_time_at(int(x)) for x in b])
    assert np.array_equal(idx.ingestion_times_at(np.sort(b)), np.sort(want[q < idx.length]) + 1)


@pytest.mark.parametrize("at", [1, 4095, 4096, 40_000, 49_998])
def test_batch_nearly_sorted_falls_back(at: int) -> None:
    idx = _big_index(5_000, seed=3)
    q = np.sort(np.random.default_rng(3).integers(0, idx.length + 1, 50_000))
    q[at - 1], q[at] = q[at] + 1, q[at - 1]  # one descent, also at a chunk boundary
    assert q[at] < q[at - 1]
    want = np.array([idx.watermark_at(int(x)) for x in q])
    assert np.array_equal(idx.watermarks_at(q), want)
    assert np.array_equal(idx.watermarks_at(q[:3000]), want[:3000])  # one thread


def test_batch_shapes_dtypes_and_out() -> None:
    idx = _big_index(1_000, seed=4)
    q = np.random.default_rng(4).integers(0, idx.length + 1, (30, 40))
    want = np.vectorize(idx.watermark_at)(q)
    got = idx.watermarks_at(q)
    assert got.shape == (30, 40) and got.dtype == np.int64
    assert np.array_equal(got, want)
    assert np.array_equal(idx.watermarks_at(q.astype(np.int32)), want)
    assert np.array_equal(idx.watermarks_at(q.astype(np.uint64)), want)
    assert np.array_equal(idx.watermarks_at(q.tolist()), want)
    assert np.array_equal(idx.watermarks_at(np.asfortranarray(q)), want)
    assert np.array_equal(idx.watermarks_at(q[:, ::3]), want[:, ::3])
    out = np.empty((30, 40), np.int64)
    assert idx.watermarks_at(q, out=out) is out and np.array_equal(out, want)
    inplace = q.astype(np.int64)
    idx.watermarks_at(inplace, out=inplace)  # out may be the offsets themselves
    assert np.array_equal(inplace, want)
    assert idx.watermarks_at(np.array([], np.int64)).shape == (0,)
    assert idx.watermarks_at([]).shape == (0,)
    assert idx.watermarks_at(np.int64(5)).shape == ()
    assert int(idx.watermarks_at(np.int64(5))) == idx.watermark_at(5)


def test_large_index_scalar_lookups_use_the_same_answers() -> None:
    idx = _big_index(10_000, seed=6)
    assert len(idx) > 4096  # the numba scalar path
    offs, wms = idx.entries()
    rng = np.random.default_rng(6)
    for p in rng.integers(0, idx.length, 500).tolist():
        i = int(np.searchsorted(offs, p))
        assert idx.watermark_at(p) == wms[i]
        assert idx.ingestion_time_at(p) == wms[i] + 1
    assert idx.watermark_at(idx.length) == idx.tail_time - 1


# ---------------------------------------------------------------------- bulk writes


def test_record_writes_equals_record_write_loop() -> None:
    rng = np.random.default_rng(7)
    ends = np.cumsum(rng.integers(1, 10, 3_000))
    tss = CT + np.cumsum(rng.integers(0, 2, 3_000))
    a, b = WatermarkIndex(CT), WatermarkIndex(CT)
    a.record_write(3, CT + 0)
    b.record_write(3, CT + 0)
    a.record_writes(ends + 3, tss)
    for e, t in zip((ends + 3).tolist(), tss.tolist(), strict=True):
        b.record_write(e, t)
    for x, y in zip(a.entries(), b.entries(), strict=True):
        assert np.array_equal(x, y)
    assert (a.length, a.tail_time, len(a)) == (b.length, b.tail_time, len(b))
    a._check()
    b._check()


def test_record_writes_validates_before_changing_anything() -> None:
    idx = WatermarkIndex(CT)
    idx.record_write(10, CT + 5)
    before = (idx.entries(), idx.length, idx.tail_time, len(idx))
    cases = [
        ([20, 20], [CT + 5, CT + 6], "end_offsets\\[1\\] = 20"),
        ([20, 30], [CT + 6, CT + 5], "timestamps\\[1\\] = 1005"),
        ([10], [CT + 6], "end_offsets\\[0\\] = 10"),
        ([20], [CT + 4], "timestamp 1004"),
        ([20, 30], [CT + 6], "2 end_offsets but 1 timestamps"),
    ]
    for ends, tss, msg in cases:
        with pytest.raises(ValueError, match=msg):
            idx.record_writes(np.array(ends), np.array(tss))
    with pytest.raises(ValueError, match="dtype float64"):
        idx.record_writes(np.array([20.0]), np.array([CT + 6]))
    # the first run merges into the last entry: must not happen if a later element fails
    with pytest.raises(ValueError):
        idx.record_writes(np.array([20, 30, 25]), np.array([CT + 5, CT + 5, CT + 5]))
    after = (idx.entries(), idx.length, idx.tail_time, len(idx))
    assert np.array_equal(before[0][0], after[0][0]) and before[1:] == after[1:]
    idx._check()
    idx.record_writes(np.array([], np.int64), np.array([], np.int64))
    idx.record_writes(np.array([20, 30]), np.array([CT + 5, CT + 7]))
    assert idx.entries()[0].tolist() == [-1, 19, 29] and idx.watermark_at(15) == CT + 4
    idx._check()


# ---------------------------------------------------------------------- truncation


def test_truncate_drops_unreachable_entries() -> None:
    idx = WatermarkIndex(CT)
    for i in range(1, 11):
        idx.record_write(10 * i, CT + i)
    assert len(idx) == 11
    idx.truncate(0)  # no-op: the -1 entry stays
    assert len(idx) == 11
    idx.truncate(25)
    assert idx.start_offset == 25 and len(idx) == 8  # entries 29 .. 99
    assert idx.watermark_at(25) == CT + 2
    assert idx.entries()[0][0] == 29
    with pytest.raises(ValueError, match="offset 24"):
        idx.watermark_at(24)
    idx.truncate(30)
    assert len(idx) == 7 and idx.watermark_at(30) == CT + 3
    idx.truncate(100)  # everything: only the tail is left
    assert len(idx) == 0 and idx.watermark_at(100) == CT + 9
    idx.record_time(CT + 50)
    assert idx.watermark_at(100) == CT + 49
    idx.record_write(105, CT + 50)
    assert len(idx) == 1 and idx.watermark_at(100) == CT + 49
    idx._check()


def test_many_truncations_compact_storage() -> None:
    idx = WatermarkIndex(CT)
    ref = RefIndex(CT)
    for i in range(1, 5_001):
        idx.record_write(i * 3, CT + i)
        ref.write(i * 3, CT + i)
        if i % 100 == 0:
            idx.truncate(i * 3 - 30)
            ref.truncate(i * 3 - 30)
            idx._check()
    assert len(idx) <= 11 and idx.nbytes < 4096
    _agree(idx, ref)


# ---------------------------------------------------------------------- snapshots


def test_entries_restore_state_round_trip() -> None:
    idx = _big_index(2_000, seed=8)
    idx.truncate(idx.length // 3)
    idx.record_time(idx.tail_time + 7)
    offs, wms = idx.entries()
    offs[0] = 123_456_789  # entries() returns copies
    offs, wms = idx.entries()
    r = WatermarkIndex.restore_state(
        idx.creation_time, idx.start_offset, idx.length, idx.tail_time, offs, wms
    )
    r._check()
    q = np.arange(idx.start_offset, idx.length + 1)
    assert np.array_equal(r.watermarks_at(q), idx.watermarks_at(q))
    assert len(r) == len(idx)
    for x in (idx, r):
        x.record_write(x.length + 5, x.tail_time)
        x.record_write(x.length + 5, x.tail_time)  # merges on both
    assert len(r) == len(idx)
    assert np.array_equal(r.entries()[0], idx.entries()[0])
    fresh = WatermarkIndex(CT)
    f = WatermarkIndex.restore_state(CT, 0, 0, CT + 3, *fresh.entries())
    assert f.watermark_at(0) == CT + 2 and len(f) == 1
    f.record_write(4, CT + 3)
    assert len(f) == 2
    f._check()


@pytest.mark.parametrize(
    ("args", "msg"),
    [
        ((CT, 0, 10, CT + 5, [-1, 5, 5], [CT - 1, CT, CT]), "strictly increasing"),
        ((CT, 0, 10, CT + 5, [-1, 5, 9], [CT - 1, CT + 1, CT]), "decrease"),
        ((CT, 0, 10, CT + 5, [-1, 5, 8], [CT - 1, CT, CT]), "length - 1"),
        ((CT, 0, 10, CT + 1, [-1, 9], [CT - 1, CT + 3]), "tail_time"),
        ((CT, 0, 10, CT + 5, [], []), "no entry"),
        ((CT, 5, 10, CT + 5, [2, 9], [CT, CT]), "below start_offset"),
        ((CT, 0, 10, CT + 5, [-1, 9], [CT - 1]), "2 last_offsets but 1 wms"),
        ((CT, 0, 10, CT - 5, [9], [CT - 7]), "before creation"),
        ((CT, 0, 0, CT + 5, [-1, 3], [CT - 1, CT]), "empty segment"),
        ((CT, 0, 10, CT + 5, [-1.0, 9.0], [CT - 1, CT]), "integer array"),
    ],
)
def test_from_state_rejects_bad_snapshots(args: tuple[object, ...], msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        WatermarkIndex.restore_state(*args)  # type: ignore[arg-type]


def test_check_detects_corruption() -> None:
    idx = _big_index(100, seed=9)
    idx._check()
    idx._wms[5] = idx._wms[4] - 10
    with pytest.raises(AssertionError, match="decrease"):
        idx._check()
    idx = _big_index(100, seed=9)
    idx._tail = int(idx._wms[idx._n - 1])
    with pytest.raises(AssertionError, match="tail_time"):
        idx._check()


def test_import_does_not_load_numba() -> None:
    code = (
        "import sys\n"
        "import segmentstore.core.watermark_index as w\n"
        "assert 'numba' not in sys.modules, 'numba imported at package import'\n"
        "i = w.WatermarkIndex(5)\n"
        "i.record_write(10, 6)\n"
        "i.watermark_at(3)\n"
        "assert 'numba' not in sys.modules, 'numba imported by scalar use'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_serial_fallback_when_parallel_unsafe(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a fork child of an OpenMP process, batches run serial kernels, same answers."""
    import segmentstore.core._kernels as kernels

    idx = _big_index(3_000, seed=10)
    q = np.random.default_rng(10).integers(0, idx.length + 1, 5_000)
    qs = np.sort(q)
    want, want_s = idx.watermarks_at(q), idx.watermarks_at(qs)
    monkeypatch.setattr(kernels, "_parallel_ok", False)
    assert not kernels.parallel_ok()
    assert np.array_equal(idx.watermarks_at(q), want)
    assert np.array_equal(idx.watermarks_at(qs), want_s)
    assert np.array_equal(idx.watermarks_at(qs, assume_sorted=False), want_s)
    with pytest.raises(ValueError, match="offset -3"):
        idx.watermarks_at(np.concatenate([q, [-3], q]))


@pytest.mark.skipif(sys.platform != "linux", reason="fork start method")
def test_parallel_kernels_survive_fork() -> None:
    """A pool forked after the parent ran parallel kernels can run them too."""
    code = (
        "import multiprocessing as mp, numpy as np\n"
        "from segmentstore.core.watermark_index import WatermarkIndex\n"
        "w = WatermarkIndex(0)\n"
        "w.record_writes(np.arange(1, 100_001), np.arange(100_000))\n"
        "q = np.random.default_rng(0).integers(0, 100_000, 100_000)\n"
        "want = int(w.watermarks_at(q).sum())\n"
        "def child(_):\n"
        "    return int(w.watermarks_at(q).sum())\n"
        "with mp.get_context('fork').Pool(2) as p:\n"
        "    assert p.map(child, [0, 1]) == [want, want]\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_THREADING_LAYER"}
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, env=env)


# ---------------------------------------------------------------------- property test

_op = st.one_of(
    st.tuples(st.just("write"), st.integers(1, 6), st.integers(0, 2)),
    st.tuples(st.just("time"), st.integers(0, 3), st.just(0)),
    st.tuples(st.just("bulk"), st.integers(1, 8), st.integers(0, 9)),
    st.tuples(st.just("trunc"), st.integers(0, 100), st.just(0)),
    st.tuples(st.just("snap"), st.just(0), st.just(0)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ct=st.integers(-5, 5),
    start=st.sampled_from([0, 0, 7]),
    ops=st.lists(_op, max_size=25),
    seed=st.integers(0, 2**16),
)
def test_matches_reference_model(ct: int, start: int, ops: list[tuple[str, int, int]], seed: int) -> None:
    idx, ref = WatermarkIndex(ct, start), RefIndex(ct, start)
    rng = np.random.default_rng(seed)
    for kind, a, b in ops:
        if kind == "write":
            idx.record_write(ref.length + a, ref.tail + b)
            ref.write(ref.length + a, ref.tail + b)
        elif kind == "time":
            idx.record_time(ref.tail + a)
            ref.time(ref.tail + a)
        elif kind == "bulk":
            ends = ref.length + np.cumsum(rng.integers(1, 4, a))
            tss = ref.tail + np.cumsum(rng.integers(0, 2, a)) * (b % 3)
            idx.record_writes(ends, tss)
            for e, t in zip(ends.tolist(), tss.tolist(), strict=True):
                ref.write(e, t)
        elif kind == "trunc":
            s = ref.start + (ref.length - ref.start) * a // 100
            idx.truncate(s)
            ref.truncate(s)
        else:
            idx = WatermarkIndex.restore_state(
                idx.creation_time, idx.start_offset, idx.length, idx.tail_time, *idx.entries()
            )
        _agree(idx, ref, kernels=False)
    _agree(idx, ref)
