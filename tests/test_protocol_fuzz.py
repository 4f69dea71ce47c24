"""Fuzzing a live server: random bytes, mutated valid frames and random requests.

After every example the server must still answer a well-behaved client; at the end the
segments written before the fuzzing must be byte-for-byte intact and the store must
pass its invariant checks. Bounded: the default hypothesis profile runs in seconds.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from segmentstore import AttributeUpdate, ManualClock, SegmentStore
from segmentstore.client import RemoteClient
from segmentstore.errors import ProtocolError
from segmentstore.net.commands import COMMANDS
from segmentstore.net.protocol import PROTOCOL_VERSION, FrameReader, encode_frame, pack, unpack
from segmentstore.net.server import SegmentStoreServer

_KEEP = {f"keep-{i}": bytes([65 + i]) * (100 + 37 * i) for i in range(3)}
_HELLO = b"".join(bytes(p) for p in encode_frame([0, 1, "hello", {"version": PROTOCOL_VERSION}]))


class _Live:
    def __init__(self) -> None:
        self.store = SegmentStore(clock=ManualClock(1_000_000))
        self.server = SegmentStoreServer(self.store, max_in_flight=16, idle_timeout_s=30)
        self.port = self.server.start()
        self.client = RemoteClient(("127.0.0.1", self.port), timeout_s=20)
        for name, data in _KEEP.items():
            self.client.create_segment(name)
            self.client.append(name, data)
        self.client.update_attributes("keep-0", [AttributeUpdate(5, 55)])

    def exchange(self, raw: bytes) -> bytes:
        """Send ``raw`` on a new connection, half-close, read until the server closes; check it serves.

        Returns what the server sent back.
        """
        s = socket.create_connection(("127.0.0.1", self.port), timeout=20)
        got = bytearray()
        try:
            with contextlib.suppress(ConnectionError):
                s.sendall(raw)
                s.shutdown(socket.SHUT_WR)
                while chunk := s.recv(65536):
                    got += chunk
        finally:
            s.close()
        assert self.client.ping()
        return bytes(got)


@pytest.fixture(scope="module")
def live() -> Iterator[_Live]:
    env = _Live()
    try:
        yield env
        for name, data in _KEEP.items():
            assert env.client.read(name, 0, 10_000).data == data
            info = env.client.get_info(name)
            assert (info.start_offset, info.length, info.sealed) == (0, len(data), False)
        assert env.client.get_attributes("keep-0", [5]) == {5: 55}
        env.store._check()
        with RemoteClient(("127.0.0.1", env.port), timeout_s=20) as fresh:
            assert fresh.append("keep-2", b"!").offset == len(_KEEP["keep-2"])
    finally:
        env.client.close()
        env.server.stop()
        env.store.close()


def _frame(header: Any, payload: bytes = b"") -> bytes:
    return b"".join(bytes(p) for p in encode_frame(header, payload))


_names = st.text(alphabet="ab/.", max_size=6)  # never one of the keep-* segments
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True),
    _names,
    st.binary(max_size=20),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.one_of(_names, st.integers(-5, 5)), inner, max_size=3),
    ),
    max_leaves=8,
)


@st.composite
def _requests(draw: st.DrawFn) -> bytes:
    """A hello, then 1-3 requests of registered (or made-up) commands with random args."""
    out = [_HELLO]
    for rid in range(2, 2 + draw(st.integers(1, 3))):
        name = draw(st.sampled_from([*sorted(COMMANDS), "nope"]))
        params = COMMANDS[name].params if name in COMMANDS else ("x",)
        keys = draw(st.lists(st.sampled_from([*params, "=payload", "=sizes", "x"]), max_size=5, unique=True))
        args = {k: draw(_values) for k in keys}
        if "name" in args and draw(st.booleans()):
            args["name"] = draw(st.sampled_from(["a", "b/a"]))
        try:
            header = pack([0, rid, name, args])
        except TypeError:
            continue
        payload = draw(st.binary(max_size=40))
        body = header + payload
        out.append(len(body + b"1234").to_bytes(4, "big") + len(header).to_bytes(4, "big") + body)
    return b"".join(out)


_VALID = [
    _frame([0, 2, "ping", {}]),
    _frame([0, 2, "create_segment", {"name": "a"}]),
    _frame([0, 2, "append", {"name": "a", "sizes": [3, 2]}], b"abcde"),
    _frame([0, 2, "append", {"name": "a", "sizes": [1], "wid": [9], "ev": [1]}], b"z"),
    _frame([0, 2, "append_batch", {"name": "a", "=sizes": [1, 1]}], b"xy"),
    _frame([0, 2, "read", {"name": "a", "offset": 0, "max_length": 10, "wait_ms": 5}]),
    _frame([0, 2, "get_info", {"name": "a"}]),
    _frame([0, 2, "update_attributes", {"name": "a", "updates": [AttributeUpdate(1, 2)]}]),
    _frame([0, 2, "watermarks_at", {"name": "a", "offsets": [0, 1]}]),
    _frame([0, 2, "read_many", {"requests": [["a", 0, 10], ["b/a", 0, 5], ["a", 3, 0]]}]),
    _frame([0, 2, "segment_states", {"requests": [["a", 0], ["keep-1", 3], ["nope", 0]]}]),
    _frame([0, 2, "read_ranges", {"requests": [["keep-0", 0, 50], ["nope", 0, 1], ["keep-1", 500, 1]]}]),
]


@st.composite
def _mutated(draw: st.DrawFn) -> bytes:
    """A hello and valid frames with bytes flipped, inserted or cut away."""
    data = bytearray(_HELLO + b"".join(draw(st.lists(st.sampled_from(_VALID), min_size=1, max_size=3))))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        i = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[i] ^= draw(st.integers(1, 255))
        elif kind == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del data[i : i + draw(st.integers(1, 8))]
        else:
            del data[i:]
        if not data:
            break
    return bytes(data)


@given(raw=st.binary(max_size=200), after_hello=st.booleans())
def test_random_bytes(live: _Live, raw: bytes, after_hello: bool) -> None:
    live.exchange((_HELLO if after_hello else b"") + raw)


@given(raw=_mutated())
def test_mutated_frames(live: _Live, raw: bytes) -> None:
    live.exchange(raw)


@given(raw=_requests())
def test_random_requests(live: _Live, raw: bytes) -> None:
    live.exchange(raw)


def _headers(data: bytes) -> list[Any]:
    reader = FrameReader()
    reader.writable(len(data))[: len(data)] = data
    reader.commit(len(data))
    return [unpack(bytes(h)) for h, _ in reader.frames()]


def test_ext_types_are_a_whitelist(live: _Live, monkeypatch: pytest.MonkeyPatch) -> None:
    """An extension naming an unregistered class is refused; nothing is instantiated."""
    made: list[object] = []
    monkeypatch.setattr(SegmentStore, "__init__", lambda self, *a, **k: made.append(self))
    bad = msgpack.ExtType(1, msgpack.packb(["SegmentStore", None, None, None]))
    with pytest.raises(ProtocolError, match=r"unknown wire type \['SegmentStore'\]"):
        unpack(msgpack.packb(bad))
    for name in ("EmbeddedClient", "ManualClock", "Path", "os.system"):  # importable, not registered
        with pytest.raises(ProtocolError, match="unknown wire type"):
            unpack(msgpack.packb(msgpack.ExtType(1, msgpack.packb([name]))))
    assert unpack(pack(AttributeUpdate(5, 55))) == AttributeUpdate(5, 55)  # a registered one decodes
    before = sorted(live.store.list_segments())
    replies = _headers(live.exchange(_HELLO + _frame([0, 2, "get_info", {"name": bad}])))
    assert replies[0][:2] == [1, 1]  # the hello
    assert replies[1:] == [[2, 0, "ProtocolError", "unknown wire type ['SegmentStore']", {}, True]]
    assert made == [] and sorted(live.store.list_segments()) == before
