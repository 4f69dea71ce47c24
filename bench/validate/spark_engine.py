"""Replay the lab's Spark micro-batches through real Spark Structured Streaming.

The lab's ``SparkStrategy`` records every micro-batch it ran (``SparkBatch``): its rows
in delivery order, or none for a no-data batch. Here the same rows go through a real
query: the ``ingestwm`` source over a served store, each input's rows
``withWatermark("event_time", delay)`` (inputs unioned, so Spark's
``multipleWatermarkPolicy`` picks the global watermark), ``dropDuplicates`` on the
event (writer, sequence number, event time: Spark's event-level late filter, and the
lab's de-duplication), then tumbling ``window`` counts in append mode.

Batch boundaries are the lab's: the replay appends one batch's rows to the one
segment of a stream in a single append (atomic: Spark's source sees all of it or none)
and waits for the query to process it before the next. A no-data batch is replayed as
one tick row, filtered out before ``withWatermark``; Spark's own no-data batches are
switched off (``spark.sql.streaming.noDataMicroBatches.enabled``) so that Spark runs a
batch exactly when the lab's trigger did. Each input's rows carry the input's label
as routing key and are split with a filter before their ``withWatermark``; inputs
therefore share one source (one offset per batch).

What is read back is Spark's own: the progress report of every batch
(``eventTime.watermark``, each state operator's ``numRowsDroppedByWatermark``,
``numInputRows``) and the windows a memory sink received, attributed to batches by
each batch's ``sink.numOutputRows``. O(batches) Spark batches, ~0.3-3 s each on two
shared cores: a few minutes for all shipped scenarios.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any

from readergroup.format.events import encode_event
from segmentstore import ManualClock, SegmentStore, StoreConfig
from segmentstore.client import EmbeddedClient
from segmentstore.net.server import SegmentStoreServer

from ..lab.spark_model import SparkBatch
from .errors import EngineRunError, EngineUnavailableError

__all__ = ["SparkReplay", "SparkEngineBatch", "spark_available", "replay_spark", "TICK_KEY"]

TICK_KEY = "~tick"
"""Routing key of the row that stands for a no-data batch (dropped before ``withWatermark``)."""
_STREAM = "validate/spark"
_QUERY_IDS = itertools.count()
_CONF: dict[str, str | None] = {  # set for the replay's query, restored after it (None: the policy)
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    "spark.sql.streaming.multipleWatermarkPolicy": None,
    "spark.sql.shuffle.partitions": "1",
    "fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",  # the checkpoint's file system
    "fs.file.impl.disable.cache": "true",
}
"""The two ``fs.file`` keys say how the replay's checkpoint is written on the local disk, not
what is in it: Hadoop's default ``file:`` file system writes a ``.crc`` file beside each file,
and without Hadoop's native library it sets each new file's permissions by forking a ``chmod``
(a few files per batch: the offset and commit logs, each state operator's delta). The raw one
writes no ``.crc``: half the forks. ``disable.cache`` makes the replay's query and its state
stores (which read a Hadoop configuration of the session's settings) a file system of their
own, not the session's cached checksummed one. Every shipped scenario replayed once in one
session: 207 CPU s instead of 219 (the lab's runs and the JVM's start included); every number
Spark reports is the same."""
_CHECKPOINT_MANAGER_KEY = "spark.sql.streaming.checkpointFileManagerClass"
_CHECKPOINT_MANAGERS = (  # Spark's FileSystem-based one: its package since 4.1, then before
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
    "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager",
)
"""How the replay's checkpoint (offset and commit logs, state store files) is written, not what is
in it: Spark's default manager renames through Hadoop's FileContext, which on a local disk without
Hadoop's native library forks a ``readlink`` process for the file statuses it takes around each
rename (a few files per batch); the FileSystem-based one renames with ``File.renameTo``. ~0.2 s
less per batch on two shared cores; every number Spark reports is the same."""


@dataclass(frozen=True, slots=True)
class SparkEngineBatch:
    """What Spark reported for one replayed batch."""

    batch_id: int
    input_rows: int
    watermark: int  # the batch's eventTime.watermark (ms)
    dropped: tuple[int, ...]  # numRowsDroppedByWatermark per state operator, in plan order
    operators: tuple[str, ...]
    fired: tuple[tuple[int, int], ...]  # (window start, count) the sink received


@dataclass(frozen=True, slots=True)
class SparkReplay:
    """A replay's outcome: one ``SparkEngineBatch`` per model batch, in order, and Spark's version."""

    batches: tuple[SparkEngineBatch, ...]
    version: str
    inputs: tuple[str, ...]

    @property
    def late(self) -> int:
        """Rows the de-duplication dropped by watermark (the first state operator)."""
        return sum(b.dropped[0] for b in self.batches if b.dropped)

    @property
    def window_dropped(self) -> int:
        """Rows the window aggregation dropped by watermark (0 when only late rows are late)."""
        return sum(sum(b.dropped[1:]) for b in self.batches)

    @property
    def fired(self) -> list[tuple[int, int]]:
        return [f for b in self.batches for f in b.fired]


def spark_available() -> str | None:
    """None if PySpark and Java are here, else why not."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "PySpark is not installed (pip install pyspark)"
    if shutil.which("java") is None and not _java_home():
        return "no Java runtime (java on PATH or JAVA_HOME) for Spark"
    return None


def _java_home() -> bool:
    import os

    home = os.environ.get("JAVA_HOME")
    return bool(home) and shutil.which("java", path=f"{home}/bin") is not None


def _ms(text: str) -> int:
    t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return round(t.timestamp() * 1000)


def _frames(batch: SparkBatch, labels: dict[str, str]) -> bytes:
    if not batch.rows:
        return encode_event(TICK_KEY, b"", None)
    return b"".join(
        encode_event(labels[inp], writer.to_bytes(4, "little") + seq.to_bytes(4, "little"), et)
        for inp, writer, seq, et in batch.rows
    )


def _query(session: Any, endpoint: str, labels: Sequence[str], delay_ms: int, window_ms: int) -> Any:
    from pyspark.sql import functions as F

    src = (
        session.readStream.format("ingestwm")
        .option("endpoint", endpoint)
        .option("stream", _STREAM)
        .option("startingPosition", "earliest")
        .option("emitWatermarkRows", "false")
        .load()
        .where(f"kind = 'event' AND routing_key <> '{TICK_KEY}'")
        .select("routing_key", "payload", "event_time")
    )
    delay = f"{delay_ms} milliseconds"
    if len(labels) == 1:
        marked = src.withWatermark("event_time", delay)
    else:  # one withWatermark per input: Spark's global watermark is the policy over them
        parts = [src.where(F.col("routing_key") == lab).withWatermark("event_time", delay) for lab in labels]
        marked = reduce(lambda a, b: a.unionByName(b), parts)
    return (
        marked.dropDuplicates(["payload", "event_time"])
        .groupBy(F.window("event_time", f"{window_ms} milliseconds"))
        .count()
    )


def replay_spark(
    spark: Any,
    batches: Sequence[SparkBatch],
    inputs: Sequence[str],
    *,
    delay_ms: int,
    window_ms: int,
    policy: str,
    start_time_ms: int,
) -> SparkReplay:
    """Run ``batches`` through a Spark query (see the module doc); one Spark batch per model batch.

    ``spark`` is a SparkSession with ``format("ingestwm")`` registered; the replay sets
    the settings it needs (``_CONF``) and restores them after. Raises ``EngineRunError`` if Spark did
    not run exactly one batch per append. O(batches) Spark batches (~0.1-0.3 s each).
    """
    import pyspark

    labels = {inp: f"in{i}" for i, inp in enumerate(inputs)} or {"": "in0"}
    session = spark
    conf = {k: policy if v is None else v for k, v in _CONF.items()}
    manager = _checkpoint_manager(session)
    if manager is not None:
        conf[_CHECKPOINT_MANAGER_KEY] = manager
    saved = {k: session.conf.get(k, None) for k in conf}
    for k, v in conf.items():
        session.conf.set(k, v)
    store = SegmentStore(clock=ManualClock(start_time_ms), config=StoreConfig())
    server = SegmentStoreServer(store)
    server.start()
    checkpoint = tempfile.mkdtemp(prefix="ingestwm-validate-spark-")
    table = f"ingestwm_validate_{next(_QUERY_IDS)}"
    query = None
    try:
        client = EmbeddedClient(store)
        client.create_stream(_STREAM, 1)
        segment = client.get_stream(_STREAM).active_segments[0].name
        df = _query(session, f"127.0.0.1:{server.port}", sorted(labels.values()), delay_ms, window_ms)
        query = (
            df.selectExpr("unix_millis(window.start) AS s", "count")
            .writeStream.outputMode("append")
            .format("memory")
            .queryName(table)
            .option("checkpointLocation", checkpoint)
            .start()
        )
        query.processAllAvailable()
        base = _last_batch(query)
        progress: list[tuple[int, dict[str, Any], list[dict[str, Any]]]] = []
        for i, b in enumerate(batches):
            client.append(segment, _frames(b, labels))
            query.processAllAvailable()
            prog = query.lastProgress
            want = base + 1 + i
            if prog is None or prog["batchId"] != want:
                got = None if prog is None else prog["batchId"]
                raise EngineRunError(
                    f"Spark replay lost alignment at model batch {b.index} (t={b.t_ms} ms): expected "
                    f"Spark batch {want}, last progress is batch {got}"
                )
            ops = sorted(prog.get("stateOperators") or [], key=lambda o: o.get("operatorName") != "dedupe")
            progress.append((want, prog, ops))
        query.stop()
        emitted = [(int(r["s"]), int(r["count"])) for r in session.table(table).collect()]
        out: list[SparkEngineBatch] = []
        at = 0
        for want, prog, ops in progress:
            n = int((prog.get("sink") or {}).get("numOutputRows", 0))
            out.append(
                SparkEngineBatch(
                    batch_id=want,
                    input_rows=int(prog["numInputRows"]),
                    watermark=_ms(prog["eventTime"]["watermark"]) if "watermark" in prog["eventTime"] else 0,
                    dropped=tuple(int(o.get("numRowsDroppedByWatermark", 0)) for o in ops),
                    operators=tuple(str(o.get("operatorName", "?")) for o in ops),
                    fired=tuple(emitted[at : at + n]),
                )
            )
            at += n
        if at != len(emitted):
            raise EngineRunError(f"Spark's sink holds {len(emitted)} windows, its progress reports {at}")
        return SparkReplay(tuple(out), pyspark.__version__, tuple(labels))
    except EngineRunError:
        raise
    except Exception:  # a failed query: Spark's message, not a py4j traceback
        if query is not None and query.exception() is not None:
            raise EngineRunError(f"the Spark query failed: {query.exception()}") from None
        raise
    finally:
        if query is not None:
            query.stop()
        with contextlib.suppress(Exception):
            session.catalog.dropTempView(table)
        server.stop()
        store.close()
        shutil.rmtree(checkpoint, ignore_errors=True)
        for k, old in saved.items():
            if old is None:
                session.conf.unset(k)
            else:
                session.conf.set(k, old)


def _checkpoint_manager(session: Any) -> str | None:
    """The first of ``_CHECKPOINT_MANAGERS`` this Spark has, unless the session names a manager itself."""
    if session.conf.get(_CHECKPOINT_MANAGER_KEY, None):
        return None
    utils = session.sparkContext._jvm.org.apache.spark.util.Utils
    return next((c for c in _CHECKPOINT_MANAGERS if utils.classIsLoadable(c)), None)


def _last_batch(query: Any) -> int:
    prog = query.lastProgress
    return -1 if prog is None else int(prog["batchId"])


def ensure_spark() -> None:
    """Raise ``EngineUnavailableError`` if Spark cannot run here."""
    why = spark_available()
    if why is not None:
        raise EngineUnavailableError(why)
