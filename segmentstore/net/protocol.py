"""The segment store wire protocol, version 2: frames, headers, values, errors and commands.

This docstring is the protocol's documentation. All integers in frame prefixes are
unsigned 32-bit big-endian.

Frame
-----
::

    offset  size  field
    0       4     N: length of everything after this field (4 <= N <= max_frame_bytes)
    4       4     H: length of the header (H <= N - 4)
    8       H     header: one msgpack value (see below)
    8+H     N-4-H payload: raw bytes (append data, read data), never inside msgpack

A peer that receives ``N`` above its ``max_frame_bytes`` (default 16 MiB + 64 KiB),
``N < 4`` or ``H > N - 4`` answers with a fatal error frame and closes the connection.

Headers (msgpack arrays; strings are UTF-8, binaries are ``bin``)
------------------------------------------------------------------
- request: ``[0, request_id, command, args]`` -- ``args`` is a map of argument name to
  value; ``request_id`` is an unsigned int chosen by the client (0 is reserved);
- reply: ``[1, request_id, result]``;
- error: ``[2, request_id, error_class, message, attributes, fatal]`` -- the client
  raises the ``segmentstore.errors`` class of that name (``SegmentNotFoundError``,
  ``BadOffsetError`` with its ``expected``/``actual`` attributes, ...; a few builtin
  exceptions such as ``TypeError`` too; anything else becomes ``SegmentStoreError``).
  ``fatal`` means the server closes the connection after this frame; request id 0
  names the connection itself (malformed frame, idle timeout).

Every request gets exactly one reply or error frame with its request id. Appends on
one connection are executed and acknowledged in the order they arrive; a read that
waits completes later, so replies may come back out of request order.

Handshake
---------
The first frame must be the request ``hello`` with args ``{"version": int, "token": str
| None, "client": str, "max_frame_bytes": int}``, ``version`` the client's protocol
version. The reply is ``{"version", "server", "max_frame_bytes", "max_in_flight",
"idle_timeout_s"}``, ``version`` the server's. A version that is not an int >= 1, a
wrong or missing token (when the server has one) or any other first frame gets a fatal
error (``ProtocolError`` / ``AuthenticationError``) and the connection is closed.

Values
------
msgpack's nil, bool, int, float, str, bin, array and map, plus extension types, all of
a whitelist (nothing else is ever instantiated, nothing is unpickled):

- ext 1: a registered frozen dataclass, ``[type name, field values in order]``
  (``SegmentInfo``, ``AppendResult``, ``AttributeUpdate``, the stream types, ...);
- ext 2: a tuple, ``[items]`` (arrays decode as lists);
- ext 3: a registered enum, ``[type name, value]``;
- ext 4: a numpy array, ``[dtype str, shape, raw bytes]`` of a whitelisted dtype;
- ext 5: an int beyond 64 bits, signed big-endian bytes (at most 64).

Commands
--------
Every method of ``SegmentStoreClient`` is a command of the same name whose args are
the method's parameters by name and whose result is the method's return value
(``segmentstore.net.commands.COMMANDS`` lists them). Special forms:

- ``append``: args ``{"name", "sizes": [n, ...], "eo": [expected_offset | nil, ...] |
  nil, "wid": [writer_id | nil, ...] | nil, "ev": [event_number | nil, ...] | nil}``,
  payload the events back to back. Each item is one append (duplicates of a
  writer's event number are acknowledged, not stored again). The result is a list of
  entries covering the items in order: ``[offset, length, timestamp, duplicate]`` for
  one item, ``[offset, timestamp, count]`` for ``count`` items stored back to back
  from ``offset`` (their lengths are their sizes), or ``[nil, error_class, message,
  attributes]`` for an item that failed. The server stores a run of plain items (no
  expected offset; no writer, or one writer with increasing event numbers) as one
  store append, as Pravega aggregates appends into blocks.
- ``append_batch``: args ``{"name", "expected_offset", "=sizes": [n, ...]}``, payload
  the events back to back (one operation, one timestamp).
- ``read``: args ``{"name", "offset", "max_length", "wait_ms"}``; the result is
  ``[offset, watermark, end_of_segment, at_tail]`` with the data as the payload. The
  server caps ``max_length`` to fit a frame. With ``wait_ms > 0`` at the tail, the
  read completes on data, on a tail watermark increase, on seal, or after ``wait_ms``
  with a zero-length read, without holding up other requests.
- ``read_ranges``: args ``{"requests": [[name, offset, max_length], ...]}`` (at most
  ``MAX_STATE_REQUESTS``); the result is one entry per request, ``[offset, size,
  watermark, end_of_segment, at_tail, runs, nil]`` with ``size`` bytes of the payload
  (the reads' data back to back, a quarter of a frame at most in all: later reads come
  back shorter) and ``runs`` their ingestion runs (a numpy array, nil for no bytes), or
  ``[nil, 0, nil, false, false, nil, "ErrorClass: message"]`` for a read that failed.
- ``segment_states``: at most ``MAX_STATE_REQUESTS`` requests per frame
  (``InvalidArgumentError`` beyond); ``RemoteClient`` sends more in parts.
- ``ping``: no args, result ``true``.

Limits
------
The server bounds the frame size, the requests in flight per connection (waiting
reads; exceeding it is fatal) and idle time (no request and nothing in flight for
``idle_timeout_s``: fatal error with attributes ``{"reason": "idle"}``; no request sent
after it is executed, so a client may resend). An unknown command or malformed args
are fatal. Binding to a non-loopback address requires a token; TLS wraps the whole
stream when the server has a certificate.

Versioning
----------
Both sides say their version in the hello; a connection then speaks the lower of the
two. Which version has which command is one table, ``segmentstore.net.commands.VERSIONS``
(each command's ``since``, each version's first release). A new command, or any change of
a frame, header, value layout, argument or result, goes in the newest version while its
release is not out, else in a new version with ``PROTOCOL_VERSION`` raised (a server then
answers an older client as that client's version did). So:

- an older client against a newer server keeps working: the server takes any client
  version from 1 up and serves every command of its own version;
- a newer client against an older server sends only the commands the server's version
  has: one it lacks fails at once, nothing sent and the connection kept, with
  ``UnsupportedCommandError`` naming the command, the server's version and the version
  (and release) that has it;
- a version-1 server (ingestwm 0.6) takes only ``"version": 1`` and refuses any other with
  the fatal error ``unsupported protocol version N; this server speaks 1``; a newer client
  then connects again saying 1 (one more connect per connection, to version-1 servers only).

=======  =======  ==========================================================================
version  release  change
=======  =======  ==========================================================================
1        0.6.0    the commands above (servers before 0.6.0 said 1 too, without
                  ``read_many``, ``segment_states`` and ``read_ranges``)
2        0.7.0    the hello negotiates (above); no new command
=======  =======  ==========================================================================
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator
from dataclasses import fields, is_dataclass
from types import ModuleType
from typing import Any

import msgpack
import numpy as np

from .. import attributes as _attributes
from .. import results as _results
from ..errors import ProtocolError, SegmentStoreError

__all__ = [
    "PROTOCOL_VERSION",
    "MIN_PROTOCOL_VERSION",
    "DEFAULT_MAX_FRAME_BYTES",
    "HELLO_MAX_FRAME_BYTES",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_BUFFERED_BYTES",
    "REQUEST",
    "REPLY",
    "ERROR",
    "register_type",
    "wire_type",
    "pack",
    "unpack",
    "encode_frame",
    "encode_request",
    "FrameReader",
    "error_header",
    "decode_error",
]

PROTOCOL_VERSION = 2
"""This side's protocol version: the commands and layouts of ``commands.VERSIONS`` up to it."""
MIN_PROTOCOL_VERSION = 1
"""The oldest client version a server serves."""
DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024 + 64 * 1024
HELLO_MAX_FRAME_BYTES = 16 * 1024
"""The largest frame a server takes before the hello: the hello itself is a few hundred bytes."""
DEFAULT_MAX_CONNECTIONS = 1024
"""Connections a server holds at once by default; beyond, it refuses with an error frame."""
DEFAULT_MAX_BUFFERED_BYTES = 32 * 1024 * 1024
"""Memory a server gives all its connections' receive buffers together (at least one frame each)."""
REQUEST, REPLY, ERROR = 0, 1, 2

_PREFIX = struct.Struct(">II")
_EXT_DATACLASS, _EXT_TUPLE, _EXT_ENUM, _EXT_NDARRAY, _EXT_BIGINT = 1, 2, 3, 4, 5
_MAX_DEPTH = 32
_DTYPES = frozenset(["|b1", "|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8", "<f4", "<f8"])
_BUILTIN_ERRORS: dict[str, type[BaseException]] = {
    c.__name__: c
    for c in (
        TypeError,
        ValueError,
        KeyError,
        IndexError,
        OverflowError,
        ZeroDivisionError,
        AttributeError,
        NotImplementedError,
        RuntimeError,
    )
}

# ---------------------------------------------------------------------- value codec
_TYPES: dict[str, type] = {}
_FIELDS: dict[type, tuple[str, ...]] = {}


def _is_named_tuple(cls: Any) -> bool:
    fields_ = getattr(cls, "_fields", None)
    return isinstance(cls, type) and issubclass(cls, tuple) and isinstance(fields_, tuple)


def register_type(cls: type) -> type:
    """Allow a frozen dataclass, a ``NamedTuple`` or an enum on the wire (by its class name). Idempotent."""
    name = cls.__name__
    other = _TYPES.get(name)
    if other is cls:
        return cls
    if other is not None:
        raise ValueError(f"protocol: two wire types are named {name!r}: {other} and {cls}")
    if isinstance(cls, type) and issubclass(cls, enum.Enum):
        _TYPES[name] = cls
        return cls
    if _is_named_tuple(cls):
        _TYPES[name] = cls
        _FIELDS[cls] = tuple(cls._fields)  # type: ignore[attr-defined]
        return cls
    params = getattr(cls, "__dataclass_params__", None)
    if not is_dataclass(cls) or params is None or not params.frozen:
        raise ValueError(f"protocol: {cls!r} is neither a frozen dataclass, a NamedTuple nor an enum")
    _TYPES[name] = cls
    _FIELDS[cls] = tuple(f.name for f in fields(cls) if f.init)
    return cls


def wire_type(obj: Any) -> bool:
    """Whether ``obj`` is a class that can be registered: a frozen dataclass, a ``NamedTuple`` or an enum."""
    return isinstance(obj, type) and (
        issubclass(obj, enum.Enum)
        or _is_named_tuple(obj)
        or (is_dataclass(obj) and obj.__dataclass_params__.frozen)  # type: ignore[attr-defined]
    )


def _register_module(module: ModuleType) -> None:
    for name in getattr(module, "__all__", ()):
        if wire_type(getattr(module, name)):
            register_type(getattr(module, name))


def _default(obj: Any) -> Any:
    t = type(obj)
    if t is tuple:
        return msgpack.ExtType(_EXT_TUPLE, pack(list(obj)))
    f = _FIELDS.get(t)
    if f is not None:
        return msgpack.ExtType(_EXT_DATACLASS, pack([t.__name__, *[getattr(obj, n) for n in f]]))
    if isinstance(obj, enum.Enum) and _TYPES.get(t.__name__) is t:
        return msgpack.ExtType(_EXT_ENUM, pack([t.__name__, obj.value]))
    if t is int:  # beyond 64 bits
        n = (obj.bit_length() + 8) // 8
        if n > 64:
            raise TypeError(f"int of {obj.bit_length()} bits is too large to send")
        return msgpack.ExtType(_EXT_BIGINT, obj.to_bytes(n, "big", signed=True))
    if isinstance(obj, np.ndarray):
        arr = np.ascontiguousarray(obj)
        if arr.dtype.str not in _DTYPES:
            raise TypeError(f"numpy arrays of dtype {arr.dtype} cannot be sent")
        return msgpack.ExtType(_EXT_NDARRAY, pack([arr.dtype.str, list(arr.shape), arr.tobytes()]))
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, (bytearray, memoryview)):
        return bytes(obj)
    if isinstance(obj, int):  # subclasses of the native types
        return int(obj)
    if isinstance(obj, float):
        return float(obj)
    if isinstance(obj, str):
        return str(obj)
    if isinstance(obj, bytes):
        return bytes(obj)
    if isinstance(obj, list):
        return list(obj)
    if isinstance(obj, dict):
        return dict(obj)
    raise TypeError(f"a {t.__name__} cannot be sent over the wire")


def pack(obj: Any) -> bytes:
    """msgpack ``obj`` with the whitelisted extension types; ``TypeError`` if it cannot."""
    try:
        return msgpack.packb(obj, default=_default, strict_types=True, use_bin_type=True)  # type: ignore[no-any-return]
    except (OverflowError, ValueError) as e:
        raise TypeError(str(e)) from None


class _Decoder:
    __slots__ = ("depth",)

    def __init__(self) -> None:
        self.depth = 0

    def unpack(self, data: Any) -> Any:
        return msgpack.unpackb(data, ext_hook=self.ext, raw=False, strict_map_key=False, use_list=True)

    def ext(self, code: int, data: bytes) -> Any:
        self.depth += 1
        try:
            if self.depth > _MAX_DEPTH:
                raise ProtocolError(f"values nest deeper than {_MAX_DEPTH} extension levels")
            if code == _EXT_BIGINT:
                if not 0 < len(data) <= 64:
                    raise ProtocolError(f"big int of {len(data)} bytes")
                return int.from_bytes(data, "big", signed=True)
            items = self.unpack(data)
            if not isinstance(items, list):
                raise ProtocolError(f"extension {code} does not hold an array")
            if code == _EXT_TUPLE:
                return tuple(items)
            if code in (_EXT_DATACLASS, _EXT_ENUM):
                cls = _TYPES.get(items[0]) if items and isinstance(items[0], str) else None
                if cls is None:
                    raise ProtocolError(f"unknown wire type {items[:1]!r}")
                if code == _EXT_ENUM:
                    if not issubclass(cls, enum.Enum) or len(items) != 2:
                        raise ProtocolError(f"bad enum value {items!r:.80}")
                    return cls(items[1])
                names = _FIELDS.get(cls)
                if names is None or len(items) - 1 != len(names):
                    raise ProtocolError(f"{cls.__name__} takes {names} fields, got {len(items) - 1}")
                return cls(*items[1:])
            if code == _EXT_NDARRAY:
                return _decode_ndarray(items)
            raise ProtocolError(f"unknown extension type {code}")
        finally:
            self.depth -= 1


def _decode_ndarray(items: list[Any]) -> np.ndarray:
    if len(items) != 3 or items[0] not in _DTYPES or not isinstance(items[2], bytes):
        raise ProtocolError(f"bad numpy array encoding {items!r:.80}")
    dtype = np.dtype(items[0])
    shape = items[1]
    if (
        not isinstance(shape, list)
        or len(shape) > 8
        or not all(type(d) is int and d >= 0 for d in shape)
        or int(np.prod(shape, dtype=np.int64)) * dtype.itemsize != len(items[2])
    ):
        raise ProtocolError(f"numpy array shape {shape!r:.80} does not match its data")
    return np.frombuffer(items[2], dtype=dtype).reshape(shape).copy()


def unpack(data: Any) -> Any:
    """Decode one msgpack value with the whitelisted extension types; ``ProtocolError`` if malformed."""
    try:
        return _Decoder().unpack(data)
    except ProtocolError:
        raise
    except Exception as e:  # malformed input of any kind
        raise ProtocolError(f"malformed msgpack value: {type(e).__name__}: {e}"[:300]) from None


# ---------------------------------------------------------------------- frames
def encode_frame(header: Any, payload: bytes | memoryview = b"") -> list[bytes | memoryview]:
    """The frame's parts: prefix + packed header, then the raw payload (if any). O(header)."""
    h = pack(header)
    head = _PREFIX.pack(4 + len(h) + len(payload), len(h)) + h
    return [head, payload] if len(payload) else [head]


def encode_request(
    request_id: int, command: str, packed_args: bytes, payload: bytes | memoryview = b""
) -> list[bytes | memoryview]:
    """A request frame's parts from args packed once with ``pack`` (so a retry re-uses them)."""
    h = b"\x94\x00" + pack(request_id) + pack(command) + packed_args
    head = _PREFIX.pack(4 + len(h) + len(payload), len(h)) + h
    return [head, payload] if len(payload) else [head]


class FrameReader:
    """Incremental frame parser over one growable buffer that a socket ``recv_into``s.

    ``writable()`` gives the free space; after ``commit(n)``, ``frames()`` yields
    ``(header_bytes, payload)`` memoryviews, valid until the next ``writable()``.
    Raises ``ProtocolError`` on a frame over ``max_frame_bytes``. O(bytes) overall.
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, size: int = 64 * 1024):
        self.max_frame_bytes = max_frame_bytes
        self._size = size
        self._buf = bytearray(size)
        self._view = memoryview(self._buf)
        self._start = 0
        self._end = 0
        self._need = 8  # bytes the next frame needs in total from _start

    def writable(self, sizehint: int = 0) -> memoryview:
        """Free space (at least 4 KiB) at the end of the buffer, compacting or growing it first.

        The buffer grows with the bytes actually received (by half at a time), never to
        a frame's declared length at once: a peer that declares 16 MiB and sends 1 MiB
        costs about 1.5 MiB, not 17; after a frame over 256 KiB it shrinks back.
        """
        cap = len(self._buf)
        n = self._end - self._start
        need = n + 4096
        if n == 0 and cap > max(16 * self._size, 256 * 1024) and self._need <= self._size:
            self._renew(self._size)  # shrink after a large frame
        elif self._start + need > cap:
            if need > cap or n > self._start:  # grow, or a move that would overlap
                self._renew(max(need, min(cap + cap // 2, self._need)) if need > cap else cap)
            else:
                self._buf[:n] = self._view[self._start : self._end]
                self._start, self._end = 0, n
        return self._view[self._end :]

    @property
    def capacity(self) -> int:
        """Bytes of memory the buffer holds."""
        return len(self._buf)

    def _renew(self, size: int) -> None:
        n = self._end - self._start
        new = bytearray(size)
        new[:n] = self._view[self._start : self._end]
        self._buf, self._view = new, memoryview(new)
        self._start, self._end = 0, n

    def commit(self, n: int) -> None:
        """``n`` bytes were written at the start of the last ``writable()``."""
        self._end += n

    def frames(self) -> Iterator[tuple[memoryview, memoryview]]:
        """Complete frames buffered so far, as ``(header, payload)`` views."""
        view = self._view
        while self._end - self._start >= 8:
            s = self._start
            n, h = _PREFIX.unpack_from(self._buf, s)
            if n < 4 or n > self.max_frame_bytes or h > n - 4:
                raise ProtocolError(
                    f"bad frame: length {n}, header length {h} (max frame {self.max_frame_bytes} bytes)"
                )
            end = s + 4 + n
            if end > self._end:
                self._need = 4 + n
                return
            self._start = end
            self._need = 8
            yield view[s + 8 : s + 8 + h], view[s + 8 + h : end]

    @property
    def buffered(self) -> int:
        """Bytes received and not yet consumed as frames."""
        return self._end - self._start


# ---------------------------------------------------------------------- errors
def error_header(request_id: int, exc: BaseException, fatal: bool = False) -> list[Any]:
    """The error frame header for ``exc``: its class name, message and simple attributes."""
    msg = exc.args[0] if len(exc.args) == 1 and isinstance(exc.args[0], str) else str(exc)
    if isinstance(exc, SegmentStoreError) or _BUILTIN_ERRORS.get(type(exc).__name__) is type(exc):
        cls = type(exc).__name__
    else:
        cls, msg = "SegmentStoreError", f"internal server error: {type(exc).__name__}: {msg}"
    attrs = {
        k: v
        for k, v in getattr(exc, "__dict__", {}).items()
        if not k.startswith("_") and (v is None or type(v) in (int, str, bool, float))
    }
    return [ERROR, request_id, cls, msg, attrs, fatal]


def _error_classes() -> dict[str, type[BaseException]]:
    out: dict[str, type[BaseException]] = dict(_BUILTIN_ERRORS)
    todo: list[type[BaseException]] = [SegmentStoreError]
    while todo:
        c = todo.pop()
        if c.__module__.startswith("segmentstore"):
            out.setdefault(c.__name__, c)
        todo.extend(c.__subclasses__())
    return out


_ERROR_CLASSES = _error_classes()


def decode_error(cls_name: Any, message: Any, attrs: Any) -> BaseException:
    """Rebuild the exception an error frame names; never calls its ``__init__``."""
    if not isinstance(cls_name, str) or not isinstance(message, str):
        return ProtocolError(f"malformed error frame {cls_name!r:.60}: {message!r:.200}")
    cls = _ERROR_CLASSES.get(cls_name)
    if cls is None:
        _ERROR_CLASSES.update(_error_classes())
        cls = _ERROR_CLASSES.get(cls_name)
    if cls is None:
        return SegmentStoreError(f"{cls_name}: {message}")
    exc = cls.__new__(cls)
    exc.args = (message,)
    if isinstance(attrs, dict):
        for k, v in attrs.items():
            if isinstance(k, str) and k.isidentifier() and not k.startswith("_"):
                setattr(exc, k, v)
    return exc


for _module in (_results, _attributes):
    _register_module(_module)
