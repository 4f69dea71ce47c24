"""``append_many``: many plain appends to many segments in one call, as the same appends one by one.

The simulator's writers append a tick's events to every segment they route to in one call
(``EmbeddedClient.append_many``); a store must end exactly as after the single appends,
on a clock that stands and one that ticks at every reading, durable or not, and refuse bad
input whole.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from segmentstore import (
    AppendTooLargeError,
    InvalidArgumentError,
    ManualClock,
    SegmentStore,
    SegmentStoreError,
    StoreClosedError,
    StoreConfig,
)
from segmentstore.client import EmbeddedClient
from segmentstore.clock import TickingClock

_NAMES = ("a", "b", "sealed", "missing")
_QUIET = StoreConfig(advancer_thread=False)


def _store(ticking: bool, data_dir: Path | None = None) -> SegmentStore:
    clock = TickingClock(1_000_000, 1) if ticking else ManualClock(1_000_000)
    s = SegmentStore(clock, _QUIET, data_dir=data_dir)
    for name in ("a", "b", "sealed"):
        s.create_segment(name)
    s.append("sealed", b"x")
    s.seal("sealed")
    return s


def _state(s: SegmentStore) -> list[Any]:
    """What a reader can see of every segment: info, bytes, the watermark at every offset."""
    out: list[Any] = []
    for name in sorted(s.list_segments()):
        info = s.get_info(name)
        wms = [s.watermark_at(name, o) for o in range(info.start_offset, info.length + 1)]
        out.append((info, s.read(name, 0, 1 << 20).data, wms))
    return out


def _answer(a: object) -> object:
    return (type(a).__name__, str(a)) if isinstance(a, SegmentStoreError) else a


_appends = st.lists(
    st.tuples(st.sampled_from(_NAMES), st.binary(min_size=1, max_size=40)), min_size=1, max_size=20
)


@settings(max_examples=150, deadline=None)
@given(rounds=st.lists(_appends, min_size=1, max_size=4), ticking=st.booleans())
def test_append_many_ends_as_the_appends_one_by_one(
    rounds: list[list[tuple[str, bytes]]], ticking: bool
) -> None:
    many, single = _store(ticking), _store(ticking)
    try:
        for appends in rounds:
            got = [_answer(a) for a in EmbeddedClient(many).append_many(appends)]
            want: list[object] = []
            for name, data in appends:
                try:
                    want.append(single.append(name, data))
                except SegmentStoreError as e:
                    want.append(_answer(e))
            assert got == want
            assert many.change_count == single.change_count
            assert _state(many) == _state(single)
            many._check()
    finally:
        many.close()
        single.close()


def test_append_many_is_durable_as_single_appends(tmp_path: Path) -> None:
    s = _store(True, tmp_path / "d")
    answers = s.append_many([("a", b"one"), ("sealed", b"no"), ("b", b"two"), ("a", b"three")])
    kinds = [type(a).__name__ for a in answers]
    assert kinds == ["AppendResult", "SegmentSealedError", "AppendResult", "AppendResult"]
    before = _state(s)
    s.close()
    again = SegmentStore(TickingClock(2_000_000, 1), _QUIET, data_dir=tmp_path / "d")
    try:
        assert _state(again) == before
        assert again.read("a", 0, 100).data == b"onethree"
    finally:
        again.close()


@pytest.mark.parametrize(
    ("appends", "error", "says"),
    [
        ("a", InvalidArgumentError, "sequence of (segment, bytes) pairs"),
        (b"ab", InvalidArgumentError, "sequence of (segment, bytes) pairs"),
        (7, InvalidArgumentError, "sequence of (segment, bytes) pairs"),
        ([("a", b"x"), ["b", b"y"]], InvalidArgumentError, "item 1 must be a (segment: str"),
        ([("a", b"x"), (b"b", b"y")], InvalidArgumentError, "item 1"),
        ([("a", b"x", 3)], InvalidArgumentError, "item 0"),
        ([("a", b"x"), ("b", "text")], InvalidArgumentError, "payload must be bytes"),
        ([("a", b"x"), ("b", b"")], InvalidArgumentError, "append of 0 bytes"),
        ([("a", b"x"), ("b", b"y" * 65)], AppendTooLargeError, "exceeds max_append_bytes"),
    ],
)
def test_bad_input_refuses_the_whole_call_and_appends_nothing(appends: Any, error: type, says: str) -> None:
    s = SegmentStore(ManualClock(1_000_000), StoreConfig(advancer_thread=False, max_append_bytes=64))
    try:
        s.create_segment("a")
        s.create_segment("b")
        before, count = _state(s), s.change_count
        with pytest.raises(error, match=re.escape(says)):
            s.append_many(appends)
        assert _state(s) == before and s.change_count == count
    finally:
        s.close()


def test_bytes_like_payloads_are_taken_and_waiting_reads_complete() -> None:
    s = _store(False)
    try:
        fut = s.read_future("b", 0, 100, timeout_ms=None)
        assert not fut.done()
        s.append_many([("a", bytearray(b"xy")), ("b", memoryview(b"z"))])  # type: ignore[list-item]
        assert fut.done() and fut.result().data == b"z"
        assert s.read("a", 0, 10).data == b"xy"
    finally:
        s.close()


def test_a_closed_store_refuses_the_call() -> None:
    s = _store(False)
    s.close()
    with pytest.raises(StoreClosedError):
        s.append_many([("a", b"x")])
