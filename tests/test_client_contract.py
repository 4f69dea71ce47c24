"""The client-facing contract, run against both clients: embedded (in-process) and remote (the server).

Every test gets a fresh in-memory store on a ManualClock; "remote" serves it from an
in-process ``SegmentStoreServer`` on port 0 and talks to it through ``RemoteClient``.
Both must return equal frozen results and raise the same ``SegmentStoreError`` classes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from segmentstore import (
    CREATION_TIME,
    LAST_WRITE_TIME,
    AppendResult,
    AttributeUpdate,
    AttributeUpdateType,
    BadAttributeUpdateError,
    BadOffsetError,
    InvalidArgumentError,
    ManualClock,
    NotATransactionError,
    SegmentExistsError,
    SegmentInfo,
    SegmentNotFoundError,
    SegmentNotSealedError,
    SegmentRead,
    SegmentSealedError,
    SegmentStore,
    SegmentStoreError,
    SegmentTruncatedError,
    WrongParentError,
)
from segmentstore.client import EmbeddedClient, RemoteClient, SegmentStoreClient
from segmentstore.client.interface import is_idempotent, wire_methods
from segmentstore.errors import (
    ConnectionLostError,
    InvalidScaleError,
    NotSentError,
    ReadTimeoutError,
    StoreClosedError,
    StreamExistsError,
    StreamNotFoundError,
    retriable,
)
from segmentstore.net.commands import COMMANDS
from segmentstore.net.server import SegmentStoreServer

_WAIT_MS = 10_000  # a wait that something else ends long before; never reached when all is fine


@pytest.fixture(params=["embedded", "remote"])
def client(request: pytest.FixtureRequest, store: SegmentStore) -> Iterator[SegmentStoreClient]:
    """A client of the ``store`` fixture: direct calls, or through a server on loopback."""
    if request.param == "embedded":
        yield EmbeddedClient(store)
        return
    server = SegmentStoreServer(store)
    port = server.start()
    remote = RemoteClient(("127.0.0.1", port), timeout_s=20)
    try:
        yield remote
    finally:
        remote.close()
        server.stop()
        store._check()


def test_every_interface_method_is_a_command_and_implemented_by_both_clients() -> None:
    """The interface is the registry: a method added to it is a command at once and must be implemented."""
    names = [n for n, _ in wire_methods()]
    assert set(names) <= set(COMMANDS), sorted(set(names) - set(COMMANDS))
    assert set(COMMANDS) - set(names) == {"hello", "ping"}  # nothing on the wire outside the interface
    for n in names:
        assert COMMANDS[n].idempotent == is_idempotent(getattr(SegmentStoreClient, n)) or n == "append"
    for cls in (EmbeddedClient, RemoteClient):
        stubs = [n for n in [*names, "close"] if getattr(cls, n) is getattr(SegmentStoreClient, n)]
        assert not stubs, f"{cls.__name__} does not implement {stubs}"


@pytest.mark.parametrize(
    ("error", "idempotent", "again"),
    [
        (NotSentError("never reached the server"), False, True),
        (ConnectionLostError("reply lost"), True, True),
        (ConnectionLostError("reply lost"), False, False),
        (ReadTimeoutError("no reply in time"), True, True),
        (ConnectionResetError("socket"), True, True),
        (SegmentNotFoundError("a definite answer"), True, False),
        (StoreClosedError("closed"), True, False),
        (ValueError("not the store's"), True, False),
    ],
)
def test_the_error_says_whether_a_call_may_be_sent_again(
    error: BaseException, idempotent: bool, again: bool
) -> None:
    assert retriable(error, idempotent) is again


def _in_thread(fn: Callable[[], Any], delay_s: float = 0.05) -> threading.Thread:
    t = threading.Thread(target=lambda: (threading.Event().wait(delay_s), fn()))
    t.start()
    return t


# ---------------------------------------------------------------- segments
def test_create_and_info(client: SegmentStoreClient, clock: ManualClock) -> None:
    info = client.create_segment("a/b")
    assert info == SegmentInfo("a/b", 0, 0, False, clock.now(), clock.now())
    assert client.get_info("a/b") == info
    assert client.exists("a/b") and not client.exists("nope")
    with pytest.raises(SegmentExistsError):
        client.create_segment("a/b")
    for bad in ("", " x", "a#transaction.1"):
        with pytest.raises(InvalidArgumentError):
            client.create_segment(bad)
    with pytest.raises(SegmentNotFoundError):
        client.get_info("nope")


def test_appends_land_in_order_with_their_timestamps(client: SegmentStoreClient, clock: ManualClock) -> None:
    client.create_segment("s")
    r1 = client.append("s", b"abc")
    clock.advance(5)
    r2 = client.append("s", bytearray(b"de"))  # type: ignore[arg-type]
    assert (r1, r2) == (AppendResult(0, 3, clock.now() - 5), AppendResult(3, 2, clock.now()))
    assert client.read("s", 0, 100) == SegmentRead(0, b"abcde", clock.now() - 1, False, True)
    assert client.read("s", 1, 3) == SegmentRead(1, b"bcd", clock.now() - 1, False, False)
    assert client.read("s", 0, 2).watermark == r1.timestamp - 1
    info = client.get_info("s")
    assert (info.length, info.last_write_time) == (5, clock.now())


def test_bad_appends_raise_the_same_errors(client: SegmentStoreClient) -> None:
    client.create_segment("s")
    with pytest.raises(InvalidArgumentError):
        client.append("s", b"")
    with pytest.raises(InvalidArgumentError):
        client.append("s", "text")  # type: ignore[arg-type]
    with pytest.raises(SegmentNotFoundError):
        client.append("nope", b"x")
    with pytest.raises(InvalidArgumentError):
        client.append("s", b"x", writer_id=1)
    with pytest.raises(BadOffsetError) as e:
        client.append("s", b"x", expected_offset=7)
    assert (e.value.expected, e.value.actual) == (7, 0)
    assert client.append("s", b"x", expected_offset=0).offset == 0
    assert client.get_info("s").length == 1


def test_append_batch_is_one_operation(client: SegmentStoreClient, clock: ManualClock) -> None:
    client.create_segment("s")
    r = client.append_batch("s", [b"ab", b"c", b"def"])
    assert r == AppendResult(0, 6, clock.now())
    assert client.read("s", 0, 10).data == b"abcdef"
    with pytest.raises(InvalidArgumentError):
        client.append_batch("s", [b"a", b""])
    with pytest.raises(InvalidArgumentError):
        client.append_batch("s", b"abc")  # type: ignore[arg-type]
    with pytest.raises(BadOffsetError):
        client.append_batch("s", [b"a"], expected_offset=0)
    assert client.get_info("s").length == 6


def test_retried_append_is_not_stored_twice(client: SegmentStoreClient) -> None:
    client.create_segment("s")
    first = client.append("s", b"e1", writer_id=42, event_number=1)
    again = client.append("s", b"e1", writer_id=42, event_number=1)
    older = client.append("s", b"e0", writer_id=42, event_number=0)
    assert not first.duplicate and again.duplicate and older.duplicate
    assert (again.offset, again.length) == (2, 0)
    assert client.append("s", b"e2", writer_id=42, event_number=2).offset == 2
    assert client.append("s", b"x", writer_id=7, event_number=1).offset == 4  # another writer
    assert client.read("s", 0, 100).data == b"e1e2x"
    assert client.get_attributes("s", [42, 7]) == {42: 2, 7: 1}


def test_append_async(client: SegmentStoreClient) -> None:
    client.create_segment("s")
    futs = [client.append_async("s", b"%03d" % i, writer_id=5, event_number=i) for i in range(50)]
    assert [f.result(20).offset for f in futs] == [3 * i for i in range(50)]
    dup = client.append_async("s", b"000", writer_id=5, event_number=0)
    assert dup.result(20).duplicate
    for bad in (b"", "text"):
        with pytest.raises(InvalidArgumentError):
            client.append_async("s", bad).result(20)  # type: ignore[arg-type]
    with pytest.raises(SegmentNotFoundError):
        client.append_async("nope", b"x").result(20)
    assert client.get_info("s").length == 150


# ---------------------------------------------------------------- reads and watermarks
def test_read_errors(client: SegmentStoreClient) -> None:
    client.create_segment("s")
    client.append("s", b"0123456789")
    with pytest.raises(BadOffsetError):
        client.read("s", 11, 1)
    with pytest.raises(InvalidArgumentError):
        client.read("s", -1, 1)
    with pytest.raises(InvalidArgumentError):
        client.read("s", 0, 1, wait_ms=-5)
    with pytest.raises(SegmentNotFoundError):
        client.read("nope", 0, 1)
    client.truncate("s", 4)
    with pytest.raises(SegmentTruncatedError):
        client.read("s", 3, 1)
    assert client.read("s", 4, 3).data == b"456"


def test_watermarks(client: SegmentStoreClient, store: SegmentStore, clock: ManualClock) -> None:
    created = client.create_segment("s").creation_time
    assert client.watermark_at("s", 0) == created - 1
    ts = []
    for chunk in (b"aaa", b"bb", b"c"):
        clock.advance(10)
        ts.append(client.append("s", chunk).timestamp)
    assert [client.ingestion_time_at("s", o) for o in range(6)] == [ts[0]] * 3 + [ts[1]] * 2 + [ts[2]]
    offsets = np.arange(7, dtype=np.int64)
    expected = np.array([client.watermark_at("s", int(p)) for p in offsets])
    got = client.watermarks_at("s", offsets)
    assert isinstance(got, np.ndarray) and np.array_equal(got, expected)
    assert np.array_equal(client.watermarks_at("s", [0, 3]), expected[[0, 3]])
    with pytest.raises(BadOffsetError):
        client.ingestion_time_at("s", 6)
    with pytest.raises(InvalidArgumentError):
        client.watermarks_at("s", np.array([0.5]))
    clock.advance(store.config.max_watermark_lag_ms)
    assert store.advance_idle_watermarks() == ["s"]
    tail = client.read("s", 6, 10)
    assert tail == SegmentRead(6, b"", clock.now() - 1, False, True)


def test_sequential_chunked_reads(
    client: SegmentStoreClient, store: SegmentStore, clock: ManualClock
) -> None:
    """Reading a segment chunk by chunk (the remote client reads ahead) gives exactly the store's reads."""
    client.create_segment("s")
    for i in range(20):
        clock.advance(1)
        client.append("s", bytes([65 + i]) * 10)
    offset, data = 0, b""
    while True:
        r = client.read("s", offset, 7)
        assert r == store.read("s", offset, 7)
        data += r.data
        offset = r.end_offset
        if r.at_tail:
            break
    assert data == store.read("s", 0, 1000).data and offset == 200
    client.read("s", 63, 7)  # a full chunk short of the tail: the next one may be read ahead
    client.truncate("s", 100)
    with pytest.raises(SegmentTruncatedError):  # the client's own truncate is never hidden
        client.read("s", 70, 7)
    client.read("s", 186, 7)  # the chunk after it reaches the tail, whose watermark moves on
    threading.Event().wait(0.05)
    clock.advance(store.config.max_watermark_lag_ms)
    store.advance_idle_watermarks()
    assert client.read("s", 193, 7) == store.read("s", 193, 7)  # a fresh tail watermark


def test_wait_returns_on_data(client: SegmentStoreClient) -> None:
    client.create_segment("s")
    client.append("s", b"ab")
    t = _in_thread(lambda: client.append("s", b"cd"))
    r = client.read("s", 2, 10, wait_ms=_WAIT_MS)
    t.join()
    assert (r.offset, r.data) == (2, b"cd")


def test_wait_returns_on_watermark_increase(
    client: SegmentStoreClient, store: SegmentStore, clock: ManualClock
) -> None:
    client.create_segment("s")
    before = client.read("s", 0, 10).watermark

    def advance() -> None:
        clock.advance(store.config.max_watermark_lag_ms)
        store.advance_idle_watermarks()

    t = _in_thread(advance)
    r = client.read("s", 0, 10, wait_ms=_WAIT_MS)
    t.join()
    assert r.data == b"" and r.at_tail and r.watermark == clock.now() - 1 > before


def test_wait_times_out_with_a_zero_length_read(client: SegmentStoreClient, clock: ManualClock) -> None:
    client.create_segment("s")
    client.append("s", b"x")
    assert client.read("s", 1, 10, wait_ms=30) == SegmentRead(1, b"", clock.now() - 1, False, True)


def test_wait_ends_on_seal_and_fails_on_delete(client: SegmentStoreClient) -> None:
    client.create_segment("s")
    client.create_segment("t")
    t = _in_thread(lambda: client.seal("s"))
    r = client.read("s", 0, 10, wait_ms=_WAIT_MS)
    t.join()
    assert r.end_of_segment and r.data == b""
    t = _in_thread(lambda: client.delete("t"))
    with pytest.raises(SegmentNotFoundError):
        client.read("t", 0, 10, wait_ms=_WAIT_MS)
    t.join()


def test_waiting_read_does_not_block_other_calls(client: SegmentStoreClient) -> None:
    client.create_segment("s")
    client.create_segment("t")
    result: list[SegmentRead] = []
    waiter = threading.Thread(target=lambda: result.append(client.read("s", 0, 10, wait_ms=_WAIT_MS)))
    waiter.start()
    for i in range(20):  # these complete while the read waits
        client.append("t", b"%d" % i)
        client.get_info("t")
    client.append("s", b"go")
    waiter.join()
    assert result[0].data == b"go"
    assert client.read("t", 0, 100).data == b"".join(b"%d" % i for i in range(20))


# ---------------------------------------------------------------- attributes
def test_attributes(client: SegmentStoreClient, clock: ManualClock) -> None:
    created = client.create_segment("s").creation_time
    clock.advance(3)
    ts = client.update_attributes("s", [AttributeUpdate(1, 10), AttributeUpdate(2, 5)])
    assert ts == clock.now()
    assert client.get_attributes("s") == {1: 10, 2: 5, CREATION_TIME: created, LAST_WRITE_TIME: ts}
    assert client.get_attributes("s", iter([2, 99])) == {2: 5}
    with pytest.raises(BadAttributeUpdateError):
        client.update_attributes("s", [AttributeUpdate(1, 3, AttributeUpdateType.REPLACE_IF_GREATER)])
    with pytest.raises(BadAttributeUpdateError):
        client.update_attributes("s", [AttributeUpdate(LAST_WRITE_TIME, 1)])
    with pytest.raises(BadAttributeUpdateError):  # all or nothing: the first update is not applied
        client.update_attributes(
            "s",
            [AttributeUpdate(2, 6), AttributeUpdate(1, 0, AttributeUpdateType.REPLACE_IF_EQUALS, 7)],
        )
    client.update_attributes("s", [AttributeUpdate(1, 5, AttributeUpdateType.ACCUMULATE)])
    assert client.get_attributes("s", [1, 2]) == {1: 15, 2: 5}
    with pytest.raises(SegmentNotFoundError):
        client.get_attributes("nope")


# ---------------------------------------------------------------- transactions, seal, truncate, delete
def test_transactions(client: SegmentStoreClient, clock: ManualClock) -> None:
    client.create_segment("p")
    client.create_segment("q")
    client.append("p", b"head")
    txn = client.create_transaction("p")
    assert client.get_info(txn).is_transaction and client.get_info(txn).parent == "p"
    client.append(txn, b"txn-data")
    with pytest.raises(SegmentNotSealedError):
        client.merge_transaction(txn)
    client.seal(txn)
    with pytest.raises(WrongParentError):
        client.merge_transaction(txn, "q")
    with pytest.raises(NotATransactionError):
        client.merge_transaction("q")
    clock.advance(7)
    assert client.merge_transaction(txn, "p") == 4
    assert client.read("p", 0, 100).data == b"headtxn-data"
    assert client.ingestion_time_at("p", 4) == clock.now()
    assert not client.exists(txn)
    with pytest.raises(SegmentNotFoundError):
        client.merge_transaction(txn)


def test_seal_truncate_delete(client: SegmentStoreClient) -> None:
    client.create_segment("s")
    client.append("s", b"0123456789")
    client.truncate("s", 3)
    client.truncate("s", 3)  # at the start: a no-op
    with pytest.raises(BadOffsetError, match="below the start offset 3"):
        client.truncate("s", 2)  # below it: refused, as Pravega's BadOffsetException
    assert client.get_info("s").start_offset == 3
    with pytest.raises(BadOffsetError):
        client.truncate("s", 11)
    assert client.seal("s") == 10
    with pytest.raises(SegmentSealedError):
        client.append("s", b"x")
    with pytest.raises(SegmentSealedError):
        client.seal("s")
    end = client.read("s", 8, 100)
    assert end.data == b"89" and end.end_of_segment and end.at_tail
    client.delete("s")
    assert not client.exists("s")
    with pytest.raises(SegmentNotFoundError):
        client.delete("s")


# ---------------------------------------------------------------- streams (controller)
def test_streams(client: SegmentStoreClient) -> None:
    info = client.create_stream("sc/st", 2)
    assert client.get_stream("sc/st") == info and len(info.active_segments) == 2
    assert client.list_streams("sc/*") == ["sc/st"]
    with pytest.raises(StreamExistsError):
        client.create_stream("sc/st")
    with pytest.raises(StreamNotFoundError):
        client.get_stream("sc/none")
    low = info.active_segments[0]
    with pytest.raises(InvalidScaleError):
        client.scale_stream("sc/st", [low.name], [(0.0, 0.3)])
    new = client.scale_stream("sc/st", [low.name], [(0.0, 0.25), (0.25, 0.5)])
    assert [(s.key_low, s.key_high) for s in new] == [(0.0, 0.25), (0.25, 0.5)]
    succ = client.get_successors(low.name)
    assert {s.segment for s in succ} == set(new) and all(s.predecessors == (low.name,) for s in succ)
    assert client.get_segment(new[0].name) == new[0]
    client.append(new[0].name, b"xyz")
    tail = client.get_tail_cut("sc/st")
    assert tail.as_dict()[new[0].name] == 3
    assert client.get_head_cut("sc/st").as_dict() == {s.name: 0 for s in info.active_segments}
    txn = client.begin_transaction("sc/st")
    client.abort_transaction("sc/st", txn.segment_names)
    client.seal_stream("sc/st")
    client.delete_stream("sc/st")
    assert client.list_streams() == []


# ---------------------------------------------------------------- same errors, same classes
_ERROR_CASES: list[tuple[str, Callable[[SegmentStoreClient], Any], type[BaseException]]] = [
    ("read of a missing segment", lambda c: c.read("nope", 0, 1), SegmentNotFoundError),
    ("info with a non-str name", lambda c: c.get_info(["x"]), InvalidArgumentError),  # type: ignore[arg-type]
    ("negative truncate", lambda c: c.truncate("s", -1), InvalidArgumentError),
    ("float offset", lambda c: c.watermark_at("s", 1.5), InvalidArgumentError),  # type: ignore[arg-type]
    ("update with a non-update", lambda c: c.update_attributes("s", [1]), InvalidArgumentError),  # type: ignore[list-item]
    ("transaction of a missing parent", lambda c: c.create_transaction("nope"), SegmentNotFoundError),
    ("bool max_length", lambda c: c.read("s", 0, True), InvalidArgumentError),
]


@pytest.mark.parametrize("case", _ERROR_CASES, ids=[c[0] for c in _ERROR_CASES])
def test_same_error_class(client: SegmentStoreClient, case: tuple[str, Any, type[BaseException]]) -> None:
    client.create_segment("s")
    _, call, cls = case
    with pytest.raises(SegmentStoreError) as e:
        call(client)
    assert type(e.value) is cls
    assert client.get_info("s").length == 0  # and nothing changed


# ---------------------------------------------------------------- bad arguments, alike on both clients
@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda c: c.update_attributes("s", None), "None"),
        (lambda c: c.update_attributes("s", 5), "5"),
        (lambda c: c.update_attributes("s", {1: "x"}), "'x'"),
        (lambda c: c.get_attributes("s", 5), "5"),
        (lambda c: c.get_attributes("s", ["k"]), "'k'"),
        (lambda c: c.truncate("s", 1), "1"),
        (lambda c: c.read("s", 2, 10, wait_ms=2**63 - 1), str(2**63 - 1)),
        (lambda c: c.read("s", 2, 10, wait_ms=2**64), str(2**64)),
        (lambda c: c.append_batch("s", None), "None"),
        (lambda c: c.append_batch("s", 7), "7"),
        (lambda c: c.watermarks_at("s", ["x"]), "<U1"),
    ],
    ids=[
        "updates-none",
        "updates-int",
        "updates-map-str",
        "keys-int",
        "keys-str",
        "truncate-below",
        "wait-int64-max",
        "wait-beyond-int64",
        "batch-none",
        "batch-int",
        "offsets-str",
    ],
)
def test_bad_arguments_get_the_same_store_error_embedded_and_remote(
    client: SegmentStoreClient, call: Callable[[SegmentStoreClient], Any], named: str
) -> None:
    client.create_segment("s")
    client.append("s", b"0123")
    client.truncate("s", 2)
    client.update_attributes("s", [AttributeUpdate(1, 1)])
    before = (client.get_info("s"), client.get_attributes("s"))
    with pytest.raises(InvalidArgumentError if named != "1" else BadOffsetError) as ei:
        call(client)
    assert "'s'" in str(ei.value) and named in str(ei.value)
    assert (client.get_info("s"), client.get_attributes("s")) == before


@pytest.mark.parametrize("wait_ms", [2**63 - 1, 2**64])
def test_a_wait_too_long_for_a_timer_is_refused_by_wait_any(client: SegmentStoreClient, wait_ms: int) -> None:
    client.create_segment("s")
    with pytest.raises(InvalidArgumentError, match=f"wait_ms.*{wait_ms}"):
        client.wait_any([("s", 0, 0)], wait_ms)
    assert client.wait_any([("s", 0, 0)], 0) == (0,)  # the connection is still usable


def test_update_attributes_takes_a_mapping_as_replace(client: SegmentStoreClient) -> None:
    client.create_segment("s")
    client.update_attributes("s", {1: 10, 2: 20})
    client.update_attributes("s", {1: 11})
    assert client.get_attributes("s", [1, 2, 3]) == {1: 11, 2: 20}


def test_read_future_beyond_a_sealed_end_raises_like_read(client: SegmentStoreClient) -> None:
    client.create_segment("s")
    client.append("s", b"abc")
    client.seal("s")
    with pytest.raises(BadOffsetError, match="beyond the length 3"):
        client.read("s", 5, 10)
    with pytest.raises(BadOffsetError, match="beyond the length 3"):
        client.read("s", 5, 10, wait_ms=200)


# ---------------------------------------------------------------------- read_many (issue 36)
def _records(*sizes: int) -> bytes:
    return b"".join(len(bytes(n)).to_bytes(4, "little") + bytes([n]) * n for n in sizes)


def test_read_many_answers_each_read_with_the_watermarks_at_its_records(
    client: SegmentStoreClient, clock: ManualClock
) -> None:
    """Each answer is the read of that request and ``watermark_at`` at its records' starts and end;
    a failed request answers its error (the others stand); bad requests refuse the whole call."""
    for name in ("a", "b", "c"):
        client.create_segment(name)
    for sizes in ((1, 2), (3,), (4, 5, 6)):
        clock.advance(10)
        client.append("a", _records(*sizes))
    clock.advance(10)
    client.append("c", _records(7))
    client.seal("c")
    client.truncate("c", 11)
    reqs = [("a", 0, 1000), ("a", 5, 14), ("b", 0, 100), ("missing", 0, 10), ("c", 0, 10), ("c", 11, 10)]
    got = client.read_many(reqs)
    assert len(got) == len(reqs) and all(r is not None for r in got)
    for (name, offset, max_length), r in [*list(zip(reqs, got, strict=True))[:3], (reqs[5], got[5])]:
        assert r.error is None and r.read == client.read(name, offset, max_length)
        data = r.read.data
        starts, pos = [], 0
        while pos + 4 <= len(data) and pos + 4 + int.from_bytes(data[pos : pos + 4], "little") <= len(data):
            starts.append(offset + pos)
            pos += 4 + int.from_bytes(data[pos : pos + 4], "little")
        assert r.starts.tolist() == starts
        assert r.watermarks.tolist() == [client.watermark_at(name, o) for o in [*starts, offset + pos]]
    assert got[1].read is not None and len(got[1].starts) == 2  # 5..19: two whole records, part of a third
    assert got[2].read is not None and got[2].read.data == b"" and got[2].read.at_tail
    assert got[5].read is not None and got[5].read.end_of_segment
    assert (got[3].read, got[3].error) == (None, "SegmentNotFoundError") and "missing" in got[3].message
    assert (got[4].read, got[4].error) == (None, "SegmentTruncatedError")
    # with the watermark the caller knows: a tail with nothing above it is answered None (not ready)
    tail_wm = client.read("b", 0, 10).watermark
    known = client.read_many([("b", 0, 10, tail_wm), ("b", 0, 10, tail_wm - 1), ("a", 0, 5, 2**63 - 1)])
    assert known[0] is None and known[1] is not None and known[1].read == client.read("b", 0, 10)
    assert client.read_many([("b", 7, 10, tail_wm)]) == (None,)  # beyond the length: not ready either
    with pytest.raises(BadOffsetError):
        client.read("b", 7, 10)
    assert known[2] is not None and known[2].read == client.read("a", 0, 5)  # data: always read
    client.seal("b")
    sealed = client.read_many([("b", 0, 10, 2**63 - 1)])[0]
    assert sealed is not None and sealed.read is not None and sealed.read.end_of_segment
    bad_requests = (
        [],
        [("a", -1, 10)],
        [("a", 0, (1 << 20) + 1)],
        [("a", 0)],
        "a",
        [(1, 0, 10)],
        [("a", 0, 1, 2**63)],
    )
    for bad in bad_requests:
        with pytest.raises(InvalidArgumentError, match="read_many"):
            client.read_many(bad)  # type: ignore[arg-type]


def test_read_many_leaves_requests_past_a_full_reply_unread(client: SegmentStoreClient) -> None:
    """Past ``READ_MANY_REPLY_BYTES`` of reply the remaining requests come back unread (asked again)."""
    from segmentstore.core.batched_reads import MAX_READ_MANY_LENGTH, READ_MANY_REPLY_BYTES

    client.create_segment("big")
    client.append("big", _records(*[255] * (MAX_READ_MANY_LENGTH // 259)))
    n = READ_MANY_REPLY_BYTES // MAX_READ_MANY_LENGTH + 2
    got = client.read_many([("big", 0, MAX_READ_MANY_LENGTH)] * n)
    served = [r for r in got if r is not None and r.read is not None]
    assert 0 < len(served) < n
    assert all(r is not None and r.read is None and r.error is None for r in got[len(served) :])
    assert all(len(r.starts) == MAX_READ_MANY_LENGTH // 259 for r in served)


# ---------------------------------------------------------------- many segments' state in one call
def test_segment_states_answer_as_the_single_calls_do_and_a_gone_segment_fails_only_itself(
    client: SegmentStoreClient, clock: ManualClock
) -> None:
    info = client.create_stream("sc/st", 2)
    low, high = (s.name for s in info.active_segments)
    client.append(low, b"abcdef")
    clock.advance(10)
    client.append(low, b"gh")
    new = client.scale_stream("sc/st", [low], [(0.0, 0.25), (0.25, 0.5)])
    client.create_segment("plain")
    client.append("plain", b"0123456789")
    client.truncate("plain", 4)
    asks = [(low, 3), (high, 0), ("gone", 0), (low, 8), ("plain", 2), ("plain", 6), (low, 9)]
    got = client.segment_states(asks)
    assert [(s.name, s.position) for s in got] == asks
    for s in got:
        if s.name == "gone":
            assert (s.info, s.watermark, s.tail_watermark) == (None, None, None)
            assert s.error is not None and "'gone'" in s.error
            continue
        assert s.info == client.get_info(s.name) and s.error is None
        assert s.tail_watermark == client.watermark_at(s.name, s.info.length)
        inside = s.info.start_offset <= s.position <= s.info.length
        assert s.watermark == (client.watermark_at(s.name, s.position) if inside else None)
        assert s.successors == (client.get_successors(s.name) if s.info.sealed else ())
    assert {i.segment for i in got[0].successors} == set(new)
    assert got[5].watermark is not None and got[4].watermark is None  # truncated below 4
    assert got[6].watermark is None  # beyond the length
    assert client.segment_states([]) == ()


@pytest.mark.parametrize(
    ("requests", "named"),
    [
        ([("s", -1)], "request 0"),
        ([("s", 0), ("s", 1.5)], "request 1"),
        ([("s", 0, 0)], "request 0"),
        ("s", "'s'"),
        ([(5, 0)], "request 0"),
    ],
    ids=["negative", "float", "triple", "str", "int-name"],
)
def test_segment_states_refuse_a_malformed_request_naming_it(
    client: SegmentStoreClient, requests: Any, named: str
) -> None:
    client.create_segment("s")
    with pytest.raises(InvalidArgumentError, match="segment_states") as e:
        client.segment_states(requests)
    assert named in str(e.value)
    assert client.segment_states([("s", 0)])[0].info == client.get_info("s")


def test_segment_states_beyond_one_frame_go_in_parts_and_the_server_refuses_more_than_its_limit(
    store: SegmentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import segmentstore.client.remote as remote_mod
    import segmentstore.net.handlers as handlers_mod

    for i in range(5):
        store.create_segment(f"s{i}")
        store.append(f"s{i}", b"x" * (i + 1))
    asks = [(f"s{i}", 0) for i in range(5)]
    server = SegmentStoreServer(store)
    port = server.start()
    try:
        with RemoteClient(("127.0.0.1", port), timeout_s=20) as remote:
            monkeypatch.setattr(handlers_mod, "MAX_STATE_REQUESTS", 2)
            monkeypatch.setattr(remote_mod, "MAX_STATE_REQUESTS", 2)
            got = remote.segment_states(asks)  # three calls of at most 2
            assert got == EmbeddedClient(store).segment_states(asks)
            assert [s.info.length for s in got if s.info is not None] == [1, 2, 3, 4, 5]
            monkeypatch.setattr(remote_mod, "MAX_STATE_REQUESTS", 5)
            with pytest.raises(InvalidArgumentError, match="at most 2 requests in one call, got 5"):
                remote.segment_states(asks)
            assert remote.segment_states(asks[:2]) == got[:2]  # the connection still serves
    finally:
        server.stop()


def test_read_ranges_reads_as_read_does_with_the_ingestion_runs_and_a_failed_read_fails_only_itself(
    client: SegmentStoreClient, clock: ManualClock
) -> None:
    client.create_segment("a")
    client.append("a", b"abc")
    clock.advance(5)
    client.append("a", b"defg")
    client.create_segment("b")
    client.append("b", b"0123456789")
    client.truncate("b", 4)
    asks = [("a", 1, 5), ("gone", 0, 1), ("b", 2, 3), ("b", 5, 100), ("a", 7, 10), ("a", 9, 1)]
    got = client.read_ranges(asks)
    assert len(got) == len(asks)
    for (name, offset, n), x in zip(asks, got, strict=True):
        try:
            want = client.read(name, offset, n)
        except SegmentStoreError as e:
            assert x.read is None and x.runs is None
            assert x.error is not None and x.error.startswith(type(e).__name__ + ":")
            continue
        assert x.read == want and x.error is None
        if want.data:
            assert x.runs is not None
            assert np.array_equal(x.runs, client.ingestion_runs(name, offset, want.end_offset))
        else:
            assert x.runs is None
    assert got[0].read is not None and got[0].read.data == b"bcdef"
    assert [x.error is not None for x in got] == [False, True, True, False, False, True]
    assert client.read_ranges([]) == ()
    with pytest.raises(InvalidArgumentError, match="read_ranges: request 1"):
        client.read_ranges([("a", 0, 1), ("a", -1, 1)])


def test_read_ranges_shares_one_reply_frame_and_later_reads_come_back_short(store: SegmentStore) -> None:
    big = 3 * 1024 * 1024
    for name in ("x", "y"):
        store.create_segment(name)
        store.append(name, bytes(big))
    server = SegmentStoreServer(store, max_frame_bytes=4 * 1024 * 1024)
    port = server.start()
    try:
        with RemoteClient(("127.0.0.1", port), timeout_s=20) as remote:
            got = remote.read_ranges([("x", 0, big), ("y", 0, big)])
        sizes = [len(x.read.data) for x in got if x.read is not None]
        assert len(sizes) == 2 and 0 < sum(sizes) < 4 * 1024 * 1024 and sizes[1] < big
        assert all(x.error is None for x in got)
    finally:
        server.stop()
