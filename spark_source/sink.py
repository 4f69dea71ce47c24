"""The ``ingestwm`` Spark sink: ``df.writeStream.format("ingestwm")`` (and batch ``df.write``).

Input columns: ``routing_key`` (string), ``payload`` (binary or string) and optionally
``event_time`` (timestamp, or bigint milliseconds); other columns are ignored. Each
input Arrow batch is framed in bulk (``frame_batch.encode_events``, one kernel call, no
Python object per row but its frame) and handed to the writer at once
(``write_encoded``).

- ``deliveryGuarantee=at-least-once`` (default): each task writes its rows with an
  ``EventWriter`` and flushes before it reports success, so a committed micro-batch is
  stored; a replayed micro-batch is written again.
- ``deliveryGuarantee=exactly-once``: each task writes into a stream transaction and
  reports its transaction segments; the driver's ``commit(messages, batchId)`` commits
  them, ``abort`` aborts them. The sink's state segment
  (``_system/spark_sink/<scope>/<name>/<sinkId>``) records the last committed batch id
  as an attribute and, before committing, a write-ahead record of the batch's
  transactions: a replayed batch id that was committed is aborted instead of written
  twice, and a commit interrupted by a crash is finished from its record (its
  transactions, not the replay's) when the batch is replayed.

Transactions of task attempts that failed or were never reported are aborted by the
store when their lease runs out (``StoreConfig.transaction_lease_ms``, ``ingestwm serve
--transaction-lease``), as Pravega's transaction timeout.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from readergroup.format.frame_batch import EncodedEvents, encode_events
from readergroup.writing.transaction import Transaction, TransactionalEventWriter
from readergroup.writing.writer import EventWriter, WriterConfig
from segmentstore.attributes import AttributeUpdate
from segmentstore.client import SegmentStoreClient
from segmentstore.errors import SegmentExistsError, SegmentNotFoundError

from .errors import SinkError
from .options import EXACTLY_ONCE, SinkOptions, parse_sink_options
from .reading import KIND_WATERMARK_NAME, connect

__all__ = [
    "TransactionMessage",
    "CountMessage",
    "IngestStreamWriter",
    "IngestBatchWriter",
    "SinkState",
    "sink_state_segment",
]

_WRITER_CONFIG = WriterConfig(max_batch_events=1 << 16, max_batch_bytes=1 << 20)
"""Appends of up to 1 MiB: each input batch's frames are encoded at once and appended per segment."""
_RECORD = struct.Struct("<I")


def _key(name: str) -> int:
    return (
        int.from_bytes(hashlib.sha256(b"spark_source.sink:" + name.encode()).digest()[:8], "big")
        & (2**62 - 1)
        | 2**62
    )


_LAST_COMMITTED = _key("last_committed_batch")
_LAST_RECORD = _key("last_record_offset")


@dataclass(frozen=True)
class TransactionMessage(WriterCommitMessage):
    """A task's open transaction: its stream, transaction segments and event count."""

    stream: str
    segments: tuple[str, ...]
    events: int


@dataclass(frozen=True)
class CountMessage(WriterCommitMessage):
    """A task's count of events written and flushed (at-least-once)."""

    events: int


def sink_state_segment(stream: str, sink_id: str) -> str:
    """The segment whose attributes and records hold an exactly-once sink's state."""
    return f"_system/spark_sink/{stream}/{sink_id}"


@dataclass(frozen=True, slots=True)
class _InputColumns:
    """Positions of the sink's input columns (``event_time`` and ``kind`` optional)."""

    key: int
    payload: int
    event_time: int | None
    kind: int | None


def _check_input(schema: Any) -> _InputColumns:
    """Positions of routing_key, payload, event_time and kind in the input schema; raises ``SinkError``."""
    names = [f.name for f in schema.fields]
    types = {f.name: f.dataType.typeName() for f in schema.fields}
    for col, allowed in (("routing_key", ("string",)), ("payload", ("binary", "string"))):
        if col not in names:
            raise SinkError(f"the ingestwm sink needs a column {col!r} ({' or '.join(allowed)}); got {names}")
        if types[col] not in allowed:
            raise SinkError(f"sink column {col!r} must be {' or '.join(allowed)}, got {types[col]}")
    et = None
    if "event_time" in names:
        if types["event_time"] not in ("timestamp", "timestamp_ntz", "long", "integer"):
            raise SinkError(
                f"sink column 'event_time' must be a timestamp or bigint ms, got {types['event_time']}"
            )
        et = names.index("event_time")
    kind = names.index("kind") if "kind" in names and types["kind"] == "string" else None
    return _InputColumns(names.index("routing_key"), names.index("payload"), et, kind)


_NULL_HINT = (
    "; every event needs a routing key and a payload (rows of the ingestwm source with kind = "
    "'watermark' are skipped by the sink when the input keeps the source's kind column, or read with "
    "emitWatermarkRows=false, or filter kind = 'event')"
)


def _encoded(batches: Iterator[pa.RecordBatch], cols: _InputColumns) -> Iterator[EncodedEvents]:
    """The frames of every input batch, encoded in bulk from its Arrow columns. O(bytes).

    Rows whose ``kind`` column is ``'watermark'`` (the ingestwm source's watermark rows,
    which carry no event) are skipped.
    """
    for batch in batches:
        if cols.kind is not None and batch.num_rows:
            keep = pc.fill_null(pc.not_equal(batch.column(cols.kind), KIND_WATERMARK_NAME), True)
            if not pc.all(keep).as_py():
                batch = batch.filter(keep)
        if not batch.num_rows:
            continue
        keys = batch.column(cols.key)
        if keys.null_count:
            raise SinkError(f"sink column 'routing_key' has a null value{_NULL_HINT}")
        payload_col = batch.column(cols.payload)
        if payload_col.null_count:
            raise SinkError(f"sink column 'payload' has a null value{_NULL_HINT}")
        times = None
        if cols.event_time is not None:
            tcol = batch.column(cols.event_time)
            if pa.types.is_timestamp(tcol.type):
                tcol = _floor_ms(tcol.cast(pa.timestamp("us", tz=tcol.type.tz)).cast(pa.int64()))
            times = tcol.cast(pa.int64())
        yield encode_events(keys, payload_col, times)


def _floor_ms(us: pa.Array) -> pa.Array:
    """Microseconds as the milliseconds they fall in (floor, as Spark's ``unix_millis``; nulls stay). O(n)."""
    q = pc.divide(us, 1000)  # truncates towards zero
    return pc.subtract(q, pc.less(pc.subtract(us, pc.multiply(q, 1000)), 0).cast(pa.int64()))


def _connect(options: SinkOptions) -> SegmentStoreClient:
    return connect(options.endpoint, options.timeout_ms, security=options.security)


def _probe(options: SinkOptions) -> None:
    """On the driver, when the query starts: a store that is down, or refuses the token or TLS, fails now."""
    options.security.probe(options.endpoint, connect_timeout_s=min(5.0, options.timeout_ms / 1000.0))


def _write(
    options: SinkOptions, cols: _InputColumns, batches: Iterator[pa.RecordBatch]
) -> WriterCommitMessage:
    client = _connect(options)
    try:
        n = 0
        if options.delivery_guarantee == EXACTLY_ONCE:
            txn: Transaction | None = None  # begun at the first row: an empty task commits nothing
            try:
                for events in _encoded(batches, cols):
                    if txn is None:
                        txn = TransactionalEventWriter(
                            client, options.stream, config=_WRITER_CONFIG
                        ).begin_txn()
                    txn.write_encoded(events)
                    n += len(events)
                if txn is None:
                    return CountMessage(0)
                txn.flush()
            except BaseException:
                if txn is not None:
                    with contextlib.suppress(Exception):
                        txn.abort()
                raise
            return TransactionMessage(options.stream, txn.info.segment_names, n)
        with EventWriter(client, options.stream, config=_WRITER_CONFIG) as writer:
            for events in _encoded(batches, cols):
                writer.write_encoded(events)
                n += len(events)
        return CountMessage(n)
    finally:
        client.close()


def _abort_all(client: SegmentStoreClient, messages: Sequence[WriterCommitMessage | None]) -> None:
    for m in messages:
        if isinstance(m, TransactionMessage):
            client.abort_transaction(m.stream, list(m.segments))


class SinkState:
    """An exactly-once sink's state in the store: last committed batch id and the write-ahead record."""

    def __init__(self, client: SegmentStoreClient, stream: str, sink_id: str) -> None:
        self._client = client
        self.segment = sink_state_segment(stream, sink_id)
        with contextlib.suppress(SegmentExistsError):
            client.create_segment(self.segment)

    def last_committed(self) -> int:
        """The last batch id committed (-1: none)."""
        return self._client.get_attributes(self.segment, [_LAST_COMMITTED]).get(_LAST_COMMITTED, -1)

    def pending(self) -> tuple[int, list[TransactionMessage]] | None:
        """The last write-ahead record ``(batch id, transactions)``, or None."""
        offset = self._client.get_attributes(self.segment, [_LAST_RECORD]).get(_LAST_RECORD)
        if offset is None:
            return None
        data = self._read(offset, _RECORD.size)
        (n,) = _RECORD.unpack_from(data, 0)
        obj = json.loads(self._read(offset + _RECORD.size, n))
        txns = [TransactionMessage(s, tuple(segs), 0) for s, segs in obj["txns"]]
        return int(obj["batch"]), txns

    def _read(self, offset: int, n: int) -> bytes:
        """Exactly ``n`` bytes of the state segment at ``offset`` (reads of at most 1 MiB each)."""
        out = bytearray()
        while len(out) < n:
            r = self._client.read(self.segment, offset + len(out), min(n - len(out), 1 << 20))
            if not r.data:
                raise SinkError(f"sink state {self.segment!r}: record at offset {offset} is cut short")
            out += r.data
        return bytes(out)

    def record(self, batch_id: int, txns: Sequence[TransactionMessage]) -> None:
        """Append the write-ahead record of ``batch_id``'s transactions."""
        body = json.dumps({"batch": batch_id, "txns": [[t.stream, list(t.segments)] for t in txns]}).encode()
        r = self._client.append(self.segment, _RECORD.pack(len(body)) + body)
        self._client.update_attributes(self.segment, [AttributeUpdate(_LAST_RECORD, r.offset)])

    def mark_committed(self, batch_id: int) -> None:
        self._client.update_attributes(self.segment, [AttributeUpdate(_LAST_COMMITTED, batch_id)])

    def commit(self, batch_id: int, messages: Sequence[WriterCommitMessage | None]) -> bool:
        """Commit ``batch_id``'s transactions once; False (and aborted) when it was committed already."""
        pending = self.pending()
        last = self.last_committed()
        if pending is not None and pending[0] > last and self._finish(*pending):
            last = pending[0]  # a commit interrupted by a crash, finished now
            self.mark_committed(last)
        if batch_id <= last:
            _abort_all(self._client, messages)
            return False
        txns = [m for m in messages if isinstance(m, TransactionMessage)]
        self.record(batch_id, txns)
        self._commit_txns(txns)
        self.mark_committed(batch_id)
        return True

    def _finish(self, batch_id: int, txns: Sequence[TransactionMessage]) -> bool:
        """Finish the commit of a recorded batch; False if none of its transactions was ever committed.

        Committing is idempotent (a transaction committed already answers as before); a
        transaction that is gone without having been committed was aborted, by its lease
        (``transaction_lease_ms``) while the driver was down: then the batch was never
        written and its replay writes it. Some committed and some aborted cannot be
        finished exactly once: ``SinkError``.
        """
        committed: list[str] = []
        aborted: list[str] = []
        for t in txns:
            try:
                self._client.commit_transaction(t.stream, list(t.segments))
                committed.append(t.segments[0])
            except SegmentNotFoundError:
                aborted.append(t.segments[0])
            except Exception as e:
                raise SinkError(
                    f"stream {t.stream!r}: finishing the commit of batch {batch_id}, transaction "
                    f"{t.segments[0]!r} failed: {e}"
                ) from e
        if aborted and committed:
            raise SinkError(
                f"sink state {self.segment!r}: batch {batch_id} was committed in part before a crash "
                f"({len(committed)} transactions, e.g. {committed[0]!r}) and the rest was aborted by the "
                f"transaction lease ({len(aborted)}, e.g. {aborted[0]!r}); it cannot be finished exactly once"
            )
        return not aborted

    def _commit_txns(self, txns: Sequence[TransactionMessage]) -> None:
        for t in txns:
            try:
                self._client.commit_transaction(t.stream, list(t.segments))
            except Exception as e:
                raise SinkError(
                    f"stream {t.stream!r}: commit of transaction {t.segments[0]!r} failed: {e}"
                ) from e


class IngestStreamWriter(DataSourceStreamArrowWriter):
    """Streaming sink: one writer per task; commit/abort per micro-batch on the driver."""

    def __init__(self, options: Mapping[str, str], schema: Any) -> None:
        self._options = parse_sink_options(options)
        self._cols = _check_input(schema)
        _probe(self._options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return _write(self._options, self._cols, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self._options.delivery_guarantee != EXACTLY_ONCE:
            return
        client = _connect(self._options)
        try:
            SinkState(client, self._options.stream, self._options.sink_id).commit(batchId, messages)
        finally:
            client.close()

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        client = _connect(self._options)
        try:
            _abort_all(client, messages)
        finally:
            client.close()


class IngestBatchWriter(DataSourceArrowWriter):
    """Batch sink (``df.write``): exactly-once commits every task's transaction at the end of the job."""

    def __init__(self, options: Mapping[str, str], schema: Any) -> None:
        self._options = parse_sink_options(options, streaming=False)
        self._cols = _check_input(schema)
        _probe(self._options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return _write(self._options, self._cols, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        client = _connect(self._options)
        try:
            for m in messages:
                if isinstance(m, TransactionMessage):
                    client.commit_transaction(m.stream, list(m.segments))
        finally:
            client.close()

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        client = _connect(self._options)
        try:
            _abort_all(client, messages)
        finally:
            client.close()
