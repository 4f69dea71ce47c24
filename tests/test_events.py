"""Event framing: encode, per-event decode, columnar batch decode, partial and corrupt frames."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from readergroup import (
    KIND_EVENT,
    KIND_IDLE,
    KIND_WATERMARK,
    NO_EVENT_TIME,
    FrameFormatError,
    InvalidEventError,
    decode_columns,
    decode_frames,
    encode_event,
)
from readergroup.format.events import HEADER_SIZE, MAX_KEY_BYTES, frame_ends_of, frame_length
from readergroup.format.keyed_framing import MAX_CACHED_KEYS, KeyedFramer
from readergroup.format.routing import key_hash

events_st = st.lists(
    st.tuples(
        st.text(max_size=20),
        st.binary(max_size=40),
        st.one_of(st.none(), st.integers(-(2**63) + 1, 2**63 - 1)),
        st.sampled_from([KIND_EVENT, KIND_WATERMARK, KIND_IDLE]),
    ),
    max_size=30,
)


def columns_as_rows(cols: dict[str, Any]) -> list[tuple[int, int, int, str, int | None, bytes]]:
    return [
        (int(o), int(n), int(k), key, None if t == NO_EVENT_TIME else int(t), pay)
        for o, n, k, t, key, pay in zip(
            cols["offset"],
            cols["length"],
            cols["kind"],
            cols["event_time"],
            cols["routing_key"].to_pylist(),
            cols["payload"].to_pylist(),
            strict=True,
        )
    ]


@settings(max_examples=60)  # below the profile's 100: enough for a codec of four fields
@given(events=events_st, base=st.integers(0, 2**40), cut=st.integers(0, 10_000))
def test_roundtrip_and_partial_frames(events: list[Any], base: int, cut: int) -> None:
    frames_bytes = [encode_event(k, p, t, kind) for k, p, t, kind in events]
    buf = b"".join(frames_bytes)
    frames, used = decode_frames(buf, base)
    assert used == len(buf)
    assert [(f.routing_key, f.payload, f.event_time, f.kind) for f in frames] == [tuple(e) for e in events]
    offsets = np.cumsum([0] + [len(b) for b in frames_bytes])
    assert [f.offset for f in frames] == [base + int(o) for o in offsets[:-1]]
    assert [f.end_offset for f in frames] == [base + int(o) for o in offsets[1:]]
    # a prefix decodes to the whole frames in it; the rest is left
    cut = min(cut, len(buf))
    part, used = decode_frames(buf[:cut], base)
    whole = int(np.searchsorted(offsets, cut, side="right")) - 1
    assert used == offsets[whole] and part == frames[:whole]
    cols, used2 = decode_columns(buf[:cut], base)
    assert used2 == used
    assert columns_as_rows(cols) == [
        (f.offset, f.length, f.kind, f.routing_key, f.event_time, f.payload) for f in part
    ]


@pytest.mark.parametrize("nbytes", [0, 64, 100_000])
def test_batch_decoder_agrees_with_per_event_decoder(nbytes: int) -> None:
    rng = np.random.default_rng(7)
    out: list[bytes] = []
    size = 0
    i = 0
    while size < nbytes:
        f = encode_event(
            f"key-{i % 13}-ü",
            rng.bytes(int(rng.integers(0, 60))),
            None if i % 4 == 0 else int(rng.integers(-(10**12), 10**12)),
            KIND_WATERMARK if i % 9 == 0 else KIND_EVENT,
        )
        out.append(f)
        size += len(f)
        i += 1
    buf = b"".join(out) + out[0][:7] if out else b""
    frames, used = decode_frames(buf, 5)
    cols, used2 = decode_columns(bytearray(buf), 5)
    assert used == used2 == size
    assert cols["offset"].dtype == np.int64 and cols["kind"].dtype == np.uint8
    assert columns_as_rows(cols) == [
        (f.offset, f.length, f.kind, f.routing_key, f.event_time, f.payload) for f in frames
    ]
    ev, _ = decode_columns(buf, 5, events_only=True)
    assert ev["offset"].tolist() == [f.offset for f in frames if f.is_event]
    assert ev["payload"].to_pylist() == [f.payload for f in frames if f.is_event]
    ends, used3 = frame_ends_of(memoryview(buf))
    assert used3 == size and ends.tolist() == [f.end_offset - 5 for f in frames]


def test_frame_layout() -> None:
    f = encode_event("ab", b"xyz", 42, KIND_IDLE)
    rest, kind, t, klen = struct.unpack_from("<IBqH", f)
    assert (rest, kind, t, klen) == (len(f) - 4, KIND_IDLE, 42, 2)
    assert f[HEADER_SIZE:] == b"abxyz"
    assert frame_length(f) == len(f) and frame_length(f[:3]) is None
    none = encode_event("", b"")
    assert struct.unpack_from("<q", none, 5)[0] == NO_EVENT_TIME
    assert decode_frames(none)[0][0].event_time is None


BAD_EVENTS: list[tuple[tuple[Any, ...], str]] = [
    ((1, b"p"), "routing key must be a str"),
    (("k" * (MAX_KEY_BYTES + 1), b"p"), "at most"),
    (("k", "text"), "payload must be bytes"),
    (("k", b"p", 1.5), "event_time must be an int"),
    (("k", b"p", True), "event_time must be an int"),
    (("k", b"p", -(2**63)), "outside"),
    (("k", b"p", 2**63), "outside"),
    (("k", b"p", None, 3), "kind"),
    (("k", b"p", None, True), "kind"),
]


@pytest.mark.parametrize(("args", "match"), BAD_EVENTS)
def test_bad_events_are_rejected(args: tuple[Any, ...], match: str) -> None:
    with pytest.raises(InvalidEventError, match=match):
        encode_event(*args)


def test_bytearray_and_memoryview_payloads() -> None:
    a = encode_event("k", bytearray(b"abc"))
    b = encode_event("k", memoryview(b"abc"))
    assert a == b == encode_event("k", b"abc")


@pytest.mark.parametrize("pad", [0, 40_000])  # the Python path and the numba path
def test_corrupt_frames_name_their_offset(pad: int) -> None:
    good = b"".join(encode_event("k", b"x" * 50) for _ in range(pad // 65 + 1))
    short = struct.pack("<IBqH", 5, 0, 0, 3)  # rest_length shorter than its own header
    for bad, match in (
        (short + b"abc", "shorter than"),
        (b"\x0b\x00\x00\x00\x07" + bytes(10), "unknown kind 7"),
    ):
        with pytest.raises(FrameFormatError, match=f"offset {100 + len(good)}.*{match}|{match}"):
            decode_frames(good + bad, 100)
        with pytest.raises(FrameFormatError, match=f"offset {100 + len(good)}"):
            decode_columns(good + bad, 100)
        with pytest.raises(FrameFormatError, match=f"offset {len(good)}"):
            frame_ends_of(good + bad)


def test_invalid_utf8_key_is_a_format_error() -> None:
    frame = struct.pack("<IBqH", 11 + 2, 0, 0, 2) + b"\xff\xfe"
    with pytest.raises(FrameFormatError, match="UTF-8"):
        decode_frames(frame)
    with pytest.raises(FrameFormatError, match="UTF-8"):
        decode_columns(frame * 5000)


# ---------------------------------------------------------------------- a writer's framing (issue #35)
@given(events=events_st)
def test_a_writers_framing_gives_encode_events_frames_and_the_keys_hash(events: list[Any]) -> None:
    framer = KeyedFramer()
    for _ in range(2):  # first each key new, then each remembered
        for key, payload, t, _kind in events:
            frame, h = framer.frame(key, payload, t)
            assert frame == encode_event(key, payload, t) and h == key_hash(key)
    framer._check()


class _Key(str):
    """A str subclass: its own hash and equality, so it must not be taken for a remembered key."""

    def __hash__(self) -> int:
        return hash(str(self))


@pytest.mark.parametrize(
    ("args", "match"),
    [(a, m) for a, m in BAD_EVENTS if len(a) < 4],  # (framing has no kind: events only)
)
def test_a_writers_framing_refuses_what_encode_event_refuses_also_for_a_remembered_key(
    args: tuple[Any, ...], match: str
) -> None:
    framer = KeyedFramer()
    if isinstance(args[0], str) and len(args[0]) < 100:
        framer.frame(args[0], b"ok", 1)  # the key is remembered
    before = dict(framer._keys)
    with pytest.raises(InvalidEventError, match=match):
        framer.frame(*(args + (None,) * (3 - len(args))))
    assert framer._keys == before  # nothing remembered for it


def test_a_writers_framing_takes_other_payloads_and_key_types_as_encode_event_does() -> None:
    framer = KeyedFramer()
    framer.frame("k", b"abc", 5)
    assert framer.frame("k", bytearray(b"abc"), 5)[0] == encode_event("k", b"abc", 5)
    assert framer.frame("k", memoryview(b"abc"), None)[0] == encode_event("k", b"abc")
    assert framer.frame(_Key("k"), b"abc", 5) == (encode_event("k", b"abc", 5), key_hash("k"))
    for i in range(MAX_CACHED_KEYS + 10):  # bounded: it forgets all when full
        framer.frame(f"key{i}", b"", None)
    assert 0 < len(framer) <= MAX_CACHED_KEYS
    framer._check()
