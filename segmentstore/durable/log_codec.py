"""Binary encoding of operations for the durable log: versioned, ``struct``-based, never pickle.

Every encoded operation starts with a 1-byte format version and a 1-byte type tag,
then the signed 64-bit ``seq`` and ``timestamp``, then the operation's fields in a
fixed order (strings as a 32-bit length and UTF-8; optional strings with length -1
for ``None``; an ``Append``'s payload is the rest of the record, so it is never
length-prefixed twice). Decoding checks the version, the tag and every length, and
raises ``DataCorruptionError`` on anything it cannot read: it never trusts its input.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from ..core.operations import (
    Append,
    CreateSegment,
    Delete,
    MergeTransaction,
    Operation,
    Seal,
    Truncate,
    UpdateAttributes,
)
from ..errors import DataCorruptionError, InvalidArgumentError

__all__ = ["CODEC_VERSION", "encode_operation", "encode_operation_parts", "decode_operation"]

CODEC_VERSION = 1
"""The format version written into every encoded operation."""

_T_CREATE = 1
_T_APPEND = 2
_T_MERGE = 3
_T_ATTRS = 4
_T_SEAL = 5
_T_TRUNCATE = 6
_T_DELETE = 7
_T_ATTRS_REMOVING = 8  # attribute values and removed keys (logs without removals keep _T_ATTRS)

_HEAD = struct.Struct("<BBqq")  # version, tag, seq, timestamp
_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_Q = struct.Struct("<q")
_QQ = struct.Struct("<qq")
_QBQ = struct.Struct("<qBq")  # attribute key, kept (0: removed), value
_APPEND_FIXED = struct.Struct("<qB")  # offset, flags
_WRITER = 1
_EVENT = 2
_UUID = 4  # a 128-bit writer id follows the 64-bit one's place (logs written before it never set it)
_U128 = struct.Struct(">QQ")

_name_cache: dict[str, bytes] = {}


def _name(s: str) -> bytes:
    """Length-prefixed UTF-8 of a segment name, cached (names repeat). O(1) amortised."""
    b = _name_cache.get(s)
    if b is None:
        raw = s.encode("utf-8")
        b = _U32.pack(len(raw)) + raw
        if len(_name_cache) >= 65_536:
            _name_cache.clear()
        _name_cache[s] = b
    return b


def _opt_name(s: str | None) -> bytes:
    return _I32.pack(-1) if s is None else _name(s)


def encode_operation_parts(op: Operation) -> list[bytes]:
    """The encoding of ``op``: ``[header]``, or ``[header, data]`` for an ``Append`` (data not copied)."""
    t = type(op)
    if t is Append:
        assert isinstance(op, Append)
        flags = (_WRITER if op.writer_id is not None else 0) | (_EVENT if op.event_number is not None else 0)
        if op.writer_uuid is not None:
            flags |= _UUID
        fixed = _HEAD.pack(CODEC_VERSION, _T_APPEND, op.seq, op.timestamp) + _name(op.name)
        fixed += _APPEND_FIXED.pack(op.offset, flags)
        if op.writer_id is not None:
            fixed += _Q.pack(op.writer_id)
        if op.writer_uuid is not None:
            fixed += _U128.pack(op.writer_uuid >> 64, op.writer_uuid & 0xFFFF_FFFF_FFFF_FFFF)
        if op.event_number is not None:
            fixed += _Q.pack(op.event_number)
        return [fixed, op.data]
    head = op.seq, op.timestamp
    if t is CreateSegment:
        assert isinstance(op, CreateSegment)
        body = _name(op.name) + _opt_name(op.parent)
        tag = _T_CREATE
    elif t is MergeTransaction:
        assert isinstance(op, MergeTransaction)
        body = _name(op.txn) + _name(op.parent) + _QQ.pack(op.offset, op.length)
        tag = _T_MERGE
    elif t is UpdateAttributes:
        assert isinstance(op, UpdateAttributes)
        parts = [_name(op.name), _U32.pack(len(op.values))]
        if all(v is not None for _, v in op.values):
            parts.extend(_QQ.pack(k, v) for k, v in op.values)
            tag = _T_ATTRS
        else:  # (key, kept, value): a removed key is kept 0, value 0
            parts.extend(_QBQ.pack(k, v is not None, v or 0) for k, v in op.values)
            tag = _T_ATTRS_REMOVING
        body = b"".join(parts)
    elif t is Seal:
        assert isinstance(op, Seal)
        body = _name(op.name)
        tag = _T_SEAL
    elif t is Truncate:
        assert isinstance(op, Truncate)
        body = _name(op.name) + _Q.pack(op.offset)
        tag = _T_TRUNCATE
    elif t is Delete:
        assert isinstance(op, Delete)
        body = _name(op.name)
        tag = _T_DELETE
    else:
        raise InvalidArgumentError(f"codec: cannot encode operation of type {t.__name__}")
    return [_HEAD.pack(CODEC_VERSION, tag, *head) + body]


def encode_operation(op: Operation) -> bytes:
    """The encoding of ``op`` as one ``bytes``. O(size)."""
    return b"".join(encode_operation_parts(op))


class _Reader:
    """Bounds-checked cursor over one encoded operation."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes | memoryview, pos: int) -> None:
        self.buf = buf
        self.pos = pos

    def _take(self, st: struct.Struct) -> tuple[int, ...]:
        if self.pos + st.size > len(self.buf):
            raise DataCorruptionError(f"operation record ends early at byte {self.pos}")
        v = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return v

    def i64(self) -> int:
        return self._take(_Q)[0]

    def name(self) -> str:
        n = self._take(_U32)[0]
        return self._str(n)

    def opt_name(self) -> str | None:
        n = self._take(_I32)[0]
        if n == -1:
            return None
        if n < 0:
            raise DataCorruptionError(f"bad string length {n} at byte {self.pos - 4}")
        return self._str(n)

    def _str(self, n: int) -> str:
        end = self.pos + n
        if end > len(self.buf):
            raise DataCorruptionError(f"string of {n} bytes at byte {self.pos} runs past the record")
        try:
            s = bytes(self.buf[self.pos : end]).decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataCorruptionError(f"string at byte {self.pos} is not UTF-8: {e}") from None
        self.pos = end
        return s

    def rest(self) -> bytes:
        out = bytes(self.buf[self.pos :])
        self.pos = len(self.buf)
        return out

    def done(self, what: str) -> None:
        if self.pos != len(self.buf):
            raise DataCorruptionError(
                f"{what} record has {len(self.buf) - self.pos} unexpected trailing bytes"
            )


def _d_create(r: _Reader, seq: int, ts: int) -> Operation:
    return CreateSegment(seq, ts, r.name(), r.opt_name())


def _d_append(r: _Reader, seq: int, ts: int) -> Operation:
    name = r.name()
    offset, flags = r._take(_APPEND_FIXED)
    if flags & ~(_WRITER | _EVENT | _UUID):
        raise DataCorruptionError(f"append record has unknown flags {flags:#x}")
    writer = r.i64() if flags & _WRITER else None
    uuid = None
    if flags & _UUID:
        hi, lo = r._take(_U128)
        uuid = (hi << 64) | lo
    event = r.i64() if flags & _EVENT else None
    if uuid is not None and (writer is not None or event is None):
        raise DataCorruptionError(f"append record has a 128-bit writer id with flags {flags:#x}")
    return Append(seq, ts, name, offset, r.rest(), writer, event, uuid)


def _d_merge(r: _Reader, seq: int, ts: int) -> Operation:
    txn, parent = r.name(), r.name()
    offset, length = r._take(_QQ)
    return MergeTransaction(seq, ts, txn, parent, offset, length)


def _d_attrs(r: _Reader, seq: int, ts: int) -> Operation:
    name = r.name()
    n = r._take(_U32)[0]
    if r.pos + n * _QQ.size > len(r.buf):
        raise DataCorruptionError(f"attribute count {n} runs past the record")
    values = tuple((k, v) for k, v in _QQ.iter_unpack(r.buf[r.pos : r.pos + n * _QQ.size]))
    r.pos += n * _QQ.size
    return UpdateAttributes(seq, ts, name, values)


def _d_attrs_removing(r: _Reader, seq: int, ts: int) -> Operation:
    name = r.name()
    n = r._take(_U32)[0]
    if r.pos + n * _QBQ.size > len(r.buf):
        raise DataCorruptionError(f"attribute count {n} runs past the record")
    values: list[tuple[int, int | None]] = []
    for k, kept, v in _QBQ.iter_unpack(r.buf[r.pos : r.pos + n * _QBQ.size]):
        if kept > 1 or (not kept and v):
            raise DataCorruptionError(f"attribute {k}: bad removal flag {kept} with value {v}")
        values.append((k, v if kept else None))
    r.pos += n * _QBQ.size
    return UpdateAttributes(seq, ts, name, tuple(values))


def _d_seal(r: _Reader, seq: int, ts: int) -> Operation:
    return Seal(seq, ts, r.name())


def _d_truncate(r: _Reader, seq: int, ts: int) -> Operation:
    return Truncate(seq, ts, r.name(), r.i64())


def _d_delete(r: _Reader, seq: int, ts: int) -> Operation:
    return Delete(seq, ts, r.name())


_DECODERS: dict[int, Callable[[_Reader, int, int], Operation]] = {
    _T_CREATE: _d_create,
    _T_APPEND: _d_append,
    _T_MERGE: _d_merge,
    _T_ATTRS: _d_attrs,
    _T_ATTRS_REMOVING: _d_attrs_removing,
    _T_SEAL: _d_seal,
    _T_TRUNCATE: _d_truncate,
    _T_DELETE: _d_delete,
}


_name_of: dict[bytes, str] = {}


def _fast_append(buf: bytes | memoryview, seq: int, ts: int) -> Operation | None:
    """Decode a well-formed plain append (no writer id); ``None`` sends it to the checked path."""
    n = len(buf)
    if n < _HEAD.size + 4:
        return None
    ln = _U32.unpack_from(buf, _HEAD.size)[0]
    end = _HEAD.size + 4 + ln
    if end + _APPEND_FIXED.size > n:
        return None
    raw = bytes(buf[_HEAD.size + 4 : end])
    name = _name_of.get(raw)
    if name is None:
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
        if len(_name_of) >= 65_536:
            _name_of.clear()
        _name_of[raw] = name
    offset, flags = _APPEND_FIXED.unpack_from(buf, end)
    if flags:
        return None
    return Append(seq, ts, name, offset, bytes(buf[end + _APPEND_FIXED.size :]))


def decode_operation(buf: bytes | memoryview) -> Operation:
    """Decode one operation; ``DataCorruptionError`` if it is malformed. O(size)."""
    if len(buf) < _HEAD.size:
        raise DataCorruptionError(f"operation record of {len(buf)} bytes is too short")
    version, tag, seq, ts = _HEAD.unpack_from(buf, 0)
    if version != CODEC_VERSION:
        raise DataCorruptionError(
            f"operation record has format version {version}; this build reads {CODEC_VERSION}"
        )
    if tag == _T_APPEND:  # the common case, without the general reader
        op = _fast_append(buf, seq, ts)
        if op is not None:
            return op
    dec = _DECODERS.get(tag)
    if dec is None:
        raise DataCorruptionError(f"operation record has unknown type tag {tag}")
    r = _Reader(buf, _HEAD.size)
    op = dec(r, seq, ts)
    r.done(type(op).__name__)
    return op
