"""Pravega's wire codec (segmentstore.pravega.wire): every command of the 0.3.7 client round-trips,
layouts match the Rust client's bincode byte for byte, and malformed payloads are refused."""

from __future__ import annotations

import struct
from dataclasses import fields
from typing import Any

import pytest

from segmentstore import SegmentStoreError
from segmentstore.pravega import wire_replies as rep
from segmentstore.pravega import wire_requests as req
from segmentstore.pravega.errors import WireFormatError
from segmentstore.pravega.wire import (
    HEADER,
    MAX_WIRECOMMAND_SIZE,
    ChunkInfo,
    TableKey,
    TableValue,
    decode_reply,
    decode_request,
    encode,
    encode_payload,
    reply_types,
    request_types,
    spec_of,
)

# the type codes of the 0.3.7 client's commands (wire_protocol/src/commands.rs)
REQUEST_CODES = {
    -127, 100, -1, -2, 0, 1, 3, 4, 5, 9, 11, 20, 28, 30, 32, 34, 36, 38, 40, 58,
    68, 70, 71, 72, 73, 74, 76, 78, 83, 85, 88, 89, 90, -3, -5,
}  # fmt: skip
REPLY_CODES = {
    -127, 100, 2, 7, 8, 10, 12, 21, 29, 31, 33, 35, 37, 39, 50, 51, 52, 53, 55, 56,
    57, 59, 60, 61, 69, 75, 77, 79, 80, 81, 82, 84, 86, 87, 91, -4, -6,
}  # fmt: skip

_KEY = TableKey(21, b"\x00key\xff", -1)
_VALUE = TableValue(9, b"value")


def _sample(kind: str, salt: int) -> Any:
    return {
        "i32": -(2**31) + salt,
        "i64": 2**63 - 1 - salt,
        "u8": 200 + salt % 50,
        "bool": salt % 2 == 1,
        "u128": 2**128 - 1 - salt,
        "str": f"scope/stream-{salt}/0.#epoch.{salt} é",
        "bytes": bytes(range(salt % 7 + 1)) * 3,
        "event": b"payload-%d" % salt,
        "rest": b"partial-%d" % salt,
        "pad": salt % 5,
        "i64s": (-(2**63), 0, salt),
        "strs": ("a", "", f"b{salt}"),
        "keys": (_KEY, TableKey(0, b"", 2**63 - 1)),
        "entries": ((_KEY, _VALUE), (TableKey(1, b"k2", salt), TableValue(0, b""))),
        "chunks": (ChunkInfo(1, 2, 3, "chunk-é", True), ChunkInfo(-1, 0, 2**40, "", False)),
    }[kind]


def _instance(cls: type, salt: int) -> Any:
    spec = spec_of(cls)
    return cls(*(_sample(k, salt + i) for i, k in enumerate(spec.kinds)))


ALL = sorted({*request_types().values(), *reply_types().values()}, key=lambda c: c.__name__)
FIXED = [c for c in ALL if spec_of(c).kinds and spec_of(c).kinds[-1] not in ("rest", "pad")]
"""Commands whose every field is required: any strict prefix of their payload is malformed."""


def test_the_registry_holds_every_command_of_the_client_with_its_type_code() -> None:
    assert set(request_types()) == REQUEST_CODES
    assert set(reply_types()) == REPLY_CODES
    assert len(req.__all__) == 35 and len(rep.__all__) == 35
    for cls in ALL:
        assert [f.name for f in fields(cls)] == list(spec_of(cls).names)


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_every_command_round_trips(cls: type) -> None:
    for salt in (0, 1, 6):
        cmd = _instance(cls, salt)
        frame = encode(cmd)
        code, n = HEADER.unpack_from(frame)
        assert code == cls.TYPE_CODE and n == len(frame) - HEADER.size  # type: ignore[attr-defined]
        payload = frame[HEADER.size :]
        if code in request_types() and request_types()[code] is cls:
            assert decode_request(code, payload) == cmd
        if code in reply_types() and reply_types()[code] is cls:
            assert decode_reply(code, payload) == cmd
        # trailing bytes (a newer peer's extra fields) are ignored, as Pravega's decoders do
        decode = decode_request if code in request_types() else decode_reply
        if cls in FIXED:
            assert decode(code, payload + b"\x07\x07") == cmd


@pytest.mark.parametrize("cls", FIXED, ids=lambda c: c.__name__)
def test_every_strict_prefix_of_a_payload_is_refused_with_a_wire_format_error(cls: type) -> None:
    cmd = _instance(cls, 3)
    payload = encode_payload(cmd)
    code = cls.TYPE_CODE  # type: ignore[attr-defined]
    decode = decode_request if request_types().get(code) is cls else decode_reply
    for cut in range(len(payload)):
        with pytest.raises(WireFormatError, match=cls.__name__):
            decode(code, payload[:cut])


def test_layouts_are_the_rust_clients_big_endian_bincode() -> None:
    writer = 0x0102030405060708_090A0B0C0D0E0F10
    setup = req.SetupAppend(7, writer, "s/t/0.#epoch.0", "tok")
    want = (
        struct.pack(">q", 7)
        + writer.to_bytes(16, "big")
        + struct.pack(">H", 14)
        + b"s/t/0.#epoch.0"
        + struct.pack(">H", 3)
        + b"tok"
    )
    assert encode(setup) == struct.pack(">ii", 1, len(want)) + want
    block = req.AppendBlockEnd(writer, 13, b"\0\0\0\0\0\0\0\x05hello", 1, 9, 11)
    want = (
        writer.to_bytes(16, "big")
        + struct.pack(">i", 13)
        + struct.pack(">I", 13)
        + b"\0\0\0\0\0\0\0\x05hello"
        + struct.pack(">iqq", 1, 9, 11)
    )
    assert encode_payload(block) == want
    read = rep.SegmentRead("s", 5, True, False, b"xy", -3)
    tail = struct.pack(">q", -3)
    assert encode_payload(read) == b"\0\x01s" + struct.pack(">q", 5) + b"\x01\x00" + b"\0\0\0\x02xy" + tail
    assert encode(req.Hello(15, 5)) == struct.pack(">iiii", -127, 8, 15, 5)
    assert encode(req.KeepAlive()) == struct.pack(">ii", 100, 0)
    # a conditional append's event carries the 8-byte event header inside the payload
    ca = req.ConditionalAppend(1, 2, 3, b"ev", 4)
    want = (1).to_bytes(16, "big") + struct.pack(">qqiI", 2, 3, 0, 2) + b"ev" + struct.pack(">q", 4)
    assert encode_payload(ca) == want
    entry = (TableKey(13, b"k", -1), TableValue(5, b"v"))
    entries = rep.TableEntriesDeltaRead(1, "t", (entry,), True, False, 42)
    assert encode_payload(entries) == (
        struct.pack(">q", 1)
        + b"\0\x01t"
        + struct.pack(">I", 1)
        + struct.pack(">iI", 13, 1)
        + b"k"
        + struct.pack(">q", -1)
        + struct.pack(">iI", 5, 1)
        + b"v"
        + b"\x01\x00"
        + struct.pack(">q", 42)
    )


def test_malformed_payloads_name_what_was_wrong() -> None:
    with pytest.raises(WireFormatError, match="unknown request type code 4242"):
        decode_request(4242, b"")
    bad_bool = encode_payload(rep.SegmentRead("s", 0, True, False, b"", 1))
    bad_bool = bad_bool[:11] + b"\x02" + bad_bool[12:]
    with pytest.raises(WireFormatError, match="SegmentRead: a bool is 2"):
        decode_reply(10, bad_bool)
    with pytest.raises(WireFormatError, match="not UTF-8"):
        decode_request(28, struct.pack(">qH", 1, 2) + b"\xff\xfe" + struct.pack(">H", 0))
    huge = struct.pack(">qI", 1, 0xFFFFFFF0)
    with pytest.raises(WireFormatError, match="cannot fit"):
        decode_reply(75, huge)
    with pytest.raises(WireFormatError, match="type code 3, not 0"):
        decode_request(0, struct.pack(">iI", 3, 0))
    assert issubclass(WireFormatError, SegmentStoreError)


def test_an_oversized_command_or_string_is_refused_on_encoding() -> None:
    with pytest.raises(WireFormatError, match="does not fit a u16"):
        encode(req.SealSegment(1, "x" * 70_000, ""))
    with pytest.raises(WireFormatError, match="largest command"):
        encode(rep.SegmentRead("s", 0, False, False, b"\0" * MAX_WIRECOMMAND_SIZE, 1))
