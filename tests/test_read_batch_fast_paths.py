"""A batch's fast paths make what the paths they replace made, byte for byte.

``decode_packed_blocks`` decodes blocks side by side in one kernel call when every record is an
event (sized so), else sizes them first; ``merge_blocks`` merges blocks through ``merge_into``
(blocks decoded side by side where they lie, others concatenated; a slice's keys and payloads copied
at once); ``new_batch`` makes an
``EventBatch`` without its generated ``__init__``. Each is compared here with the earlier way:
the two kernel calls, ``merge`` into separate arrays and the reader's slices in Python,
``EventBatch(...)``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from readergroup.format import events
from readergroup.format.events import KIND_WATERMARK, EventBlocks, encode_event
from readergroup.reading.block_merge import _null_keys_of, merge_blocks, merge_kernel
from readergroup.reading.read_results import EventBatch, new_batch


@pytest.fixture(scope="module", autouse=True)
def _kernels() -> None:
    events._kernels()
    assert merge_kernel() is not None


class _Seg:
    """What ``merge_blocks`` reads of a ``SegmentInput``."""

    __slots__ = ("block", "group", "idx", "n", "name", "pravega")

    def __init__(self, name: str, block: Any, n: int, pravega: bool, group: Any) -> None:
        self.name, self.block, self.n, self.pravega, self.group, self.idx = name, block, n, pravega, group, 0


_FRAME = st.tuples(
    st.text(alphabet="abé", max_size=4),
    st.binary(max_size=30),
    st.one_of(st.none(), st.integers(0, 50)),
    st.booleans(),  # a writer marker (when markers are drawn at all)
)
_BLOCK = st.tuples(st.lists(_FRAME, min_size=1, max_size=12), st.integers(0, 14))  # a partial tail


def _packed(blocks: list[Any], markers: bool, seed: int) -> tuple[bytes, np.ndarray, np.ndarray, np.ndarray]:
    """``decode_packed_blocks``' inputs for ``blocks`` (frames and a partial frame's length after them)."""
    rng = np.random.default_rng(seed)
    data, rows, starts, values = [], [], [], []
    at = s0 = 0
    for b, (frames, tail) in enumerate(blocks):
        enc = [encode_event(k, p, t, KIND_WATERMARK if markers and m else 0) for k, p, t, m in frames]
        buf = b"".join(enc)
        buf += encode_event("t", bytes(20))[: min(tail, 14)]
        base = 1000 * b + 7
        pos = base + np.cumsum([0] + [len(f) for f in enc])
        rows.append((at, len(buf), base, 5_000, s0, len(enc)))
        starts.append(pos[:-1])
        values.append(np.sort(rng.integers(0, 100, len(enc) + 1)))
        data.append(buf)
        at += len(buf)
        s0 += len(enc)
    return b"".join(data), np.array(rows, np.int64), np.concatenate(starts), np.concatenate(values)


def _reference_decode(data: bytes, meta: np.ndarray, starts: np.ndarray, values: np.ndarray, add: int) -> Any:
    """The two kernel calls: sizes, then the decode into arrays of that size."""
    k = events._kernels()
    nb = len(meta)
    arr = np.frombuffer(data, dtype=np.uint8)
    places = np.empty((nb, 8), np.int64)
    bad, n, nbytes, key_bytes = k.decode_sizes_many(arr, meta, places)
    if bad >= 0:
        return None
    cols, after = np.empty((4, n), np.int64), np.empty((2, n), np.int64)
    offs, raw = np.empty((2, n + nb), np.int32), np.empty(nbytes, np.uint8)
    if k.decode_events_at_many(arr, meta, places, starts, values, add, cols, after, offs, raw) >= 0:
        return None
    return EventBlocks(cols, after, offs, raw, places, key_bytes)


def _same_arrays(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape and a.flags.c_contiguous == b.flags.c_contiguous
    assert np.array_equal(a, b)


@settings(max_examples=300, deadline=None)
@given(st.lists(_BLOCK, min_size=1, max_size=5), st.booleans(), st.integers(0, 3), st.integers(0, 2**16))
def test_blocks_decoded_in_one_call_are_those_decoded_in_two(
    blocks: list[Any], markers: bool, shift: int, seed: int
) -> None:
    data, meta, starts, values = _packed(blocks, markers, seed)
    if shift:  # records that are not the frames: nothing decoded
        starts = starts + (np.arange(len(starts)) == shift % len(starts))
    new, old = (
        events.decode_packed_blocks(data, meta, starts, values, 1),
        _reference_decode(data, meta, starts, values, 1),
    )
    assert (new is None) == (old is None)
    if new is None or old is None:
        return
    for name in ("cols", "after", "offs", "raw", "places"):
        _same_arrays(getattr(new, name), getattr(old, name))
    assert new.key_bytes == old.key_bytes and type(new.key_bytes) is int
    assert new.spans == old.spans and len(new) == len(old)
    for (bn, an, cn), (bo, ao, co) in zip(new.blocks, old.blocks, strict=True):
        assert cn == co and bn[3] == bo[3]
        for x, y in zip((*bn[:3], an), (*bo[:3], ao), strict=True):
            assert np.array_equal(x, y)


def _reference_merge(k: Any, live: list[_Seg], max_events: int, late_i: int, late_e: int) -> Any:
    """The earlier ``merge_blocks``: the blocks' arrays concatenated, ``merge`` into separate arrays."""
    rows, blocks = [], []
    col = off = byte = total = key_bytes = 0
    for s in live:
        block = s.block
        blocks.append(block)
        rows.append((col, s.idx, s.n, off, byte, byte + block[3]))
        col, off, byte = col + s.n, off + s.n + 1, byte + len(block[2])
        key_bytes += block[3]
        total += s.n - s.idx
    meta = np.array(rows, np.int64)
    cols = np.concatenate([b[0] for b in blocks], axis=1)
    offs = np.concatenate([b[1] for b in blocks], axis=1)
    raw = np.concatenate([b[2] for b in blocks])
    m = min(total, max_events)
    out_seg, out_cols, first = (
        np.empty(m, np.int32),
        np.empty((4, m), np.int64),
        np.empty(len(live), np.int64),
    )
    out_offs, out_raw = np.empty((2, m + 1), np.int32), np.empty(byte, np.uint8)
    ev, kb, pb, ranked, li, le = k.merge(
        meta, cols, offs, raw, max_events, out_seg, out_cols, out_offs, out_raw[:key_bytes],
        out_raw[key_bytes:], first, late_i, late_e,
    )  # fmt: skip
    assert ev == m
    for s, i in zip(live, meta[:, 1].tolist(), strict=True):
        s.idx = i
    keys = pa.Array.from_buffers(
        pa.string(), m, [None, pa.py_buffer(out_offs[0]), pa.py_buffer(out_raw[:kb])]
    )
    pays = pa.Array.from_buffers(
        pa.binary(), m, [None, pa.py_buffer(out_offs[1]), pa.py_buffer(out_raw[key_bytes:][:pb])]
    )
    ranks = first[:ranked].tolist()
    if any(s.pravega for s in live):
        keys = _null_keys_of(keys, out_seg, np.array([live[j].pravega for j in ranks], np.bool_))
    return tuple(live[j].name for j in ranks), out_seg, out_cols, keys, pays, int(li), int(le)


def _python_merge(live: list[_Seg], max_events: int, late_i: int, late_e: int) -> Any:
    """The reader's slices (``EventReader._collect``'s Python path) of the same blocks, as values."""
    slices: list[tuple[int, int, int]] = []
    left = max_events
    while left > 0:
        best, best_t, second = -1, 0, None
        for j, s in enumerate(live):
            if s.idx < s.n:
                t = int(s.block[0][3, s.idx])
                if best < 0 or t < best_t:
                    second = best_t if best >= 0 else second
                    best, best_t = j, t
                elif second is None or t < second:
                    second = t
        if best < 0:
            break
        s = live[best]
        i, stop = s.idx, min(s.n, s.idx + left)
        if second is not None:
            stop = min(stop, i + max(1, int(s.block[0][3, i:stop].searchsorted(second, side="right"))))
        slices.append((best, i, stop))
        s.idx = stop
        left -= stop - i
    ranks = list(dict.fromkeys(j for j, _, _ in slices))
    seg, cols, keys, pays = [], [], [], []
    for j, a, b in slices:
        cols_, offs, raw, kb = live[j].block
        seg += [ranks.index(j)] * (b - a)
        cols.append(cols_[:, a:b])
        for e in range(a, b):
            key = bytes(raw[offs[0, e] : offs[0, e + 1]]).decode()
            keys.append(None if live[j].pravega else key)
            pays.append(bytes(raw[kb + offs[1, e] : kb + offs[1, e + 1]]))
    c = np.concatenate(cols, axis=1) if cols else np.empty((4, 0), np.int64)
    late = (int((c[3] <= late_i).sum()), int(((c[2] != events.NO_EVENT_TIME) & (c[2] <= late_e)).sum()))
    return tuple(live[j].name for j in ranks), seg, c.tolist(), keys, pays, late


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_BLOCK, min_size=2, max_size=5),
    st.booleans(),
    st.data(),
    st.sampled_from([1, 3, 7, 1 << 16]),
    st.integers(0, 2**16),
)
def test_merged_blocks_are_those_merged_into_separate_arrays(
    blocks: list[Any], together: bool, data: st.DataObject, max_events: int, seed: int
) -> None:
    raw, meta, starts, values = _packed(blocks, False, seed)
    eb = events.decode_packed_blocks(raw, meta, starts, values, 1)
    assert eb is not None
    pravega = [data.draw(st.booleans()) and not together for _ in blocks]
    new = [
        _Seg(f"s{j}", b, n, p, (eb, j) if together else None)
        for j, ((b, _, _), n, p) in enumerate(zip(eb.blocks, [r[2] for r in eb.spans], pravega, strict=True))
    ]
    old = [_Seg(s.name, s.block, s.n, s.pravega, None) for s in new]
    ref = [_Seg(s.name, s.block, s.n, s.pravega, None) for s in new]
    for s, o, r in zip(new, old, ref, strict=True):
        s.idx = o.idx = r.idx = data.draw(st.integers(0, s.n - 1))
    k = merge_kernel()
    assert k is not None
    for _ in range(3):  # batch after batch, while two blocks have events left
        live = [s for s in new if s.idx < s.n]
        if len(live) < 2:
            break
        got = merge_blocks(k, cast(Any, live), max_events, 30, 20)
        want = _reference_merge(k, [s for s in old if s.idx < s.n], max_events, 30, 20)
        names, seg, cols, keys, pays, late = _python_merge(
            [s for s in ref if s.idx < s.n], max_events, 30, 20
        )
        assert (got.names, got.segment_index.tolist(), got.cols.tolist()) == (names, seg, cols)
        assert (got.keys.to_pylist(), got.pays.to_pylist(), got.late_ingestion, got.late_event_time) == (
            keys,
            pays,
            *late,
        )
        assert [s.idx for s in new] == [s.idx for s in ref]
        assert got.names == want[0] and type(got.names) is tuple
        _same_arrays(got.segment_index, want[1])
        _same_arrays(got.cols, want[2])
        for x, y in zip((got.keys, got.pays), want[3:5], strict=True):
            x.validate(full=True)
            assert x.type == y.type and x.null_count == y.null_count and x.equals(y)
            assert [b.to_pybytes() if b else None for b in x.buffers()] == [
                b.to_pybytes() if b else None for b in y.buffers()
            ]
        assert (got.late_ingestion, got.late_event_time) == want[5:] and type(got.late_ingestion) is int
        assert [s.idx for s in new] == [s.idx for s in old]
        assert eb.places[:, 1].tolist() == [0] * len(eb)  # (the blocks' own places never change)


def test_a_batch_made_directly_is_the_batch_its_init_makes() -> None:
    cols = np.arange(12, dtype=np.int64).reshape(4, 3)
    keys, pays = pa.array(["a", "b", "c"]), pa.array([b"x", b"", b"z"])
    args = (4, 17, None, ("s/a", "s/b"), np.array([0, 1, 1], np.int32), *cols, keys, pays)
    made, built = new_batch(*args), EventBatch(*args)
    assert type(made) is EventBatch and not hasattr(made, "__dict__")
    for f in dataclasses.fields(EventBatch):
        assert getattr(made, f.name) is getattr(built, f.name)
    assert len(made) == 3 and made.to_arrow().equals(built.to_arrow())
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.epoch = 5  # type: ignore[misc]
