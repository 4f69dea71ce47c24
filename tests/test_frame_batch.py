"""Bulk frame decoding and encoding (``readergroup.format.frame_batch``) against the per-event codec."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from readergroup import FrameFormatError, InvalidEventError
from readergroup.format import producer_watermarks
from readergroup.format.events import (
    HEADER_SIZE,
    KIND_EVENT,
    KIND_IDLE,
    KIND_WATERMARK,
    MAX_KEY_BYTES,
    NO_EVENT_TIME,
    decode_frames,
    encode_event,
)
from readergroup.format.frame_batch import (
    EventColumns,
    _decode,
    _walk,
    decode_events,
    encode_events,
    walk_frames,
)
from readergroup.format.producer_watermarks import encode_idle_marker, encode_watermark_marker, scan_markers
from readergroup.format.routing import key_hash

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

times_st = st.one_of(
    st.none(),
    st.sampled_from([INT64_MIN + 1, INT64_MAX, -1, 0, 1, 1_700_000_000_000]),
    st.integers(INT64_MIN + 1, INT64_MAX),
)
payload_st = st.one_of(
    st.binary(max_size=40),
    st.just(b""),
    st.integers(1_000, 70_000).map(lambda n: bytes(range(256)) * (n // 256) + b"\x07" * (n % 256)),
)
event_st = st.builds(encode_event, st.text(max_size=12), payload_st, times_st)
marker_st = st.one_of(
    st.builds(encode_watermark_marker, st.integers(1, 2**63 - 1), st.integers(INT64_MIN + 1, INT64_MAX)),
    st.builds(encode_idle_marker, st.integers(1, 2**63 - 1)),
    st.builds(
        encode_event,
        st.text(max_size=5),
        st.binary(max_size=16),
        times_st,
        st.sampled_from([KIND_WATERMARK, KIND_IDLE]),
    ),
)
frames_st = st.lists(st.one_of(event_st, event_st, marker_st), max_size=40)


def expected(buf: bytes, base: int) -> tuple[list[tuple[Any, ...]], int]:
    """The events ``decode_frames`` finds, as rows, and the bytes it consumed."""
    frames, consumed = decode_frames(buf, base)
    rows = [
        (f.offset, NO_EVENT_TIME if f.event_time is None else f.event_time, f.routing_key, f.payload)
        for f in frames
        if f.kind == KIND_EVENT
    ]
    return rows, consumed


def rows_of(cols: EventColumns) -> list[tuple[Any, ...]]:
    assert cols.offsets.dtype == np.int64 and cols.event_times.dtype == np.int64
    assert cols.routing_keys.type == pa.string() and cols.payloads.type == pa.binary()
    cols.routing_keys.validate(full=True)
    cols.payloads.validate(full=True)
    return list(
        zip(
            cols.offsets.tolist(),
            cols.event_times.tolist(),
            cols.routing_keys.to_pylist(),
            cols.payloads.to_pylist(),
            strict=True,
        )
    )


def outcome(fn: Any, *args: Any) -> tuple[Any, ...]:
    """What a decoder did: its rows and consumed bytes, or its error's type and message."""
    try:
        result = fn(*args)
    except FrameFormatError as e:
        return ("error", type(e), str(e))
    if isinstance(result[0], EventColumns):
        return ("ok", rows_of(result[0]), result[1])
    return ("ok", *result)


@settings(max_examples=150)  # above the profile's 100: pure decoders, fast examples
@given(frames=frames_st, base=st.integers(0, 2**40), cut=st.integers(0, 2**20), container=st.integers(0, 2))
def test_bulk_decoder_gives_the_python_decoders_columns(
    frames: list[bytes], base: int, cut: int, container: int
) -> None:
    buf = b"".join(frames)
    buf = buf[: min(cut, len(buf))] if cut % 3 == 0 else buf  # ranges ending mid-frame, often
    data: bytes | bytearray | memoryview = (bytes, bytearray, memoryview)[container](buf)
    want = outcome(expected, buf, base)
    assert outcome(_decode, data, base, True) == want  # the numba kernels, whatever the size
    assert outcome(decode_events, data, base) == want  # the path picked by size
    whole, nxt, bad = walk_frames(data)
    assert (whole, bad) == (want[2], False)
    rest = buf[whole:]
    assert nxt == (4 + struct.unpack_from("<I", rest)[0] if len(rest) >= 4 else None)
    assert _walk(data, True) == _walk(data, False) == (whole, nxt, bad)


@settings(max_examples=300)  # above the profile's 100: pure decoders, fast examples
@given(
    frames=st.lists(st.one_of(event_st, marker_st), min_size=1, max_size=12),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
    base=st.integers(0, 2**40),
)
def test_malformed_bytes_give_the_same_error(
    frames: list[bytes], flips: list[tuple[int, int]], base: int
) -> None:
    """Random bytes overwritten (headers, keys, payloads): the same columns or the same error."""
    buf = bytearray(b"".join(frames))
    for at, value in flips:
        buf[at % len(buf)] = value
    want = outcome(expected, bytes(buf), base)
    assert outcome(_decode, bytes(buf), base, True) == want
    whole, _, bad = walk_frames(bytes(buf))
    assert _walk(bytes(buf), True) == _walk(bytes(buf), False)
    if want[0] == "ok":
        assert (whole, bad) == (want[2], False)


@given(
    frames=st.lists(st.one_of(event_st, event_st, marker_st), max_size=12),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3),
    cut=st.integers(0, 20),
    base=st.integers(0, 2**40),
)
def test_scanning_for_markers_with_the_kernels_finds_what_decoding_finds(
    frames: list[bytes], flips: list[tuple[int, int]], cut: int, base: int
) -> None:
    """``scan_markers``' kernel paths (a buffer of events alone; markers found by their headers)
    give the markers, bytes consumed and errors that decoding every frame gives: whole, cut
    short, or with bytes overwritten."""
    import readergroup.format._frame_kernels  # noqa: F401  (loaded: the kernel path is taken)

    buf = bytearray(b"".join(frames))
    for at, value in flips if buf else []:
        buf[at % len(buf)] = value
    data = bytes(buf[: max(0, len(buf) - cut)])
    fast = outcome(scan_markers, data, base)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(producer_watermarks, "_loaded_kernels", lambda: None)
        assert outcome(scan_markers, data, base) == fast


@settings(max_examples=300)  # above the profile's 100: pure decoders, fast examples
@given(key=st.binary(max_size=12), pad=st.binary(max_size=4), kind=st.sampled_from([0, 1, 2]))
def test_routing_keys_are_utf8_as_python_decodes_them(key: bytes, pad: bytes, kind: int) -> None:
    """Any key bytes, events and markers: valid exactly when Python's strict UTF-8 codec says so."""
    frame = struct.pack("<IBqH", HEADER_SIZE - 4 + len(key) + len(pad), kind, 5, len(key)) + key + pad
    buf = encode_event("ok", b"p") + frame + encode_event("é", b"")
    assert outcome(_decode, buf, 100, True) == outcome(expected, buf, 100)


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (struct.pack("<IBqH", 5, 0, 0, 3) + b"abc", "rest_length 5 is shorter"),
        (b"\x0b\x00\x00\x00\x07" + bytes(10), "unknown kind 7"),
        (struct.pack("<IBqH", 13, 0, 0, 2) + b"\xff\xfe", "routing key is not valid UTF-8"),
        (struct.pack("<IBqH", 14, 1, 0, 3) + b"\xed\xa0\x80", "routing key is not valid UTF-8"),  # surrogate
    ],
)
@pytest.mark.parametrize("pad", [0, 40_000])  # the Python path and the kernels
def test_corrupt_frames_name_their_offset(bad: bytes, match: str, pad: int) -> None:
    good = b"".join(encode_event("k", b"x" * 50) for _ in range(pad // 65 + 1))
    with pytest.raises(FrameFormatError, match=match) as python:
        decode_frames(good + bad, 100)
    with pytest.raises(FrameFormatError) as bulk:
        decode_events(good + bad, 100)
    assert str(bulk.value) == str(python.value) and f"offset {100 + len(good)}" in str(bulk.value)


def test_large_buffers_and_empty_ones() -> None:
    rng = np.random.default_rng(3)
    frames = [
        encode_event(
            f"key-{i % 97}-ü", rng.bytes(int(rng.integers(0, 300))), int(rng.integers(-(10**15), 10**15))
        )
        if i % 11
        else encode_watermark_marker(7, i)
        for i in range(30_000)
    ]
    buf = b"".join(frames)
    assert outcome(decode_events, buf, 9) == outcome(expected, buf, 9)
    assert outcome(decode_events, b"", 9) == ("ok", [], 0)
    assert walk_frames(b"") == (0, None, False)
    markers, _ = decode_events(b"".join(frames[::11]) * 5000, 0)
    assert len(markers) == 0 and markers.routing_keys.type == pa.string()


# ---------------------------------------------------------------------- encoding
rows_st = st.lists(
    st.tuples(st.text(max_size=10), st.binary(max_size=30), times_st),
    max_size=40,
)


@settings(max_examples=150)  # above the profile's 100: pure encoders, fast examples
@given(rows=rows_st, sliced=st.integers(0, 3), large=st.booleans(), text_payload=st.booleans())
def test_encoded_columns_are_encode_events_frames(
    rows: list[tuple[str, bytes, int | None]], sliced: int, large: bool, text_payload: bool
) -> None:
    keys = pa.array([r[0] for r in rows] + ["x"] * sliced, pa.large_string() if large else pa.string())
    if text_payload:
        rows = [(k, p.hex().encode(), t) for k, p, t in rows]
        pays = pa.array([r[1].decode() for r in rows] + ["y"] * sliced, pa.string())
    else:
        pays = pa.array([r[1] for r in rows] + [b"y"] * sliced, pa.binary())
    times = pa.array([r[2] for r in rows] + [1] * sliced, pa.int64())
    if sliced:  # columns that are slices of bigger arrays (offset > 0)
        keys, pays, times = keys.slice(sliced), pays.slice(sliced), times.slice(sliced)
        rows = (rows + [("x", b"y", 1)] * sliced)[sliced:]
    enc = encode_events(keys, pays, times)
    want = [encode_event(k, p, t) for k, p, t in rows]
    assert enc.frames() == want and enc.data == b"".join(want)
    assert enc.hashes().tolist() == [key_hash(k) for k, _, _ in rows]
    assert len(enc) == len(rows) and enc.ends.tolist() == np.cumsum([len(f) for f in want]).tolist()


def test_encoding_without_event_times_and_refusals_as_encode_event() -> None:
    enc = encode_events(pa.array(["a", ""]), pa.array([b"", b"zz"]))
    assert enc.frames() == [encode_event("a", b""), encode_event("", b"zz")]
    refused = [
        (["k" * (MAX_KEY_BYTES + 1)], [b"p"], [None], "at most"),
        (["k", "j"], [b"p", b"q"], [1, INT64_MIN], "outside"),
    ]
    for keys, pays, times, match in refused:
        with pytest.raises(InvalidEventError, match=match) as bulk:
            encode_events(pa.array(keys), pa.array(pays), pa.array(times, pa.int64()))
        with pytest.raises(InvalidEventError) as single:
            encode_event(keys[-1], pays[-1], times[-1])
        assert str(bulk.value) == str(single.value)
    with pytest.raises(InvalidEventError, match="routing key column has a null value"):
        encode_events(pa.array(["a", None]), pa.array([b"", b""]))
    with pytest.raises(InvalidEventError, match="payload column has a null value"):
        encode_events(pa.array(["a"]), pa.array([None], pa.binary()))
