"""Transactions: events written to a stream all at once, or not at all.

``TransactionalEventWriter.begin_txn()`` creates one transaction segment per segment
active at that moment (the transaction's epoch) and routes events by key over those
segments' ranges. Nothing is visible to readers until ``commit()``: then the
controller seals each transaction segment and merges it into its parent; a merge
is one temporal operation, so the merged events take the merge's ingestion time.
``abort()`` deletes the transaction segments.

If the stream scaled after the transaction began (a parent is sealed), ``commit()``
is handled as Pravega does (a *rolling* transaction): the controller seals the active
segments, creates duplicates of the transaction's epoch (same key ranges) that take
the transaction's events, seals those and creates duplicates of the previous active
ranges. Readers see the committed events after every event written before the
commit; per-routing-key order holds because a key maps to one segment in every epoch.
Committing on a sealed stream raises ``StreamSealedError``; abort the transaction.

Appends into transaction segments go through the ``EventWriter``'s machinery
(``appender``): ``write_event`` returns a ``WriteFuture`` at once, one append is in
flight per transaction segment, and appends carry the writer id and event numbers, so
resends after transient errors never duplicate. ``commit()`` flushes first; ``abort()``
fails the futures of the events not yet acknowledged.

Producer watermarks: ``Transaction.note_time(t)`` / ``mark_idle()`` put a marker into
every transaction segment, after the events written so far. The markers reach the
stream with the commit's merge, so they take effect only if the transaction commits,
and after its events; an aborted transaction's markers vanish with its segments.
"""

from __future__ import annotations

import enum

from segmentstore import Clock, TransactionInfo
from segmentstore.checks import checked
from segmentstore.client import SegmentStoreClient

from ..errors import InvalidEventError, TransactionClosedError, TransactionError, WriterClosedError
from ..format.frame_batch import EncodedEvents
from ..format.keyed_framing import KeyedFramer
from ..format.producer_watermarks import (
    BROADCAST,
    check_asserted_time,
    encode_idle_marker,
    encode_watermark_marker,
)
from ..format.routing import RoutingTable
from .appender import AppendEngine
from .write_future import Block, Settled, WriteFuture
from .writer import (
    WriterConfig,
    check_ingestwm_framing,
    check_writer_id,
    frame_hash,
    new_writer_id,
    split_by_segment,
)

__all__ = ["TransactionStatus", "Transaction", "TransactionalEventWriter"]


class TransactionStatus(enum.Enum):
    """Where a transaction is in its life."""

    OPEN = "open"
    COMMITTED = "committed"
    ABORTED = "aborted"


class Transaction:
    """An open transaction: ``write_event``, ``flush``, then ``commit`` or ``abort``. Thread-safe."""

    def __init__(
        self,
        client: SegmentStoreClient,
        info: TransactionInfo,
        writer_id: int,
        config: WriterConfig,
    ) -> None:
        self._client = client
        self._info = info
        self._config = config
        self._table = RoutingTable(t.parent for t in info.segments)
        self._txn_of = {t.parent.name: t.name for t in info.segments}
        # no reroute: a seal fails the events
        self._engine = AppendEngine(client, writer_id, config, on_fork=self._fork_id)
        self._framer = KeyedFramer()
        for t in info.segments:
            self._engine.appender(t.name, 0)  # a new transaction segment holds no events
        self._status = TransactionStatus.OPEN
        self._ending = False  # a commit is flushing: no more writes
        self._writer_id = writer_id
        self._forked = False  # used in a process forked from the one that began it: refused

    @property
    def info(self) -> TransactionInfo:
        """The stream, the epoch the transaction began in, and its segments."""
        return self._info

    @property
    def id(self) -> str:
        """The transaction's identity: the name of its first transaction segment."""
        return self._info.segments[0].name

    @property
    def status(self) -> TransactionStatus:
        return self._status

    def write_event(
        self, routing_key: str, payload: bytes | bytearray | memoryview, event_time: int | None = None
    ) -> WriteFuture:
        """Queue one event for the transaction segment of its key's range; returns its future at once."""
        frame, h = self._framer.frame(routing_key, payload, event_time)
        return self._add(frame, self._txn_of[self._table.segment_for_hash(h).name])

    def write_encoded(self, events: EncodedEvents) -> None:
        """Queue events framed in bulk (``frame_batch.encode_events``), as ``write_event`` each, in order.

        No futures: a failure is raised by ``flush``/``commit`` (``sync``: by this call). One
        routing-table lookup per distinct key. O(events), ~0.1 µs each.
        """
        if not len(events):
            return
        frames = events.frames()
        eng = self._engine
        eng.check_fork()
        while True:
            with eng.lock:
                self._check_open("write to")
                if not eng.unacked or eng.unacked + len(events.data) <= self._config.max_bytes_in_flight:
                    parents = [self._table.segment_for_hash(h) for h in events.key_hashes.tolist()]
                    filled: list[Block] = []
                    sends = []
                    for parent, picked in split_by_segment(parents, events.key_index):
                        app = eng.appenders[self._txn_of[parent.name]]
                        blocks, send = eng.add_many(
                            app, frames if picked is None else [frames[i] for i in picked]
                        )
                        filled += blocks
                        if send is not None:
                            sends.append((app, send))
                    break
            eng.make_room(len(events.data))
        eng.dispatch_many(sends, filled, self._config.sync)

    def note_time(self, t: int) -> None:
        """Assert every later event of the writer has event time ``>= t``, effective at commit only."""
        t = check_asserted_time(t, self._writer_id)
        self._marker(encode_watermark_marker(self._writer_id, t))

    def mark_idle(self) -> None:
        """Take the writer out of the active set when (and only if) the transaction commits."""
        self._marker(encode_idle_marker(self._writer_id))

    def _marker(self, frame: bytes) -> None:
        for name in self._txn_of.values():  # after the events written so far, in each segment
            self._add(frame, name)

    def _add(self, frame: bytes, segment: str) -> WriteFuture:
        eng = self._engine
        eng.check_fork()
        sync = self._config.sync
        while True:
            with eng.lock:
                self._check_open("write to")
                if not eng.unacked or eng.unacked + len(frame) <= self._config.max_bytes_in_flight:
                    app = eng.appenders[segment]
                    fut, send = eng.add(app, frame)
                    break
            eng.make_room(len(frame))
        if send is None and not eng.work and not sync:
            return fut  # nothing to send or do now (the common case in a loop)
        return eng.dispatch(app, send, fut, sync)

    def flush(self) -> None:
        """Append everything buffered to the transaction segments (still invisible to readers) and wait."""
        self._engine.check_fork()
        with self._engine.lock:
            self._check_open("flush")
        self._engine.flush()

    def ping(self) -> None:
        """Renew the transaction's lease (``StoreConfig.transaction_lease_ms``) on every segment.

        Writes renew the lease of the segments they go to; a transaction open longer
        than the lease, with segments it does not write to, pings (Pravega's
        ``pingTransaction``). Raises ``SegmentNotFoundError`` if it expired already.
        """
        self._engine.check_fork()
        with self._engine.lock:
            self._check_open("ping")
        for name in self._txn_of.values():
            self._client.update_attributes(name, [])

    def commit(self) -> None:
        """Flush, then make every event visible at once (see the module docstring for scaled streams)."""
        eng = self._engine
        eng.check_fork()
        with eng.lock:
            self._check_open("commit")
            self._ending = True
        try:
            eng.flush()
            self._client.commit_transaction(self._info.stream, list(self._txn_of.values()))
        except BaseException:
            with eng.lock:
                self._ending = False
            raise
        with eng.lock:
            self._status = TransactionStatus.COMMITTED
        eng.close()

    def abort(self) -> None:
        """Drop every event of the transaction (their futures fail). Idempotent once aborted."""
        eng = self._engine
        eng.check_fork()
        with eng.lock:
            if self._status is TransactionStatus.ABORTED:
                return
            self._check_open("abort")
        self._client.abort_transaction(self._info.stream, list(self._txn_of.values()))
        cbs: list[Settled] = []
        with eng.lock:
            gone = TransactionClosedError(f"transaction {self.id!r} of {self._info.stream!r} was aborted")
            for app in eng.appenders.values():
                if app.unsent:
                    cbs += eng.fail_appender(app, gone)
            eng.error = None
            self._status = TransactionStatus.ABORTED
            self._ending = False
        eng.run_callbacks(cbs)
        eng.close()

    def _fork_id(self) -> int:
        """(in a forked child, once) The transaction stays with the process that began it."""
        self._forked = True
        return self._writer_id

    def _check_open(self, what: str) -> None:
        if self._forked:
            raise TransactionError(
                f"cannot {what} transaction {self.id!r} of stream {self._info.stream!r} in this process: "
                "it was begun in the process this one forked from, which writes, commits or aborts it "
                "(one writer id in two processes drops events as duplicates)"
            )
        if self._status is not TransactionStatus.OPEN or (self._ending and what != "abort"):
            state = self._status.value if self._status is not TransactionStatus.OPEN else "committing"
            raise TransactionClosedError(
                f"cannot {what} transaction {self.id!r} of stream {self._info.stream!r}: it is {state}"
            )

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        """Commit on success, abort on an exception (if still open)."""
        if self._status is not TransactionStatus.OPEN:
            return
        if exc_type is None:
            self.commit()
        else:
            try:
                self.abort()
            except Exception as e:  # keep the original exception
                raise TransactionError(f"abort of transaction {self.id!r} failed: {e}") from e

    @checked
    def _check(self) -> None:
        """Assert the routing covers [0, 1), the engine's accounting, and events route to their segment."""
        with self._engine.lock:
            self._table._check()
            self._engine._check()
            for name, app in self._engine.appenders.items():
                for b in app.all_blocks():
                    for f in b.frames:
                        h = frame_hash(f)
                        assert h == BROADCAST or self._txn_of[self._table.segment_for_hash(h).name] == name


class TransactionalEventWriter:
    """Begins transactions on one stream for one writer id."""

    def __init__(
        self,
        client: SegmentStoreClient,
        stream: str,
        writer_id: int | None = None,
        clock: Clock | None = None,
        config: WriterConfig | None = None,
    ) -> None:
        self._config = config if config is not None else WriterConfig()
        if not isinstance(self._config, WriterConfig):
            raise InvalidEventError(f"config must be a WriterConfig, got {config!r}")
        self._client = client
        self._stream = stream
        self._clock = clock
        self.writer_id = new_writer_id() if writer_id is None else check_writer_id(writer_id)
        self._closed = False
        check_ingestwm_framing(client.get_stream(stream))  # fail early on a missing or Pravega stream

    def begin_txn(self) -> Transaction:
        """A new open transaction over the stream's current segments."""
        if self._closed:
            raise WriterClosedError(f"transactional writer {self.writer_id} of {self._stream!r} is closed")
        info = self._client.begin_transaction(self._stream)
        return Transaction(self._client, info, self.writer_id, self._config)

    def close(self) -> None:
        """No further ``begin_txn``; open transactions stay usable."""
        self._closed = True

    def __enter__(self) -> TransactionalEventWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
