"""``append_each``: many plain appends in one call, each its own operation with its own answer.

What a writer relies on: the same offsets, timestamps, sequence numbers, bytes, watermarks
and durable log as a loop of ``append``; a sealed or missing segment's append answered with
its error while the others stand; bad input refused whole, the store unchanged.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from segmentstore import (
    AppendResult,
    AppendTooLargeError,
    InvalidArgumentError,
    InvalidClockError,
    ManualClock,
    SegmentNotFoundError,
    SegmentSealedError,
    SegmentStore,
    StoreClosedError,
    StoreConfig,
)
from segmentstore.client import EmbeddedClient

QUIET = dict(advancer_thread=False)
NAMES = ("a", "b", "c")
PAIRS = [("a", b"one"), ("b", b"two!"), ("a", b"three"), ("c", b"4"), ("b", b"fifty")]


def _store(clock: ManualClock, **cfg: Any) -> SegmentStore:
    s = SegmentStore(clock, StoreConfig(**{**QUIET, **cfg}))
    for n in NAMES:
        s.create_segment(n)
    return s


def _state(s: SegmentStore) -> tuple[Any, ...]:
    """What a user can observe of the store: each segment's info, bytes, watermark and ingestion time
    at every offset; the sequence number and the last timestamp."""
    out: list[Any] = [s.change_count, s.last_timestamp]
    for name in sorted(s.list_segments()):
        info = s.get_info(name)
        out.append((info, s.read(name, 0, info.length).data if info.length else b""))
        out.append([s.watermark_at(name, p) for p in range(info.length + 1)])
        out.append([s.ingestion_time_at(name, p) for p in range(info.length)])
    return tuple(out)


def test_answers_and_store_match_a_loop_of_appends() -> None:
    loop, each = _store(ManualClock(1_000)), _store(ManualClock(1_000))
    want = [loop.append(n, d) for n, d in PAIRS]
    got = EmbeddedClient(each).append_each(PAIRS)
    assert list(got) == want
    assert [(r.offset, r.length) for r in want] == [(0, 3), (0, 4), (3, 5), (0, 1), (4, 5)]
    assert _state(each) == _state(loop)  # bytes, watermarks, sequence numbers, last timestamp
    assert each.read("a", 0, 100).data == b"onethree"


def test_each_append_reads_the_clock_and_takes_its_own_sequence_number() -> None:
    class Ticking(ManualClock):
        def now(self) -> int:
            self.advance(1)
            return super().now()

    s = _store(Ticking(1_000))
    before = s.change_count
    got = s.append_each([("a", b"x"), ("b", b"y"), ("a", b"z")])
    assert [r.timestamp for r in got if isinstance(r, AppendResult)] == [1_004, 1_005, 1_006]
    assert s.change_count == before + 3
    assert s.ingestion_time_at("a", 0) == 1_004 and s.ingestion_time_at("a", 1) == 1_006


def test_a_sealed_or_missing_segment_fails_alone() -> None:
    clock = ManualClock(1_000)
    s = _store(clock)
    s.append("b", b"old")
    s.seal("b")
    got = s.append_each([("a", b"first"), ("b", b"lost"), ("nope", b"lost"), ("c", b"last")])
    assert isinstance(got[1], SegmentSealedError) and "'b'" in str(got[1])
    assert isinstance(got[2], SegmentNotFoundError) and "nope" in str(got[2])
    assert got[0] == AppendResult(0, 5, 1_000, False) and got[3] == AppendResult(0, 4, 1_000, False)
    assert s.read("a", 0, 10).data == b"first" and s.read("c", 0, 10).data == b"last"
    assert s.get_info("b").length == 3


@pytest.mark.parametrize(
    ("appends", "error", "names"),
    [
        (b"ab", InvalidArgumentError, "sequence of (segment, data) pairs"),
        ("ab", InvalidArgumentError, "sequence of (segment, data) pairs"),
        (42, InvalidArgumentError, "got int"),
        ([("a", b"x"), ("b",)], InvalidArgumentError, "pair 1 must be a (segment, data) pair"),
        ([("a", b"x"), 7], InvalidArgumentError, "pair 1 must be a (segment, data) pair"),
        ([("a", b"x"), (3, b"y")], InvalidArgumentError, "pair 1: segment name must be a str"),
        ([("a", b"x"), ("b", "text")], InvalidArgumentError, "pair 1: segment 'b': payload must be bytes"),
        ([("a", b"x"), ("c", b"")], InvalidArgumentError, "pair 1: segment 'c': append of 0 bytes"),
        ([("a", b"x"), ("c", bytes(65))], AppendTooLargeError, "pair 1: segment 'c': append of 65 bytes"),
    ],
)
def test_bad_input_is_refused_whole_and_changes_nothing(appends: Any, error: type, names: str) -> None:
    s = _store(ManualClock(1_000), max_append_bytes=64)
    s.append("a", b"kept")
    before = _state(s)
    with pytest.raises(error) as e:
        s.append_each(appends)
    assert names in str(e.value)
    assert _state(s) == before


def test_bytes_like_payloads_and_list_pairs_are_taken() -> None:
    s = _store(ManualClock(1_000))
    got = s.append_each([["a", bytearray(b"ab")], ("b", memoryview(b"cd"))])
    assert [r.length for r in got if isinstance(r, AppendResult)] == [2, 2]
    assert s.read("a", 0, 9).data == b"ab" and s.read("b", 0, 9).data == b"cd"
    assert s.append_each([]) == ()


def test_views_of_a_scratch_buffer_are_copied_in_and_not_kept(tmp_path: Path) -> None:
    s = SegmentStore(ManualClock(1_000), StoreConfig(**QUIET), data_dir=tmp_path)
    for n in NAMES:
        s.create_segment(n)
    scratch = bytearray(b"aaaabbbbcc")
    view = memoryview(scratch)
    got = s.append_each([("a", view[0:4]), ("b", view[4:8]), ("c", memoryview(b"\x01\x02").cast("c"))])
    assert [r.length for r in got if isinstance(r, AppendResult)] == [4, 4, 2]
    scratch[:] = bytes(10)  # the writer reuses its buffer
    live = _state(s)
    assert s.read("a", 0, 9).data == b"aaaa" and s.read("b", 0, 9).data == b"bbbb"
    s.close()
    with SegmentStore(ManualClock(0), StoreConfig(**QUIET), data_dir=tmp_path) as reopened:
        assert _state(reopened) == live  # the log holds the bytes as appended, not the reused buffer


def test_a_closed_store_refuses_the_call() -> None:
    s = _store(ManualClock(1_000))
    s.close()
    with pytest.raises(StoreClosedError):
        s.append_each([("a", b"x")])


def test_waiting_reads_complete_with_what_their_append_brought() -> None:
    s = _store(ManualClock(1_000))
    fa, fb = s.read_future("a", 0, 100), s.read_future("b", 0, 100)
    s.append_each([("a", b"first"), ("b", b"bee"), ("a", b"second")])
    assert fa.result(0).data == b"first"  # answered right after its append, as a loop would
    assert fb.result(0).data == b"bee"


def test_a_durable_store_recovers_the_appends_as_a_loop_wrote_them(tmp_path: Path) -> None:
    stores = {}
    for kind in ("loop", "each"):
        clock = ManualClock(1_000)
        s = SegmentStore(clock, StoreConfig(**QUIET), data_dir=tmp_path / kind)
        for n in NAMES:
            s.create_segment(n)
        s.seal("c")
        for _ in range(3):
            clock.advance(7)
            batch = [*PAIRS, ("c", b"sealed")]
            if kind == "loop":
                for n, d in batch:
                    with contextlib.suppress(SegmentSealedError):
                        s.append(n, d)
            else:
                s.append_each(batch)
        live = _state(s)
        s.close()
        reopened = SegmentStore(ManualClock(0), StoreConfig(**QUIET), data_dir=tmp_path / kind)
        assert _state(reopened) == live
        stores[kind] = live
        reopened.close()
    assert stores["each"] == stores["loop"]


class _Scripted(ManualClock):
    """Its readings: ``script``'s in turn (an exception in it raised), then its own time."""

    def __init__(self, start: int) -> None:
        super().__init__(start)
        self.script: list[Any] = []

    def now(self) -> Any:
        if not self.script:
            return super().now()
        got = self.script.pop(0)
        if isinstance(got, Exception):
            raise got
        return got


def test_distinct_segments_each_read_the_clock_and_never_step_back() -> None:
    clock = _Scripted(1_000)
    s = _store(clock)
    clock.script += [1_010, 1_005, np.int64(1_020)]  # a step back; an integer that is not an int
    got = s.append_each([("a", b"x"), ("b", b"yy"), ("c", b"z")])
    assert got == (
        AppendResult(0, 1, 1_010, False),
        AppendResult(0, 2, 1_010, False),
        AppendResult(0, 1, 1_020, False),
    )
    assert [s.ingestion_time_at(n, 0) for n in NAMES] == [1_010, 1_010, 1_020]
    assert s.change_count == 3 + 3 and s.last_timestamp == 1_020
    s._container._check()


@given(
    st.lists(
        st.one_of(st.integers(900, 1_100), st.integers(900, 1_100).map(np.int64)), min_size=3, max_size=3
    )
)
def test_distinct_segments_are_stamped_as_a_loop_stamps_them(readings: list[Any]) -> None:
    """Whatever the clock reads (in order or not, below the last timestamp or not, numpy integers):
    the timestamps, sequence numbers and watermarks of a loop of ``append``."""
    stores = []
    for kind in ("loop", "each"):
        clock = _Scripted(1_000)
        s = _store(clock)
        clock.script += readings
        pairs = [("a", b"x"), ("b", b"yy"), ("c", b"z")]
        got = [s.append(n, d) for n, d in pairs] if kind == "loop" else list(s.append_each(pairs))
        s._container._check()
        stores.append((got, _state(s)))
    assert stores[0] == stores[1]


@pytest.mark.parametrize("bad", [1_007.0, None, 2**63, RuntimeError("the clock broke")])
@pytest.mark.parametrize(
    "pairs", [[("a", b"x"), ("b", b"yy"), ("c", b"z")], [("a", b"x"), ("a", b"yy"), ("c", b"z")]]
)
def test_a_clock_refused_mid_call_leaves_the_appends_before_it_as_a_loop_does(bad: Any, pairs: Any) -> None:
    stores = []
    for kind in ("loop", "each"):
        clock = _Scripted(1_000)
        s = _store(clock)
        clock.script += [1_005, bad, 1_009]
        err: type[Exception] = RuntimeError if isinstance(bad, Exception) else InvalidClockError
        with pytest.raises(err):
            if kind == "loop":
                for n, d in pairs:
                    s.append(n, d)
            else:
                s.append_each(pairs)
        s._container._check()
        stores.append(_state(s))
    assert stores[0] == stores[1]
    assert stores[1][0] == 3 + 1  # the sequence numbers: the three creates and the first append


@pytest.mark.parametrize(
    "pairs", [[("a", b"x"), ("b", b"yy"), ("c", b"z")], [("a", b"x"), ("a", b"yy"), ("c", b"z")]]
)
def test_a_read_waiting_on_an_append_that_landed_is_answered_when_a_later_one_fails(pairs: Any) -> None:
    """The clock fails at the second append: the first landed, so the read waiting for it is
    answered with its bytes, as after a loop of ``append`` (not left waiting for another append)."""
    clock = _Scripted(1_000)
    s = _store(clock)
    waiting = s.read_future("a", 0, 100)
    clock.script += [1_005, RuntimeError("the clock broke")]
    with pytest.raises(RuntimeError):
        s.append_each(pairs)
    assert waiting.result(0).data == b"x"
    s._container._check()


@given(
    st.lists(
        st.tuples(
            st.sampled_from([*NAMES, "gone", "sealed"]), st.binary(min_size=1, max_size=5), st.booleans()
        ),
        max_size=8,
    ),
    st.booleans(),
)
def test_any_batch_answers_and_stores_as_a_loop_of_appends(
    batch: list[tuple[str, bytes, bool]], log: bool
) -> None:
    """Distinct segments or repeated, sealed or missing, bytes or views: a loop's answers, bytes,
    watermarks, sequence numbers, and (with a durable log) what a restart recovers."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        stores = []
        for kind in ("loop", "each"):
            clock = ManualClock(1_000)
            s = SegmentStore(clock, StoreConfig(**QUIET), data_dir=Path(tmp) / kind if log else None)
            for n in (*NAMES, "sealed"):
                s.create_segment(n)
            s.seal("sealed")
            s.append("a", b"before")
            clock.advance(3)
            pairs = [(n, memoryview(bytearray(d)) if view else d) for n, d, view in batch]
            if kind == "loop":
                got: list[Any] = []
                for n, d in pairs:
                    try:
                        got.append(s.append(n, bytes(d)))
                    except (SegmentSealedError, SegmentNotFoundError) as e:
                        got.append(e)
            else:
                got = list(s.append_each(pairs))
            s._container._check()
            live = _state(s)
            if log:
                s.close()
                s = SegmentStore(ManualClock(0), StoreConfig(**QUIET), data_dir=Path(tmp) / kind)
                assert _state(s) == live
            s.close()
            stores.append(([a if isinstance(a, AppendResult) else (type(a), str(a)) for a in got], live))
        assert stores[0] == stores[1]


def test_views_taken_whole_or_one_by_one() -> None:
    s = _store(ManualClock(1_000))
    raw = bytearray(b"0123456789")
    whole = [("a", memoryview(raw)[0:3]), ("b", memoryview(raw)[3:6])]
    assert [r.length for r in s.append_each(whole) if isinstance(r, AppendResult)] == [3, 3]
    mixed = [("a", b"x"), ("b", memoryview(raw)[::2]), ("c", memoryview(b"\x01\x02\x03\x04").cast("I"))]
    assert [r.length for r in s.append_each(mixed) if isinstance(r, AppendResult)] == [1, 5, 4]
    assert s.read("b", 0, 9).data == b"34502468" and s.read("c", 0, 9).data == b"\x01\x02\x03\x04"
    gone = memoryview(b"late")
    gone.release()
    before = _state(s)
    with pytest.raises(ValueError, match="released"):  # refused whole, by the pair-by-pair checks
        s.append_each([("a", memoryview(raw)[0:1]), ("b", gone)])
    assert _state(s) == before


def test_a_segment_refusing_its_bytes_leaves_every_segment_whole() -> None:
    """A segment's data that fails to take an append (out of memory, say): the appends before it
    applied whole, it and those after not at all, every segment consistent; the error raised."""
    s = _store(ManualClock(1_000))
    data = s._container._segments["b"].data

    def refuse(_: object) -> None:
        raise MemoryError("no room")

    data.append = refuse  # type: ignore[method-assign]
    with pytest.raises(MemoryError):
        s.append_each([("a", b"xx"), ("b", b"y"), ("c", b"z")])
    s._container._check()
    assert [s.get_info(n).length for n in NAMES] == [2, 0, 0]
    assert s.watermark_at("a", 0) == 999 and s.watermark_at("a", 2) == 999
