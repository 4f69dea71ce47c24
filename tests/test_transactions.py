"""Transactions: begin, write, commit (merge; rolled when the stream scaled), abort, crash recovery."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from readergroup import (
    EventWriter,
    TransactionalEventWriter,
    TransactionClosedError,
    TransactionStatus,
    WriterConfig,
    decode_frames,
    encode_event,
    key_hash,
)
from segmentstore import (
    AppendResult,
    InvalidArgumentError,
    ManualClock,
    NotATransactionError,
    SegmentNotFoundError,
    SegmentStore,
    StreamController,
    StreamSealedError,
    TickingClock,
)
from segmentstore.client import EmbeddedClient, SegmentStoreClient
from segmentstore.controller.controller import controller_of

S = "scope/t"
KEYS = [f"k{i}" for i in range(12)]


@pytest.fixture
def client(store: SegmentStore) -> EmbeddedClient:
    return EmbeddedClient(store)


def all_segments(meta: Any, stream: str) -> list[Any]:
    """Every segment the stream ever had, by creation; ``meta`` is a client or a ``StreamController``."""
    seen: dict[str, Any] = {}
    todo = [n for n, _ in meta.get_head_cut(stream).positions]
    while todo:
        n = todo.pop()
        if n not in seen:
            seen[n] = meta.get_segment(n)
            todo.extend(s.segment.name for s in meta.get_successors(n))
    return sorted(seen.values(), key=lambda s: s.number)  # numbers grow with creation


def read_stream(client: SegmentStoreClient, stream: str, meta: Any = None) -> dict[str, list[bytes]]:
    """Payloads per routing key, reading every segment after its predecessors."""
    per_key: dict[str, list[bytes]] = defaultdict(list)
    for seg in all_segments(meta or client, stream):
        info = client.get_info(seg.name)
        frames, used = decode_frames(client.read(seg.name, 0, 1 << 30).data)
        assert used == info.length
        for f in frames:
            assert seg.key_low <= key_hash(f.routing_key) < seg.key_high
            per_key[f.routing_key].append(f.payload)
    return dict(per_key)


def check_successor_watermarks(client: SegmentStoreClient, stream: str) -> None:
    """docs/design.md §1: every byte of a successor has ingestion time > its predecessors' final watermark."""
    for seg in all_segments(client, stream):
        length = client.get_info(seg.name).length
        final = client.watermark_at(seg.name, length)
        for succ in client.get_successors(seg.name):
            if client.get_info(succ.segment.name).length:
                assert client.ingestion_time_at(succ.segment.name, 0) > final, (seg.name, succ.segment.name)


def write_all(w: Any, tag: str) -> None:
    for k in KEYS:
        w.write_event(k, f"{tag}:{k}".encode())


def expect(*tags: str) -> dict[str, list[bytes]]:
    return {k: [f"{t}:{k}".encode() for t in tags] for k in KEYS}


# ---------------------------------------------------------------------- commit and abort
def test_commit_makes_events_visible_at_the_merge_time(client: EmbeddedClient, clock: ManualClock) -> None:
    segs = client.create_stream(S, 3).active_segments
    tw = TransactionalEventWriter(client, S, config=WriterConfig(max_batch_events=4))
    txn = tw.begin_txn()
    assert [t.parent for t in txn.info.segments] == list(segs)
    write_all(txn, "t")
    txn.flush()
    assert all(client.get_info(s.name).length == 0 for s in segs)  # invisible before the commit
    clock.advance(500)
    txn.commit()
    assert txn.status is TransactionStatus.COMMITTED
    assert read_stream(client, S) == expect("t")
    for s in segs:
        if client.get_info(s.name).length:
            assert client.ingestion_time_at(s.name, 0) == clock.now()
    assert all(not client.exists(n) for n in txn.info.segment_names)
    with pytest.raises(TransactionClosedError, match="committed"):
        txn.write_event("k", b"x")
    with pytest.raises(TransactionClosedError):
        txn.commit()


def test_abort_drops_everything(client: EmbeddedClient) -> None:
    client.create_stream(S, 2)
    txn = TransactionalEventWriter(client, S).begin_txn()
    write_all(txn, "t")
    txn.abort()
    txn.abort()  # idempotent
    assert txn.status is TransactionStatus.ABORTED
    assert read_stream(client, S) == {}
    assert all(not client.exists(n) for n in txn.info.segment_names)
    with pytest.raises(TransactionClosedError, match="aborted"):
        txn.commit()


def test_context_manager_commits_or_aborts(client: EmbeddedClient) -> None:
    client.create_stream(S, 2)
    tw = TransactionalEventWriter(client, S)
    with tw.begin_txn() as txn:
        write_all(txn, "a")
    with pytest.raises(RuntimeError), tw.begin_txn() as bad:
        write_all(bad, "b")
        raise RuntimeError("boom")
    assert bad.status is TransactionStatus.ABORTED
    assert read_stream(client, S) == expect("a")


def test_transaction_writes_are_retried_without_duplicates(store: SegmentStore) -> None:
    class LoseAcks(EmbeddedClient):
        lost = 0

        def append(self, name: str, data: bytes, *a: Any, **kw: Any) -> AppendResult:
            r = super().append(name, data, *a, **kw)
            if "#transaction." in name and self.lost < 3:
                self.lost += 1
                raise TimeoutError("acknowledgement lost")
            return r

    client = LoseAcks(store)
    client.create_stream(S, 2)
    txn = TransactionalEventWriter(client, S, config=WriterConfig(max_batch_events=5)).begin_txn()
    write_all(txn, "t")
    txn.commit()
    assert client.lost == 3 and read_stream(client, S) == expect("t")


# ---------------------------------------------------------------------- a commit whose answer was lost
@pytest.mark.parametrize("scaled", [False, True])
def test_a_commit_sent_again_after_it_landed_is_answered_ok_and_merges_once(
    store: SegmentStore, scaled: bool
) -> None:
    """A commit's reply lost on the way: sending it again (by hand, or the remote client's retry of
    an idempotent call) answers as the first did, and the events are in the stream once; a replayed
    controller knows it too."""
    client = EmbeddedClient(store)
    seg = client.create_stream(S, 1).active_segments[0]
    info = client.begin_transaction(S)
    for n in info.segment_names:
        client.append(n, encode_event("k", b"t"))
    if scaled:  # a rolled commit
        client.scale_stream(S, [seg.name], [(0.0, 0.5), (0.5, 1.0)])
    client.commit_transaction(S, info.segment_names)
    client.commit_transaction(S, info.segment_names)  # the retry
    StreamController(store).commit_transaction(S, info.segment_names)  # after a restart
    assert read_stream(client, S) == {"k": [b"t"]}
    with pytest.raises(SegmentNotFoundError):  # an aborted transaction stays an error
        aborted = client.begin_transaction(S)
        client.abort_transaction(S, aborted.segment_names)
        client.commit_transaction(S, aborted.segment_names)


def test_the_commits_remembered_for_resends_are_bounded(
    store: SegmentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The controller recognises a resent commit among the latest COMMITS_REMEMBERED transaction
    segments, and forgets older ones (memory stays bounded however many transactions commit)."""
    import segmentstore.controller.controller as ctl

    monkeypatch.setattr(ctl, "COMMITS_REMEMBERED", 3)
    client = EmbeddedClient(store)
    client.create_stream(S, 1)
    txns = []
    for i in range(4):
        info = client.begin_transaction(S)
        client.append(info.segment_names[0], encode_event("k", b"%d" % i))
        client.commit_transaction(S, info.segment_names)
        txns.append(info.segment_names)
    client.commit_transaction(S, txns[1])  # among the latest three: answered as before
    with pytest.raises(SegmentNotFoundError):
        client.commit_transaction(S, txns[0])  # forgotten, and merged long ago: gone
    assert read_stream(client, S) == {"k": [b"0", b"1", b"2", b"3"]}
    StreamController(store).commit_transaction(S, txns[3])  # a replayed controller: the latest too


def test_a_transaction_commits_over_a_connection_lost_after_the_commit(store: SegmentStore) -> None:
    from segmentstore import ConnectionLostError
    from segmentstore.client import RemoteClient
    from segmentstore.net.server import SegmentStoreServer

    class LosesTheFirstCommitReply(EmbeddedClient):
        lost = 0

        def commit_transaction(self, stream: str, txn_segments: Any) -> None:
            super().commit_transaction(stream, txn_segments)
            if not self.lost:
                self.lost += 1
                raise ConnectionLostError("the connection broke after the commit")

    with SegmentStoreServer(store) as srv, RemoteClient(("127.0.0.1", srv.port), timeout_s=20) as c:
        srv.client = LosesTheFirstCommitReply(store)
        c.create_stream(S, 2)
        txn = TransactionalEventWriter(c, S).begin_txn()
        write_all(txn, "t")
        txn.commit()
        assert txn.status is TransactionStatus.COMMITTED and srv.client.lost == 1
        assert read_stream(c, S) == expect("t")


# ---------------------------------------------------------------------- the stream scaled meanwhile
def test_commit_after_scaling_is_rolled() -> None:
    ticking = SegmentStore(clock=TickingClock(10_000))
    client = EmbeddedClient(ticking)
    client.create_stream(S, 2)
    plain = EventWriter(client, S)
    write_all(plain, "a")
    plain.flush()
    txn = TransactionalEventWriter(client, S).begin_txn()
    write_all(txn, "t")
    segs = client.get_stream(S).active_segments
    client.scale_stream(S, [segs[1].name], [(0.5, 0.8), (0.8, 1.0)])
    segs = client.get_stream(S).active_segments
    client.scale_stream(S, [segs[0].name, segs[1].name], [(0.0, 0.8)])
    write_all(plain, "b")
    plain.flush()
    layout = [(s.key_low, s.key_high) for s in client.get_stream(S).active_segments]
    epoch = client.get_stream(S).epoch
    txn.commit()
    write_all(plain, "c")
    plain.flush()
    info = client.get_stream(S)
    assert [(s.key_low, s.key_high) for s in info.active_segments] == layout
    assert info.epoch == epoch + 2
    assert read_stream(client, S) == expect("a", "b", "t", "c")
    check_successor_watermarks(client, S)
    controller_of(ticking)._check()
    replay = StreamController(ticking)
    replay._check()
    assert replay.get_stream(S) == info
    ticking.close()


def test_empty_transaction_after_scaling_changes_nothing(client: EmbeddedClient) -> None:
    seg = client.create_stream(S).active_segments[0]
    txn = TransactionalEventWriter(client, S).begin_txn()
    client.scale_stream(S, [seg.name], [(0.0, 0.5), (0.5, 1.0)])
    txn.commit()
    assert client.get_stream(S).epoch == 1
    assert all(not client.exists(n) for n in txn.info.segment_names)


def test_commit_on_sealed_stream_fails_and_abort_still_works(client: EmbeddedClient) -> None:
    client.create_stream(S, 2)
    txn = TransactionalEventWriter(client, S).begin_txn()
    write_all(txn, "t")
    client.seal_stream(S)
    with pytest.raises(StreamSealedError, match="scope/t"):
        txn.commit()
    assert txn.status is TransactionStatus.OPEN
    txn.abort()
    assert all(not client.exists(n) for n in txn.info.segment_names)


# ---------------------------------------------------------------------- bad input
def test_bad_commits_change_nothing(client: EmbeddedClient, store: SegmentStore) -> None:
    client.create_stream(S, 2)
    client.create_stream("scope/other", 2)
    info = client.begin_transaction(S)
    other = client.begin_transaction("scope/other")
    names = list(info.segment_names)
    for n in names:
        client.append(n, encode_event("k", b"x"))
    before = {n: store.get_info(n) for n in store.list_segments()}
    cases: list[tuple[list[str], type[Exception], str]] = [
        ([], InvalidArgumentError, "no transaction segments"),
        (names[:1], InvalidArgumentError, "do not tile"),
        ([names[0], names[0]], InvalidArgumentError, "twice"),
        ([names[0], other.segment_names[1]], InvalidArgumentError, "not to stream"),
        ([names[0], info.segments[1].parent.name], NotATransactionError, "not a transaction"),
        ([names[0], "scope/t/nope"], SegmentNotFoundError, "nope"),
    ]
    for bad, err, match in cases:
        with pytest.raises(err, match=match):
            client.commit_transaction(S, bad)
        assert {n: store.get_info(n) for n in store.list_segments()} == before
    with pytest.raises(InvalidArgumentError):
        client.commit_transaction(S, names[0])  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="not to stream"):
        client.abort_transaction(S, other.segment_names)
    client.commit_transaction(S, names)


# ---------------------------------------------------------------------- crash recovery
class Crash(Exception):
    pass


def crashing(store: SegmentStore, method: str, after: int, when: Any = None) -> StreamController:
    """A controller whose store raises ``Crash`` from the ``after``-th call of ``method`` on."""
    calls = [0]

    class Proxy:
        def __getattr__(self, attr: str) -> Any:
            fn = getattr(store, attr)
            if attr != method:
                return fn

            def call(*a: Any, **k: Any) -> Any:
                if when is None or when(*a):
                    calls[0] += 1
                    if calls[0] > after:
                        raise Crash(f"crash in {method}{a[:1]}")
                return fn(*a, **k)

            return call

    return StreamController(Proxy())  # type: ignore[arg-type]


def test_interrupted_commit_is_finished_on_reopen(store: SegmentStore) -> None:
    client = EmbeddedClient(store)
    client.create_stream(S, 3)
    txn = TransactionalEventWriter(client, S).begin_txn()
    write_all(txn, "t")
    txn.flush()
    with pytest.raises(Crash):
        crashing(store, "merge_transaction", 1).commit_transaction(S, txn.info.segment_names)
    assert sum(client.exists(n) for n in txn.info.segment_names) == 2  # one merged, two left
    StreamController(store)._check()
    assert all(not client.exists(n) for n in txn.info.segment_names)
    assert read_stream(client, S) == expect("t")


def test_interrupted_rolled_commit_is_finished_on_reopen(store: SegmentStore) -> None:
    client = EmbeddedClient(store)
    seg = client.create_stream(S, 1).active_segments[0]
    plain = EventWriter(client, S)
    write_all(plain, "a")
    plain.flush()
    txn = TransactionalEventWriter(client, S).begin_txn()
    write_all(txn, "t")
    txn.flush()
    client.scale_stream(S, [seg.name], [(0.0, 0.5), (0.5, 1.0)])
    write_all(plain, "b")
    plain.flush()
    ctl = crashing(store, "append", 0, when=lambda name, *_: not name.startswith("_system"))
    with pytest.raises(Crash):
        ctl.commit_transaction(S, txn.info.segment_names)  # crashes copying the transaction's data
    reopened = StreamController(store)
    reopened._check()
    info = reopened.get_stream(S)
    assert [(s.key_low, s.key_high) for s in info.active_segments] == [(0.0, 0.5), (0.5, 1.0)]
    assert info.epoch == 3
    assert all(not client.exists(n) for n in txn.info.segment_names)
    assert read_stream(client, S, meta=reopened) == expect("a", "b", "t")


def test_replay_does_not_redo_a_finished_roll_on_a_recreated_stream(client: EmbeddedClient) -> None:
    segs = client.create_stream(S, 2).active_segments
    txn = TransactionalEventWriter(client, S).begin_txn()
    write_all(txn, "t")
    client.scale_stream(S, [segs[1].name], [(0.5, 0.75), (0.75, 1.0)])
    txn.commit()  # rolled
    client.seal_stream(S)
    client.delete_stream(S)
    seg = client.create_stream(S).active_segments[0]
    _, b = client.scale_stream(S, [seg.name], [(0.0, 0.5), (0.5, 1.0)])
    client.scale_stream(S, [b.name], [(0.5, 0.6), (0.6, 1.0)])
    info = client.get_stream(S)
    replay = StreamController(client.store)
    replay._check()
    assert replay.get_stream(S) == info
