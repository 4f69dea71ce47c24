"""The Pravega segment-store endpoint (segmentstore.pravega.wire_server, wire_handlers) over raw sockets:
appends deduplicated per 128-bit writer, reads waiting at the tail, segment control, refusals as
Pravega's, delegation tokens, and the hardening of ingestwm's own server."""

from __future__ import annotations

import logging
import re
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pravega_helpers import WireClient, frame_events, parse_events

from segmentstore import (
    FRAMING_PRAVEGA,
    LAST_WRITE_TIME,
    ManualClock,
    SegmentStore,
)
from segmentstore.clock import WallClock
from segmentstore.controller.controller import controller_of
from segmentstore.controller.stream_config import StreamConfig
from segmentstore.pravega import wire_replies as rep
from segmentstore.pravega import wire_requests as req
from segmentstore.pravega.auth import DelegationTokens
from segmentstore.pravega.endpoints import PravegaEndpoints
from segmentstore.pravega.wire import NULL_EVENT_NUMBER
from segmentstore.pravega.wire_server import WireLimits

W1 = 2**127 + 5
W2 = 5  # agrees with W1 in its low 64 bits: another writer all the same
SEG = "sc/p/0.#epoch.0"


@pytest.fixture
def store(clock: ManualClock) -> Iterator[SegmentStore]:
    s = SegmentStore(clock=clock)
    ctl = controller_of(s)
    ctl.create_scope("sc")
    ctl.create_stream_in_scope("sc/p", StreamConfig(), FRAMING_PRAVEGA)
    ctl.create_stream("sc/own")  # ingestwm-framed
    try:
        yield s
    finally:
        s.close()


def _endpoints(store: SegmentStore, token: str | None = None, **limits: Any) -> PravegaEndpoints:
    ep = PravegaEndpoints(store, "127.0.0.1", 0, 0, token, WireLimits(**{"tail_wait_s": 0.3, **limits}))
    ep.start()
    return ep


@pytest.fixture
def ep(store: SegmentStore) -> Iterator[PravegaEndpoints]:
    e = _endpoints(store)
    try:
        yield e
    finally:
        e.stop()


def _block(writer: int, events: list[bytes], last: int, rid: int = 1) -> req.AppendBlockEnd:
    data = frame_events(events)
    return req.AppendBlockEnd(writer, len(data), data, len(events), last, rid)


def _appends_to(store: SegmentStore, segment: str) -> list[int]:
    """Count the store appends to ``segment`` from now on (the endpoint must make one per block)."""
    calls: list[int] = []
    inner = store.append

    def counting(name: str, data: bytes, *a: Any, **kw: Any) -> Any:
        if name == segment:
            calls.append(len(data))
        return inner(name, data, *a, **kw)

    store.append = counting  # type: ignore[method-assign]
    return calls


# ---------------------------------------------------------------------- appends
def test_appends_are_one_store_append_per_block_stamped_by_the_ingestion_clock(
    store: SegmentStore, ep: PravegaEndpoints, clock: ManualClock
) -> None:
    calls = _appends_to(store, SEG)
    with WireClient(ep.segment_port) as c:
        setup = c.call(req.SetupAppend(7, W1, SEG, ""))
        assert setup == rep.AppendSetup(7, SEG, W1, NULL_EVENT_NUMBER)
        clock.advance(10)
        t1 = clock.now()
        assert c.call(_block(W1, [b"a", b"bb", b"ccc"], 3, 8)) == rep.DataAppended(
            W1, 3, NULL_EVENT_NUMBER, 8, 30
        )
        clock.advance(10)
        assert c.call(_block(W1, [b"dddd"], 4, 9)) == rep.DataAppended(W1, 4, 3, 9, 42)
    assert calls == [30, 12]  # one append per block, never per event
    data = store.read(SEG, 0, 100).data
    assert parse_events(data) == [b"a", b"bb", b"ccc", b"dddd"]  # Pravega's framing, stored as it came
    assert store.ingestion_time_at(SEG, 0) == t1 and store.ingestion_time_at(SEG, 30) == t1 + 10
    assert store.get_attributes(SEG)[LAST_WRITE_TIME] == t1 + 10
    assert store.get_writer_event_number(SEG, W1) == 4
    store._check()
    ep.wire._check()


def test_a_resent_block_is_acknowledged_never_stored_twice_and_an_overlap_is_cut(
    store: SegmentStore, ep: PravegaEndpoints
) -> None:
    calls = _appends_to(store, SEG)
    with WireClient(ep.segment_port) as c:
        c.call(req.SetupAppend(1, W1, SEG, ""))
        c.call(_block(W1, [b"e1", b"e2"], 2))
    # a reconnect: the set-up says what is stored; a block sent again is acknowledged, not stored
    with WireClient(ep.segment_port) as c:
        assert c.call(req.SetupAppend(2, W1, SEG, "")).last_event_number == 2
        assert c.call(_block(W1, [b"e1", b"e2"], 2, 3)) == rep.DataAppended(W1, 2, 2, 3, 20)
        # a block whose start is stored already: only its new events are stored
        assert c.call(_block(W1, [b"e2", b"e3"], 3, 4)) == rep.DataAppended(W1, 3, 2, 4, 30)
        # another writer whose id agrees in its low 64 bits is another writer
        assert c.call(req.SetupAppend(5, W2, SEG, "")).last_event_number == NULL_EVENT_NUMBER
        assert c.call(_block(W2, [b"x2"], 2, 6)).current_segment_write_offset == 40
    assert parse_events(store.read(SEG, 0, 100).data) == [b"e1", b"e2", b"e3", b"x2"]
    assert calls == [20, 20, 10, 10]  # the resent block reached the store, which deduplicated it


@pytest.mark.parametrize(
    "cmd, why",
    [
        (
            req.AppendBlockEnd(W1, 9, struct.pack(">iI", 1, 1) + b"x", 1, 1, 1),
            "not a whole Pravega event \\(type 1",
        ),
        (req.AppendBlockEnd(W1, 9, struct.pack(">iI", 0, 2) + b"x", 1, 1, 1), "not a whole Pravega event"),
        (req.AppendBlockEnd(W1, 7, b"\0\0\0\0\0\0\0", 1, 1, 1), "not a whole event header"),
        (req.AppendBlockEnd(W1, 18, frame_events([b"a", b"b"]), 3, 3, 1), "block says 3"),
        (req.AppendBlockEnd(W1, 8, frame_events([b"a"]), 1, 1, 1), "9 bytes came"),
        (req.AppendBlockEnd(W1, 0, b"", 0, 1, 1), "0 events"),
        (req.AppendBlockEnd(W2, 9, frame_events([b"a"]), 1, 1, 1), "without a SetupAppend"),
        (req.AppendBlock(W1, b"part"), "AppendBlock outside an append block"),
    ],
)
def test_a_block_that_is_not_whole_pravega_events_closes_the_connection_and_stores_nothing(
    store: SegmentStore, ep: PravegaEndpoints, caplog: pytest.LogCaptureFixture, cmd: Any, why: str
) -> None:
    with WireClient(ep.segment_port) as c:
        c.call(req.SetupAppend(1, W1, SEG, ""))
        with caplog.at_level(logging.WARNING, "segmentstore.pravega.wire_server"):
            c.send(cmd)
            assert c.closed_by_server()
    assert any(re.search(why, r.getMessage()) for r in caplog.records), caplog.text
    assert store.get_info(SEG).length == 0
    with WireClient(ep.segment_port) as c:  # the endpoint serves on
        assert c.call(req.SetupAppend(2, W1, SEG, "")).last_event_number == NULL_EVENT_NUMBER


def test_event_numbers_going_backwards_on_a_connection_close_it(
    store: SegmentStore, ep: PravegaEndpoints
) -> None:
    with WireClient(ep.segment_port) as c:
        c.call(req.SetupAppend(1, W1, SEG, ""))
        c.call(_block(W1, [b"a"], 5))
        c.send(_block(W1, [b"b"], 4))
        assert c.closed_by_server()
    assert store.get_info(SEG).length == 9


def test_refusals_are_pravegas(store: SegmentStore, ep: PravegaEndpoints) -> None:
    with WireClient(ep.segment_port) as c:
        missing = c.call(req.SetupAppend(1, W1, "sc/p/9.#epoch.0", ""))
        assert isinstance(missing, rep.NoSuchSegment) and missing.request_id == 1
        assert isinstance(c.call(req.SetupAppend(2, W1, "not-a-stream-segment", "")), rep.NoSuchSegment)
        own = c.call(req.SetupAppend(3, W1, "sc/own/0.#epoch.0", ""))
        assert isinstance(own, rep.OperationUnsupported) and "ingestwm-framed" in own.operation_name
        read = c.call(req.ReadSegment("sc/own/0.#epoch.0", 0, 100, "", 4))
        assert isinstance(read, rep.OperationUnsupported) and "created through the Pravega controller" in (
            read.operation_name
        )
        table = c.call(req.SealTableSegment(5, "sc/_rg_kvtable/0.#epoch.0", ""))
        assert table == rep.OperationUnsupported(5, "SealTableSegment is not served by ingestwm yet", "")
        assert c.call(req.KeepAlive()) == req.KeepAlive()  # the connection stays usable
        assert c.call(req.SetupAppend(6, W1, SEG, "")).request_id == 6
        c.call(_block(W1, [b"a"], 1))
        store.seal(SEG)
        sealed = c.call(_block(W1, [b"b"], 2, 7))
        assert sealed == rep.SegmentIsSealed(7, SEG, sealed.server_stack_trace, 2)
        # a failed append needs a new set-up, as Pravega's; a sealed segment answers one
        c.send(_block(W1, [b"c"], 3, 8))
        assert c.closed_by_server()
    with WireClient(ep.segment_port) as c:
        assert c.call(req.SetupAppend(9, W1, SEG, "")).last_event_number == 1


def test_a_closing_store_answers_wrong_host(store: SegmentStore, ep: PravegaEndpoints) -> None:
    with WireClient(ep.segment_port) as c:
        c.call(req.SetupAppend(1, W1, SEG, ""))
        store.close()
        reply = c.call(_block(W1, [b"a"], 1, 2))
        assert isinstance(reply, rep.WrongHost) and reply.request_id == 2


# ---------------------------------------------------------------------- reads and control
def test_reads_answer_the_requested_offset_and_wait_briefly_at_the_tail(
    store: SegmentStore, ep: PravegaEndpoints
) -> None:
    store.append(SEG, frame_events([b"one", b"two"]))
    with WireClient(ep.segment_port) as c:
        r = c.call(req.ReadSegment(SEG, 11, 1000, "", 1))
        assert r == rep.SegmentRead(SEG, 11, True, False, frame_events([b"two"]), 1)
        start = time.monotonic()
        empty = c.call(req.ReadSegment(SEG, 22, 1000, "", 2))  # at the tail: nothing comes
        assert empty == rep.SegmentRead(SEG, 22, True, False, b"", 2)
        assert 0.25 <= time.monotonic() - start < 3  # it waited tail_wait_s, no more
        c.send(req.ReadSegment(SEG, 22, 1000, "", 3))
        threading.Timer(0.1, store.append, (SEG, frame_events([b"three"]))).start()
        start = time.monotonic()
        assert c.recv() == rep.SegmentRead(SEG, 22, True, False, frame_events([b"three"]), 3)
        assert time.monotonic() - start < 0.25  # answered when the data came, not at the timer
        store.seal(SEG)
        assert c.call(req.ReadSegment(SEG, 35, 1000, "", 4)) == rep.SegmentRead(SEG, 35, True, True, b"", 4)
        store.truncate(SEG, 11)
        truncated = c.call(req.ReadSegment(SEG, 0, 10, "", 5))
        assert isinstance(truncated, rep.SegmentIsTruncated)
        t = truncated
        assert (t.request_id, t.segment, t.start_offset, t.offset) == (5, SEG, 11, 0)


def test_a_read_is_at_most_2_mib_and_several_wait_at_once(store: SegmentStore, ep: PravegaEndpoints) -> None:
    big = b"\x07" * (3 * 1024 * 1024)
    store.append(SEG, frame_events([big]))
    with WireClient(ep.segment_port) as c:
        r = c.call(req.ReadSegment(SEG, 0, 16 * 1024 * 1024, "", 1))
        assert len(r.data) == 2 * 1024 * 1024 and not r.at_tail
        tail = store.get_info(SEG).length
        for rid in (2, 3):
            c.send(req.ReadSegment(SEG, tail, 100, "", rid))
        c.send(req.KeepAlive())
        assert c.recv() == req.KeepAlive()  # waiting reads do not hold up the connection
        store.append(SEG, frame_events([b"z"]))
        assert sorted(c.recv().request_id for _ in range(2)) == [2, 3]
        ep.wire._check()


def test_segment_info_seal_and_truncate(
    store: SegmentStore, ep: PravegaEndpoints, clock: ManualClock
) -> None:
    store.append(SEG, frame_events([b"abc"]))
    with WireClient(ep.segment_port) as c:
        info = c.call(req.GetStreamSegmentInfo(1, SEG, ""))
        assert info == rep.StreamSegmentInfo(1, SEG, True, False, False, clock.now(), 11, 0)
        assert c.call(req.TruncateSegment(2, SEG, 8, "")) == rep.SegmentTruncated(2, SEG)
        assert c.call(req.TruncateSegment(3, SEG, 4, "")) == rep.SegmentTruncated(
            3, SEG
        )  # below: done already
        beyond = c.call(req.TruncateSegment(4, SEG, 99, ""))
        assert isinstance(beyond, rep.ErrorMessage) and beyond.error_code == 0 and "99" in beyond.message
        negative = c.call(req.ReadSegment(SEG, -5, 10, "", 11))
        assert (
            isinstance(negative, rep.ErrorMessage) and negative.error_code == 0 and "-5" in negative.message
        )
        assert c.call(req.SealSegment(5, SEG, "")) == rep.SegmentSealed(5, SEG)
        assert isinstance(c.call(req.SealSegment(6, SEG, "")), rep.SegmentIsSealed)
        assert c.call(req.GetStreamSegmentInfo(7, SEG, "")).is_sealed
        assert c.call(req.GetStreamSegmentInfo(8, SEG, "")).start_offset == 8
        refused = c.call(req.DeleteSegment(9, SEG, ""))
        assert isinstance(refused, rep.OperationUnsupported) and "deleteStream" in refused.operation_name
        assert isinstance(c.call(req.GetStreamSegmentInfo(10, "sc/p/5.#epoch.0", "")), rep.NoSuchSegment)
    assert store.exists(SEG)
    controller_of(store)._check()  # a segment a client sealed itself is no inconsistency


# ---------------------------------------------------------------------- delegation tokens
def test_commands_need_the_controllers_delegation_token_when_the_server_has_one(store: SegmentStore) -> None:
    ep = _endpoints(store, token="secret")
    try:
        good = DelegationTokens("secret").issue("sc/p")
        other = DelegationTokens("secret").issue("sc/own")
        forged = DelegationTokens("guess").issue("sc/p")
        expired = DelegationTokens("secret", ttl_s=-10).issue("sc/p")
        with WireClient(ep.segment_port) as c:
            for rid, token, code in ((1, "", 0), (2, forged, 0), (3, other, 0), (4, expired, 1)):
                reply = c.call(req.SetupAppend(rid, W1, SEG, token))
                assert isinstance(reply, rep.AuthTokenCheckFailed) and (
                    reply.request_id,
                    reply.error_code,
                ) == (
                    rid,
                    code,
                ), reply
            assert isinstance(c.call(req.ReadSegment(SEG, 0, 10, "", 5)), rep.AuthTokenCheckFailed)
            # before a token is accepted, a command may hold at most 64 KiB
            c.send_raw(struct.pack(">ii", 9, 70_000))
            assert c.closed_by_server()
        with WireClient(ep.segment_port) as c:
            assert c.call(req.SetupAppend(6, W1, SEG, good)).last_event_number == NULL_EVENT_NUMBER
            big = b"\0" * 100_000
            assert c.call(_block(W1, [big], 1, 7)).current_segment_write_offset == len(big) + 8
    finally:
        ep.stop()


def test_delegation_tokens_carry_an_exp_the_rust_client_reads() -> None:
    import base64
    import json

    tokens = DelegationTokens("s", WallClock(), ttl_s=600)
    token = tokens.issue("sc/p")
    parts = token.split(".")
    assert len(parts) == 3
    body = base64.b64decode(parts[1], validate=True).decode()  # the client's standard base64 decoder
    assert re.search(r'"exp":\s?(\d+)', body) and json.loads(body)["stream"] == "sc/p"


# ---------------------------------------------------------------------- hardening
def test_malformed_or_oversized_commands_close_only_their_connection(
    store: SegmentStore, ep: PravegaEndpoints, caplog: pytest.LogCaptureFixture
) -> None:
    with WireClient(ep.segment_port) as bystander:
        bystander.call(req.SetupAppend(1, W1, SEG, ""))
        cases = [
            (False, struct.pack(">ii", 9, 8) + b"x" * 8, "first command must be a Hello"),
            (False, struct.pack(">ii", -127, 1_000_000), "at most 64 are taken before the Hello"),
            (True, struct.pack(">ii", 4242, 0), "unknown request type code 4242"),
            (True, struct.pack(">ii", 28, 3) + b"\0\x09x", "SealSegment"),
            (True, struct.pack(">ii", 4, 20_000_000), "at most 16777215"),
            (True, struct.pack(">ii", 9, -1), "declares -1"),
        ]
        for hello, raw, why in cases:
            caplog.clear()
            with caplog.at_level(logging.WARNING), WireClient(ep.segment_port, hello=hello) as c:
                c.send_raw(raw)
                assert c.closed_by_server(), why
            assert why in caplog.text, (why, caplog.text)
        assert bystander.call(_block(W1, [b"still here"], 1)).event_number == 1
    assert ep.wire.closed_bad == len(cases)
    ep.wire._check()


def test_an_incompatible_hello_is_answered_then_closed(ep: PravegaEndpoints) -> None:
    with WireClient(ep.segment_port, hello=False) as c:
        assert c.call(req.Hello(4, 2)) == req.Hello(15, 5)
        assert c.closed_by_server()


def test_connections_are_limited_and_must_say_hello_in_time(store: SegmentStore) -> None:
    ep = _endpoints(store, max_connections=2, handshake_timeout_s=0.4)
    try:
        a, b = WireClient(ep.segment_port), WireClient(ep.segment_port, hello=False)
        with WireClient(ep.segment_port, hello=False) as third:
            assert third.closed_by_server()  # over max_connections
        assert b.closed_by_server(timeout_s=3)  # no Hello within handshake_timeout_s
        assert a.call(req.KeepAlive()) == req.KeepAlive()
        assert ep.wire.refused == 1
        a.close()
    finally:
        ep.stop()


def test_stop_leaves_no_connection_open(store: SegmentStore) -> None:
    ep = _endpoints(store)
    clients = [WireClient(ep.segment_port) for _ in range(3)]
    clients[0].send(req.ReadSegment(SEG, 0, 10, "", 1))  # one waits at the tail
    time.sleep(0.05)
    ep.stop()
    for c in clients:
        assert c.closed_by_server(timeout_s=2)
        c.close()
    assert ep.wire.connection_count == 0
    ep.wire._check()
    with pytest.raises(OSError):
        WireClient(ep.segment_port, timeout_s=1)
