"""Pravega transactions, conditional appends and large events over raw gRPC and the raw wire: the edges the
real client seldom reaches (leases on the injected clock, refusals, a commit across a scale, recovery,
conditional offsets, transient segments), in-process on a ManualClock."""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from faults import writes_cut_after_first
from pravega_helpers import WireClient, frame_events, parse_events

from segmentstore import ManualClock, SegmentStore
from segmentstore.controller.controller import controller_of
from segmentstore.errors import SegmentNotFoundError
from segmentstore.pravega import transactions as pravega_txns
from segmentstore.pravega import wire_replies as rep
from segmentstore.pravega import wire_requests as req
from segmentstore.pravega.endpoints import PravegaEndpoints
from segmentstore.pravega.grpc_proto import load
from segmentstore.pravega.grpc_transactions import txn_id_message, txn_id_of
from segmentstore.pravega.transactions import (
    ABORTED,
    COMMITTED,
    MAX_LEASE_MS,
    OPEN,
    TXNS_SEGMENT,
    PravegaTransactions,
    TransactionStateError,
    transactions_of,
)
from segmentstore.pravega.wire import NULL_EVENT_NUMBER

pb, services = load()
WRITER = 0x0123456789ABCDEF_FEDCBA9876543210


class _Served:
    def __init__(self, store: SegmentStore) -> None:
        self.store = store
        self.ep = PravegaEndpoints(store, "127.0.0.1", 0, 0)
        self.ep.start()
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.ep.controller_port}")
        self.stub = services.ControllerServiceStub(self.channel)
        self.txns: PravegaTransactions = transactions_of(store)

    def stream(self, name: str, n: int = 1) -> None:
        scope, stream = name.split("/")
        self.stub.createScope(pb.ScopeInfo(scope=scope), timeout=10)
        cfg = pb.StreamConfig(
            streamInfo=pb.StreamInfo(scope=scope, stream=stream),
            scalingPolicy=pb.ScalingPolicy(scaleType=0, minNumSegments=n),
            retentionPolicy=pb.RetentionPolicy(),
        )
        assert self.stub.createStream(cfg, timeout=10).status == 0

    def begin(self, stream: str, lease: int = 30_000) -> Any:
        scope, s = stream.split("/")
        return self.stub.createTransaction(
            pb.CreateTxnRequest(streamInfo=pb.StreamInfo(scope=scope, stream=s), lease=lease), timeout=10
        )

    def txn_request(self, stream: str, txn_id: int) -> Any:
        scope, s = stream.split("/")
        return pb.TxnRequest(
            streamInfo=pb.StreamInfo(scope=scope, stream=s), txnId=txn_id_message(pb, txn_id)
        )

    def state(self, stream: str, txn_id: int) -> str:
        r = self.stub.checkTransactionState(self.txn_request(stream, txn_id), timeout=10)
        return str(pb.TxnState.State.Name(r.state))

    def commit(self, stream: str, txn_id: int) -> str:
        r = self.stub.commitTransaction(self.txn_request(stream, txn_id), timeout=10)
        return str(pb.TxnStatus.Status.Name(r.status))

    def abort(self, stream: str, txn_id: int) -> str:
        r = self.stub.abortTransaction(self.txn_request(stream, txn_id), timeout=10)
        return str(pb.TxnStatus.Status.Name(r.status))

    def ping(self, stream: str, txn_id: int, lease: int) -> str:
        scope, s = stream.split("/")
        r = self.stub.pingTransaction(
            pb.PingTxnRequest(
                streamInfo=pb.StreamInfo(scope=scope, stream=s), txnId=txn_id_message(pb, txn_id), lease=lease
            ),
            timeout=10,
        )
        return str(pb.PingTxnStatus.Status.Name(r.status))

    def close(self) -> None:
        self.channel.close()
        self.ep.stop()


@pytest.fixture
def served(clock: ManualClock) -> Iterator[_Served]:
    store = SegmentStore(clock=clock)
    s = _Served(store)
    try:
        yield s
    finally:
        s.close()
        store.close()


def _names(resp: Any, stream: str) -> list[str]:
    """The transaction's segment names as the 0.3.7 client makes them (``NameUtils``)."""
    txn_id = txn_id_of(resp.txnId)
    out = []
    for r in resp.activeSegments:
        sid = r.segmentId.segmentId
        hex_id = f"{txn_id >> 64:016x}{txn_id & (2**64 - 1):016x}"
        out.append(f"{stream}/{sid & 0xFFFFFFFF}.#epoch.{sid >> 32}#transaction.{hex_id}")
    return out


def _write(port: int, segment: str, payloads: list[bytes], writer: int = WRITER, first: int = 0) -> Any:
    with WireClient(port) as w:
        setup = w.call(req.SetupAppend(1, writer, segment, ""))
        assert isinstance(setup, rep.AppendSetup), setup
        data = frame_events(payloads)
        return w.call(req.AppendBlockEnd(writer, len(data), data, len(payloads), first + len(payloads), 2))


def _events(store: SegmentStore, stream: str) -> list[bytes]:
    out: list[bytes] = []
    ctl = controller_of(store)
    names = sorted(
        {s for s in store.list_segments() if s.startswith(stream + "/") and "#transaction." not in s}
    )
    for n in names:
        ctl.get_segment(n)
        info = store.get_info(n)
        out += parse_events(store.read(n, info.start_offset, info.length - info.start_offset).data)
    return out


def test_a_committed_transaction_appears_at_once_at_one_ingestion_time(
    served: _Served, clock: ManualClock
) -> None:
    served.stream("sc/s", 2)
    resp = served.begin("sc/s")
    txn_id = txn_id_of(resp.txnId)
    assert txn_id >> 96 == 0 and txn_id & (2**96 - 1) == 1  # epoch 0, the first transaction
    names = _names(resp, "sc/s")
    assert [r.minKey for r in resp.activeSegments] == [0.0, 0.5]
    for i, name in enumerate(names):
        clock.advance(10)
        assert isinstance(
            _write(served.ep.segment_port, name, [b"t%d-%d" % (i, j) for j in range(3)]), rep.DataAppended
        )
    _write(served.ep.segment_port, "sc/s/0.#epoch.0", [b"plain"], writer=7)
    assert served.state("sc/s", txn_id) == OPEN
    assert _events(served.store, "sc/s") == [b"plain"]  # nothing of the transaction yet
    clock.advance(1_000)
    assert served.commit("sc/s", txn_id) == "SUCCESS"
    assert served.state("sc/s", txn_id) == COMMITTED
    assert sorted(_events(served.store, "sc/s")) == sorted(
        [b"plain"] + [b"t%d-%d" % (i, j) for i in range(2) for j in range(3)]
    )
    for seg in ("sc/s/0.#epoch.0", "sc/s/1.#epoch.0"):
        info = served.store.get_info(seg)
        assert served.store.ingestion_time_at(seg, info.length - 1) == clock.now()  # stamped by the merge
    assert served.commit("sc/s", txn_id) == "SUCCESS"  # sent again: the same answer, merged once
    assert len(_events(served.store, "sc/s")) == 7
    assert served.ping("sc/s", txn_id, 30_000) == "COMMITTED"
    with pytest.raises(grpc.RpcError) as e:
        served.abort("sc/s", txn_id)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and f"{txn_id:032x}" in e.value.details()
    # a late writer: set up as on Pravega, its append is NoSuchSegment, nothing stored
    assert isinstance(_write(served.ep.segment_port, names[0], [b"late"]), rep.NoSuchSegment)
    assert len(_events(served.store, "sc/s")) == 7
    served.txns._check()


def test_an_aborted_transaction_never_appears_and_unknown_ids_are_answered_as_pravegas(
    served: _Served,
) -> None:
    served.stream("sc/a")
    resp = served.begin("sc/a")
    txn_id = txn_id_of(resp.txnId)
    _write(served.ep.segment_port, _names(resp, "sc/a")[0], [b"never"])
    assert served.abort("sc/a", txn_id) == "SUCCESS"
    assert served.abort("sc/a", txn_id) == "SUCCESS"
    assert served.state("sc/a", txn_id) == ABORTED
    assert served.ping("sc/a", txn_id, 30_000) == "ABORTED"
    with pytest.raises(grpc.RpcError) as e:
        served.commit("sc/a", txn_id)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (
        f"transaction {txn_id:032x} of stream 'sc/a' cannot be committed: it is ABORTED" in e.value.details()
    )
    assert _events(served.store, "sc/a") == []
    assert not [n for n in served.store.list_segments() if "#transaction." in n]
    unknown = (5 << 96) | 77
    assert served.state("sc/a", unknown) == "UNKNOWN"
    assert served.ping("sc/a", unknown, 30_000) == "UNKNOWN"
    assert served.commit("sc/a", unknown) == "TRANSACTION_NOT_FOUND"
    assert served.abort("sc/a", unknown) == "TRANSACTION_NOT_FOUND"
    assert served.commit("sc/none", txn_id) == "STREAM_NOT_FOUND"
    with pytest.raises(grpc.RpcError) as e:
        served.begin("sc/none")
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


def test_leases_are_judged_on_the_ingestion_clock(served: _Served, clock: ManualClock) -> None:
    served.stream("sc/l")
    for lease in (9_999, MAX_LEASE_MS + 1):
        with pytest.raises(grpc.RpcError) as e:
            served.begin("sc/l", lease)
        assert (
            e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and f"lease of {lease} ms" in e.value.details()
        )
    pinged = txn_id_of(served.begin("sc/l", 10_000).txnId)
    left = served.begin("sc/l", 10_000)
    left_id = txn_id_of(left.txnId)
    for _ in range(3):  # pinged every 8 s: it outlives its 10 s lease thrice
        clock.advance(8_000)
        assert served.ping("sc/l", pinged, 10_000) == "OK"
        served.txns._check()
    assert served.state("sc/l", pinged) == OPEN
    assert served.state("sc/l", left_id) == ABORTED  # its lease ran out 14 s ago: judged when asked
    assert "lease of 10000 ms ran out" in served.txns._done[left_id].why
    assert isinstance(_write(served.ep.segment_port, _names(left, "sc/l")[0], [b"x"]), rep.NoSuchSegment)
    assert served.ping("sc/l", pinged, MAX_LEASE_MS + 1) == "LEASE_TOO_LARGE"
    clock.advance(10_000)
    assert served.txns.expire() == [pinged]  # the timeout service's sweep
    assert served.state("sc/l", pinged) == ABORTED
    long = txn_id_of(served.begin("sc/l", 10_000).txnId)  # at most 1000 leases: 10 000 s
    for _ in range(10_000 // 9):
        clock.advance(9_000)
        if served.txns.ping("sc/l", long, 10_000) != "OK":
            break
    assert served.txns.ping("sc/l", long, 10_000) == "MAX_EXECUTION_TIME_EXCEEDED"
    served.txns._check()


def test_the_endpoints_sweep_aborts_expired_transactions_on_their_own(
    served: _Served, clock: ManualClock
) -> None:
    import time

    served.stream("sc/w")
    txn_id = txn_id_of(served.begin("sc/w", 10_000).txnId)
    clock.advance(10_000)
    deadline = time.monotonic() + 10
    while txn_id in served.txns.open_ids() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert served.txns._done[txn_id].state == ABORTED


def test_a_commit_across_a_scale_is_rolled_over_as_pravegas(served: _Served, clock: ManualClock) -> None:
    served.stream("sc/r")
    resp = served.begin("sc/r")
    txn_id = txn_id_of(resp.txnId)
    _write(served.ep.segment_port, _names(resp, "sc/r")[0], [b"in-txn-%d" % i for i in range(5)])
    _write(served.ep.segment_port, "sc/r/0.#epoch.0", [b"before"], writer=9)
    controller_of(served.store).scale_stream("sc/r", ["sc/r/0.#epoch.0"], [(0.0, 0.5), (0.5, 1.0)])
    clock.advance(5)
    assert served.commit("sc/r", txn_id) == "SUCCESS"
    assert sorted(_events(served.store, "sc/r")) == sorted([b"before"] + [b"in-txn-%d" % i for i in range(5)])
    info = controller_of(served.store).get_stream("sc/r")
    assert [(s.key_low, s.key_high) for s in info.active_segments] == [(0.0, 0.5), (0.5, 1.0)]
    served.txns._check()


def test_a_refused_commit_leaves_the_store_as_it_was_and_names_the_transaction(served: _Served) -> None:
    served.stream("sc/f")
    resp = served.begin("sc/f")
    txn_id = txn_id_of(resp.txnId)
    _write(served.ep.segment_port, _names(resp, "sc/f")[0], [b"held"])
    controller_of(served.store).seal_stream("sc/f")
    before = {n: served.store.get_info(n) for n in served.store.list_segments()}
    with pytest.raises(grpc.RpcError) as e:
        served.commit("sc/f", txn_id)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"transaction {txn_id:032x} of stream 'sc/f' was not committed" in e.value.details()
    after = {
        n: served.store.get_info(n) for n in served.store.list_segments() if n != "_system/_pravega_txns"
    }
    assert after == {n: i for n, i in before.items() if n != "_system/_pravega_txns"}
    assert served.state("sc/f", txn_id) == OPEN
    assert served.abort("sc/f", txn_id) == "SUCCESS"
    served.txns._check()


def test_transactions_survive_a_restart_and_an_interrupted_commit_is_finished(tmp_path: Path) -> None:
    clock = ManualClock(1_000_000)
    store = SegmentStore(clock=clock, data_dir=tmp_path / "d")
    served = _Served(store)
    served.stream("sc/d")
    done = served.begin("sc/d")
    done_id = txn_id_of(done.txnId)
    _write(served.ep.segment_port, _names(done, "sc/d")[0], [b"committed"])
    served.commit("sc/d", done_id)
    left = served.begin("sc/d")
    left_id = txn_id_of(left.txnId)
    _write(served.ep.segment_port, _names(left, "sc/d")[0], [b"left-open"])
    mid = served.begin("sc/d")
    mid_id = txn_id_of(mid.txnId)
    _write(served.ep.segment_port, _names(mid, "sc/d")[0], [b"mid-commit"])
    served.txns._set(served.txns._open[mid_id], "COMMITTING")  # a crash right after the record
    served.close()
    store.close()
    clock.advance(MAX_LEASE_MS)  # far past their 30 s leases: the restart re-arms them
    store = SegmentStore(clock=clock, data_dir=tmp_path / "d")
    served = _Served(store)
    try:
        assert served.state("sc/d", done_id) == COMMITTED
        assert served.state("sc/d", mid_id) == COMMITTED
        assert served.state("sc/d", left_id) == OPEN
        assert served.txns._open[left_id].expiry == clock.now() + MAX_LEASE_MS
        # the open one is written again and committed; its writer's event numbers were kept
        assert isinstance(
            _write(served.ep.segment_port, _names(left, "sc/d")[0], [b"left-open"]), rep.DataAppended
        )
        assert served.commit("sc/d", left_id) == "SUCCESS"
        assert sorted(_events(store, "sc/d")) == [b"committed", b"left-open", b"mid-commit"]
        assert txn_id_of(served.begin("sc/d").txnId) & 0xFFFF == 4  # the counter goes on
        served.txns._check()
    finally:
        served.close()
        store.close()


@pytest.mark.parametrize("compacting", [False, True], ids=["log", "compacted-log"])
def test_transactions_stress_keeps_the_registry_consistent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compacting: bool
) -> None:
    if compacting:  # a snapshot every few records, in several parts, through every reopen
        monkeypatch.setattr(pravega_txns, "COMPACT_MIN_BYTES", 600)
        monkeypatch.setattr(pravega_txns, "SNAPSHOT_PART_BYTES", 400)
    rng = random.Random(7)
    clock, store, txns, ctl = _pravega_stream(tmp_path, "st/s", 2)
    committed: list[bytes] = []
    written: dict[int, list[bytes]] = {}
    n = 0
    try:
        for step in range(400):
            op = rng.choice(
                ["begin", "write", "write", "ping", "commit", "abort", "advance", "expire", "reopen"]
            )
            live = txns.open_ids("st/s")
            if op == "begin" or not live:
                txn, _ = txns.create("st/s", rng.choice([10_000, 20_000]))
                written[txn.txn_id] = []
            elif op == "write":
                t = rng.choice(live)
                name = rng.choice(sorted(txns._open[t].segments))
                n += 1
                ev = b"e%d" % n
                try:
                    store.append(txns.store_segment(name), frame_events([ev]))
                    written[t].append(ev)
                except SegmentNotFoundError:  # its lease ran out: aborted when touched
                    assert txns.state("st/s", t) == ABORTED
            elif op == "ping":
                txns.ping("st/s", rng.choice(live), 10_000)
            elif op == "commit":
                t = rng.choice(live)
                try:
                    txns.commit("st/s", t)
                    committed += written[t]
                except TransactionStateError as e:  # its lease ran out: aborted when touched
                    assert "lease of" in str(e) and txns.state("st/s", t) == ABORTED
            elif op == "abort":
                txns.abort("st/s", rng.choice(live))
            elif op == "advance":
                clock.advance(rng.choice([1_000, 6_000, 12_000]))
            elif op == "expire":
                txns.expire()
            else:
                before = _remembered(txns)
                store.close()
                store = SegmentStore(clock=clock, data_dir=tmp_path / "d")
                txns = transactions_of(store)
                ctl = controller_of(store)
                assert _remembered(txns) == before  # every state and why, whether the log was compacted
            txns._check()
            ctl._check()
            assert sorted(_events(store, "st/s")) == sorted(committed), step
        assert len(committed) > 20 and len(txns._done) > 20  # commits, aborts and expiries happened
        assert (store.get_info(TXNS_SEGMENT).start_offset > 0) == compacting
    finally:
        store.close()


def _remembered(txns: PravegaTransactions) -> dict[int, tuple[str, str, str, tuple[str, ...]]]:
    """What a registry answers of every transaction it remembers: stream, state, why, segments."""
    every = {**txns._done, **txns._open}
    return {i: (t.stream, t.state, t.why, tuple(t.segments)) for i, t in every.items()}


def test_the_transactions_log_is_compacted_and_a_restart_reads_its_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server making transactions for ever keeps a log proportional to what it remembers, and a
    restart answers as before: open ones open (and committable), completed ones with their states,
    ids never given twice; a snapshot a crash cut short is ignored."""
    monkeypatch.setattr(pravega_txns, "COMPACT_MIN_BYTES", 8_000)
    monkeypatch.setattr(pravega_txns, "SNAPSHOT_PART_BYTES", 2_000)
    clock, store, txns, _ = _pravega_stream(tmp_path, "cp/s", 3)
    kept, _ = txns.create("cp/s", 30_000)
    for i in range(600):  # 1,800 records uncompacted
        t, _ = txns.create("cp/s", 30_000)
        (txns.commit if i % 2 else txns.abort)("cp/s", t.txn_id)
    log = store.get_info(TXNS_SEGMENT)
    assert log.start_offset > 0  # truncated at a snapshot
    growth = txns._growth
    assert growth.since <= max(8_000, 2 * growth.snapshot) + 400  # (+ one record)
    assert log.length - log.start_offset <= growth.snapshot + growth.since
    before, last = _remembered(txns), max(txns._done)
    store.close()
    store = SegmentStore(clock=clock, data_dir=tmp_path / "d")
    try:
        txns = transactions_of(store)
        assert _remembered(txns) == before
        assert txns.state("cp/s", kept.txn_id) == OPEN
        store.append(txns.store_segment(next(iter(kept.segments))), frame_events([b"kept"]))
        txns.commit("cp/s", kept.txn_id)
        assert _events(store, "cp/s") == [b"kept"]
        assert txns.create("cp/s", 30_000)[0].txn_id & 0xFFFF == (last & 0xFFFF) + 1  # the counter goes on
        # a snapshot cut short (its first part of two, then a crash) changes nothing at the next start
        before = _remembered(txns)
        with writes_cut_after_first(txns):
            assert txns.compact() == 0  # the second part's write fails: not truncated
        txns._check()
        store.close()
        store = SegmentStore(clock=clock, data_dir=tmp_path / "d")
        txns = transactions_of(store)
        assert _remembered(txns) == before
        txns._check()
    finally:
        store.close()


def _pravega_stream(
    tmp_path: Path, stream: str, segments: int
) -> tuple[ManualClock, SegmentStore, PravegaTransactions, Any]:
    """A durable store under ``tmp_path/d`` on a manual clock, with a Pravega-framed ``stream`` of
    ``segments`` fixed segments: the clock, the store, its Pravega transactions and its controller."""
    from segmentstore.stream_metadata import FRAMING_PRAVEGA

    clock = ManualClock(1_000_000)
    store = SegmentStore(clock=clock, data_dir=tmp_path / "d")
    ctl = controller_of(store)
    ctl.create_scope(stream.split("/", 1)[0])
    ctl.create_stream_in_scope(stream, _fixed(segments), FRAMING_PRAVEGA)
    return clock, store, transactions_of(store), ctl


def _fixed(n: int) -> Any:
    from segmentstore.controller.stream_config import StreamConfig

    return StreamConfig("fixed", 0, 0, n, "none", 0, 0, (), 0, 0)


# ---------------------------------------------------------------------- conditional appends, large events
def _byte_segment(served: _Served) -> str:
    served.stream("sc/b")
    return "sc/b/0.#epoch.0"


def test_conditional_blocks_need_the_expected_offset_and_resends_are_acknowledged(served: _Served) -> None:
    seg = _byte_segment(served)
    with WireClient(served.ep.segment_port) as w:
        assert w.call(req.SetupAppend(1, WRITER, seg, "")) == rep.AppendSetup(
            1, seg, WRITER, NULL_EVENT_NUMBER
        )
        assert w.call(req.ConditionalBlockEnd(WRITER, 1, 0, b"hello ", 2)) == rep.DataAppended(
            WRITER, 1, NULL_EVENT_NUMBER, 2, 6
        )
        assert w.call(req.ConditionalBlockEnd(WRITER, 2, 0, b"again", 3)) == rep.ConditionalCheckFailed(
            WRITER, 2, 3
        )
        assert w.call(req.ConditionalBlockEnd(WRITER, 2, 6, b"world", 4)) == rep.DataAppended(
            WRITER, 2, 1, 4, 11
        )
        assert w.call(req.ConditionalAppend(WRITER, 3, 11, b"ev", 5)) == rep.DataAppended(WRITER, 3, 2, 5, 21)
    with WireClient(served.ep.segment_port) as w:  # a reconnect resends block 2: acknowledged, not stored
        assert w.call(req.SetupAppend(6, WRITER, seg, "")).last_event_number == 3
        assert w.call(req.ConditionalBlockEnd(WRITER, 2, 6, b"world", 7)) == rep.DataAppended(
            WRITER, 2, 3, 7, 21
        )
    assert served.store.read(seg, 0, 100).data == b"hello world" + struct.pack(">iI", 0, 2) + b"ev"
    controller_of(served.store).seal_stream("sc/b")
    with WireClient(served.ep.segment_port) as w:
        w.call(req.SetupAppend(1, WRITER + 1, seg, ""))
        assert isinstance(w.call(req.ConditionalBlockEnd(WRITER + 1, 1, 21, b"x", 2)), rep.SegmentIsSealed)


def test_a_conditional_block_without_a_setup_closes_the_connection(served: _Served) -> None:
    _byte_segment(served)
    with WireClient(served.ep.segment_port) as w:
        w.send(req.ConditionalBlockEnd(WRITER, 1, 0, b"x", 2))
        assert w.closed_by_server()
    assert served.store.get_info("sc/b/0.#epoch.0").length == 0


def test_a_large_event_goes_through_a_transient_segment_merged_at_once(
    served: _Served, clock: ManualClock
) -> None:
    seg = _byte_segment(served)
    big = bytes(range(256)) * (9 * 1024 * 1024 // 256)
    framed = struct.pack(">iI", 0, len(big)) + big
    chunk = 8 * 1024 * 1024
    with WireClient(served.ep.segment_port) as w:
        created = w.call(req.CreateTransientSegment(1, WRITER, seg, ""))
        assert isinstance(created, rep.SegmentCreated) and created.segment.startswith(seg + "#transaction.")
        assert w.call(req.SetupAppend(2, WRITER, created.segment, "")).last_event_number == NULL_EVENT_NUMBER
        for i, at in enumerate(range(0, len(framed), chunk)):
            r = w.call(req.ConditionalBlockEnd(WRITER, i, at, framed[at : at + chunk], 3 + i))
            assert isinstance(r, rep.DataAppended), r
        assert served.store.get_info(seg).length == 0
        clock.advance(3)
        merged = w.call(req.MergeSegments(9, seg, created.segment, ""))
        assert merged == rep.SegmentsMerged(9, seg, created.segment, len(framed))
    assert parse_events(served.store.read(seg, 0, len(framed)).data) == [big]
    assert served.store.ingestion_time_at(seg, 0) == clock.now()
    # a transient segment that is not whole events is refused: the stream is not garbled
    with WireClient(served.ep.segment_port) as w:
        t = w.call(req.CreateTransientSegment(1, WRITER + 1, seg, "")).segment
        w.call(req.SetupAppend(2, WRITER + 1, t, ""))
        w.call(req.ConditionalBlockEnd(WRITER + 1, 0, 0, framed[:100], 3))
        refused = w.call(req.MergeSegments(4, seg, t, ""))
        assert isinstance(refused, rep.ErrorMessage) and "not a whole Pravega event" in refused.message
    assert served.store.get_info(seg).length == len(framed)


def test_a_pravega_transaction_does_not_merge_through_the_wire(served: _Served) -> None:
    served.stream("sc/m")
    resp = served.begin("sc/m")
    name = _names(resp, "sc/m")[0]
    with WireClient(served.ep.segment_port) as w:
        r = w.call(req.MergeSegments(1, "sc/m/0.#epoch.0", name, ""))
        assert isinstance(r, rep.ErrorMessage) and "commits through the controller" in r.message
        r = w.call(req.CreateTransientSegment(2, WRITER, name, ""))
        assert isinstance(r, rep.ErrorMessage) and "into a transaction" in r.message
    assert served.state("sc/m", txn_id_of(resp.txnId)) == OPEN
