"""Pravega's wire protocol as the 0.3.7 client speaks it: framing, field encodings, command registry.

Every command travels as ``i32 type code`` + ``i32 payload length`` + payload, all
big-endian; the largest payload is ``MAX_WIRECOMMAND_SIZE`` (16 MiB - 1). A payload is
the command's fields in order, each in one of these encodings (the Rust client's
big-endian bincode):

- ``i32``/``i64``/``u8``: fixed width; ``bool``: one byte, 0 or 1; ``u128``: 16 bytes
  (a writer id or attribute id);
- ``str``: ``u16`` length + UTF-8; ``bytes``: ``u32`` length + bytes;
- ``i64s``/``strs``: ``u32`` count + items; ``keys``: ``u32`` count + ``TableKey``s
  (``i32`` payload, ``bytes`` data, ``i64`` version); ``entries``: ``u32`` count +
  (``TableKey``, ``TableValue``) pairs (``i32`` payload, ``bytes`` data); ``chunks``:
  ``u32`` count + ``ChunkInfo``s;
- ``event``: an ``Event`` as the client frames it inside a conditional append: ``i32``
  type code 0 + ``u32`` length + payload (the same 8-byte header every event carries
  inside an append block);
- ``rest``: the rest of the payload as is (``PartialEvent``); ``pad``: as many zero
  bytes as the field says (``Padding``).

Each command is a frozen dataclass registered with ``@command(type_code, layout)``
(``wire_requests``, ``wire_replies``); ``encode`` and ``decode_request``/``decode_reply``
turn them into frames and back. Decoding never trusts its input: a short payload, a
bad length, invalid UTF-8 or an unknown type code is a ``WireFormatError`` naming the
command and the byte. Trailing bytes after the last field are ignored, as Pravega's
decoders do (newer versions append fields).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from .errors import WireFormatError

__all__ = [
    "WIRE_VERSION",
    "OLDEST_COMPATIBLE_VERSION",
    "MAX_WIRECOMMAND_SIZE",
    "HEADER",
    "EVENT_TYPE",
    "NULL_EVENT_NUMBER",
    "TableKey",
    "TableValue",
    "ChunkInfo",
    "Spec",
    "command",
    "spec_of",
    "encode",
    "encode_payload",
    "decode_request",
    "decode_reply",
    "request_types",
    "reply_types",
]

WIRE_VERSION = 15
"""The wire version the 0.3.7 client speaks (it needs a server ``Hello`` with ``low <= 15 <= high``)."""
OLDEST_COMPATIBLE_VERSION = 5
MAX_WIRECOMMAND_SIZE = 0x00FF_FFFF
"""Largest payload of one command (16 MiB - 1), as both sides enforce it."""
HEADER = struct.Struct(">ii")
"""Type code and payload length of every command; also the header of every event in an append."""
EVENT_TYPE = 0
"""Type code of an ``Event``: the first 4 bytes of every event a Pravega writer appends."""
NULL_EVENT_NUMBER = -(2**63)
"""``AppendSetup``'s last event number for a writer that never appended to the segment (``i64::MIN``)."""

_I32 = struct.Struct(">i")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_U8 = struct.Struct(">B")
_U128 = struct.Struct(">QQ")


@dataclass(frozen=True, slots=True)
class TableKey:
    """A table key as the client sends it: ``payload`` (its own size bookkeeping), bytes, key version."""

    payload: int
    data: bytes
    key_version: int


@dataclass(frozen=True, slots=True)
class TableValue:
    """A table value as the client sends it: ``payload`` and bytes."""

    payload: int
    data: bytes


@dataclass(frozen=True, slots=True)
class ChunkInfo:
    """One storage chunk of a segment (``StorageChunksListed``)."""

    length_in_metadata: int
    length_in_storage: int
    start_offset: int
    chunk_name: str
    exists_in_storage: bool


@dataclass(frozen=True, slots=True)
class Spec:
    """A command class's wire facts: type code, name, field names and their encodings."""

    type_code: int
    name: str
    names: tuple[str, ...]
    kinds: tuple[str, ...]


_KINDS = frozenset(
    {"i32", "i64", "u8", "bool", "u128", "str", "bytes", "i64s", "strs", "keys", "entries", "chunks"}
    | {"event", "rest", "pad"}
)
_REQUESTS: dict[int, type] = {}
_REPLIES: dict[int, type] = {}
_SPECS: dict[type, Spec] = {}
_C = TypeVar("_C", bound=type)


def command(type_code: int, layout: str, *, request: bool = False, reply: bool = False) -> Callable[[_C], _C]:
    """Register a frozen dataclass as a command: its fields in order travel as ``layout`` says."""

    def register(cls: _C) -> _C:
        kinds = tuple(layout.split())
        names = tuple(f.name for f in fields(cls))
        if len(kinds) != len(names) or not set(kinds) <= _KINDS:
            raise ValueError(f"{cls.__name__}: layout {layout!r} does not match fields {names}")
        for table, on in ((_REQUESTS, request), (_REPLIES, reply)):
            if on:
                if type_code in table:
                    raise ValueError(
                        f"{cls.__name__}: type code {type_code} is {table[type_code].__name__}'s"
                    )
                table[type_code] = cls
        _SPECS[cls] = Spec(type_code, cls.__name__, names, kinds)
        cls.TYPE_CODE = type_code  # type: ignore[attr-defined]
        return cls

    return register


def spec_of(cls: type) -> Spec:
    """The wire facts of a registered command class."""
    return _SPECS[cls]


def request_types() -> dict[int, type]:
    """Type code -> class of every command a client sends."""
    return dict(_REQUESTS)


def reply_types() -> dict[int, type]:
    """Type code -> class of every command a server answers with."""
    return dict(_REPLIES)


# ---------------------------------------------------------------------- encoding
def _put_str(out: list[bytes], s: str) -> None:
    raw = s.encode("utf-8")
    if len(raw) > 0xFFFF:
        raise WireFormatError(f"a string of {len(raw)} bytes does not fit a u16 length: {s[:60]!r}...")
    out.append(_U16.pack(len(raw)))
    out.append(raw)


def _put_bytes(out: list[bytes], b: bytes) -> None:
    out.append(_U32.pack(len(b)))
    out.append(bytes(b))


def _put_key(out: list[bytes], k: TableKey) -> None:
    out.append(_I32.pack(k.payload))
    _put_bytes(out, k.data)
    out.append(_I64.pack(k.key_version))


def _put(out: list[bytes], kind: str, v: Any) -> None:
    if kind == "i64":
        out.append(_I64.pack(v))
    elif kind == "i32":
        out.append(_I32.pack(v))
    elif kind == "str":
        _put_str(out, v)
    elif kind == "bytes":
        _put_bytes(out, v)
    elif kind == "u128":
        out.append(_U128.pack(v >> 64, v & 0xFFFF_FFFF_FFFF_FFFF))
    elif kind == "bool":
        out.append(b"\x01" if v else b"\x00")
    elif kind == "u8":
        out.append(_U8.pack(v))
    elif kind == "event":
        out.append(HEADER.pack(EVENT_TYPE, len(v)))
        out.append(bytes(v))
    elif kind == "i64s":
        out.append(_U32.pack(len(v)))
        out.extend(_I64.pack(x) for x in v)
    elif kind == "strs":
        out.append(_U32.pack(len(v)))
        for s in v:
            _put_str(out, s)
    elif kind == "keys":
        out.append(_U32.pack(len(v)))
        for k in v:
            _put_key(out, k)
    elif kind == "entries":
        out.append(_U32.pack(len(v)))
        for k, val in v:
            _put_key(out, k)
            out.append(_I32.pack(val.payload))
            _put_bytes(out, val.data)
    elif kind == "chunks":
        out.append(_U32.pack(len(v)))
        for c in v:
            out.append(_I64.pack(c.length_in_metadata) + _I64.pack(c.length_in_storage))
            out.append(_I64.pack(c.start_offset))
            _put_str(out, c.chunk_name)
            out.append(b"\x01" if c.exists_in_storage else b"\x00")
    elif kind == "rest":
        out.append(bytes(v))
    else:  # pad
        out.append(bytes(v))


def encode_payload(cmd: Any) -> bytes:
    """The payload of a registered command (no header). O(size)."""
    spec = _SPECS[type(cmd)]
    out: list[bytes] = []
    try:
        for name, kind in zip(spec.names, spec.kinds, strict=True):
            _put(out, kind, getattr(cmd, name))
    except (struct.error, TypeError, AttributeError) as e:
        raise WireFormatError(f"{spec.name}: a field cannot be encoded: {e}") from None
    return b"".join(out)


def encode(cmd: Any) -> bytes:
    """A whole frame: type code, payload length, payload. O(size)."""
    spec = _SPECS[type(cmd)]
    payload = encode_payload(cmd)
    if len(payload) > MAX_WIRECOMMAND_SIZE:
        raise WireFormatError(
            f"{spec.name}: a payload of {len(payload)} bytes exceeds the largest command "
            f"({MAX_WIRECOMMAND_SIZE})"
        )
    return HEADER.pack(spec.type_code, len(payload)) + payload


# ---------------------------------------------------------------------- decoding
class _Reader:
    """A bounds-checked cursor over one payload; errors name the command and byte."""

    __slots__ = ("buf", "name", "pos")

    def __init__(self, buf: bytes | memoryview, name: str) -> None:
        self.buf = buf
        self.name = name
        self.pos = 0

    def fail(self, what: str) -> WireFormatError:
        return WireFormatError(f"{self.name}: {what} at byte {self.pos} of a {len(self.buf)}-byte payload")

    def take(self, st: struct.Struct) -> tuple[Any, ...]:
        if self.pos + st.size > len(self.buf):
            raise self.fail(f"the payload ends inside a {st.size}-byte field")
        v = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return v

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise self.fail(f"a length of {n} bytes runs past the payload")
        out = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return out

    def count(self, item_bytes: int) -> int:
        n: int = self.take(_U32)[0]
        if n * item_bytes > len(self.buf) - self.pos:
            raise self.fail(f"a count of {n} items cannot fit the rest of the payload")
        return n

    def string(self) -> str:
        n = self.take(_U16)[0]
        raw = self.raw(n)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail("a string is not UTF-8") from None

    def key(self) -> TableKey:
        payload = self.take(_I32)[0]
        data = self.raw(self.take(_U32)[0])
        return TableKey(payload, data, self.take(_I64)[0])

    def get(self, kind: str) -> Any:
        if kind == "i64":
            return self.take(_I64)[0]
        if kind == "i32":
            return self.take(_I32)[0]
        if kind == "str":
            return self.string()
        if kind == "bytes":
            return self.raw(self.take(_U32)[0])
        if kind == "u128":
            hi, lo = self.take(_U128)
            return (hi << 64) | lo
        if kind == "bool":
            b = self.take(_U8)[0]
            if b > 1:
                raise self.fail(f"a bool is {b}, neither 0 nor 1")
            return b == 1
        if kind == "u8":
            return self.take(_U8)[0]
        if kind == "event":
            t, n = self.take(HEADER)
            if t != EVENT_TYPE:
                raise self.fail(f"an event has type code {t}, not {EVENT_TYPE}")
            return self.raw(n)
        if kind == "i64s":
            return tuple(self.take(_I64)[0] for _ in range(self.count(8)))
        if kind == "strs":
            return tuple(self.string() for _ in range(self.count(2)))
        if kind == "keys":
            return tuple(self.key() for _ in range(self.count(16)))
        if kind == "entries":
            out = []
            for _ in range(self.count(24)):
                k = self.key()
                payload = self.take(_I32)[0]
                out.append((k, TableValue(payload, self.raw(self.take(_U32)[0]))))
            return tuple(out)
        if kind == "chunks":
            chunks = []
            for _ in range(self.count(27)):
                m, s, st = self.take(_I64)[0], self.take(_I64)[0], self.take(_I64)[0]
                chunks.append(ChunkInfo(m, s, st, self.string(), self.get("bool")))
            return tuple(chunks)
        rest = self.raw(len(self.buf) - self.pos)
        return rest if kind == "rest" else len(rest)  # pad: its length


def _decode(table: dict[int, type], direction: str, type_code: int, payload: bytes | memoryview) -> Any:
    cls = table.get(type_code)
    if cls is None:
        raise WireFormatError(f"unknown {direction} type code {type_code} ({len(payload)}-byte payload)")
    spec = _SPECS[cls]
    r = _Reader(payload, spec.name)
    return cls(*(r.get(k) for k in spec.kinds))


def decode_request(type_code: int, payload: bytes | memoryview) -> Any:
    """A command a client sent, from its type code and payload; ``WireFormatError`` if malformed."""
    return _decode(_REQUESTS, "request", type_code, payload)


def decode_reply(type_code: int, payload: bytes | memoryview) -> Any:
    """A command a server sent, from its type code and payload; ``WireFormatError`` if malformed."""
    return _decode(_REPLIES, "reply", type_code, payload)
