"""Event-time helpers on the source's watermark: reordering and per-key tumbling windows.

Both take a DataFrame of the ``ingestwm`` source, apply
``withWatermark("event_time_watermark", "0 seconds")`` (so Spark's event-time
watermark follows the store's ingestion watermark minus ``maxEventTimeLag`` exactly:
the column is global and never decreases), keep the ``kind = 'event'`` rows, and run a
keyed ``applyInPandasWithState`` with event-time timeouts:

- an event whose event time is ``<=`` Spark's current watermark when it arrives is
  *late* (docs/design.md §1); so is an event without an event time. Late rows come out at
  once with ``late = true`` (``late="flag"``) or are dropped (``late="drop"``); either
  way they are counted in the query's observed metrics (``late_rows(query)``);
- ``reorder_by_event_time`` buffers on-time events per key and releases them in
  event-time order (ties in delivery order: ingestion time, then offset) once the
  watermark reaches them: Flink's ``EventTimeOrderingOperator``;
- ``events_only`` keeps the event rows without stopping the watermark (a plain
  ``filter`` after ``withWatermark`` is pushed below it and drops the watermark rows);
- ``event_time_windows`` counts (and sums/min/maxes a numeric column) per key in
  tumbling windows ``[start, start + size)``, emitted once the watermark reaches
  ``start + size - 1``, as Flink fires them.

Times cross into pandas as int64 milliseconds (``unix_millis``), so the session time
zone does not matter. State is Arrow IPC (reordering) or JSON (windows), never pickle.
Each ``watermark`` column of the output is Spark's event-time watermark when the row
was emitted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pyarrow as pa

from .errors import InvalidOptionError
from .options import parse_duration_ms

__all__ = [
    "LATE_METRICS",
    "with_event_time_watermark",
    "events_only",
    "reorder_by_event_time",
    "event_time_windows",
    "late_rows",
]

LATE_METRICS = "ingestwm_late"
_LATE_MODES = ("flag", "drop")
_EVENT_COLS = ["stream", "segment", "offset", "key", "payload", "et", "it"]
_REORDER_OUT = (
    "stream string, segment string, offset long, key string, payload binary, et long, it long, "
    "late boolean, wm long"
)
_WINDOW_OUT = (
    "key string, start long, end long, count long, value_sum double, value_min double, value_max double, "
    "late boolean, et long, offset long, wm long"
)


def with_event_time_watermark(df: Any) -> Any:
    """``df.withWatermark("event_time_watermark", "0 seconds")``: Spark's watermark follows the source's."""
    return df.withWatermark("event_time_watermark", "0 seconds")


def events_only(df: Any) -> Any:
    """The ``kind = 'event'`` rows, filtered *above* ``withWatermark`` so watermark rows still move it.

    Spark pushes a filter that does not reference the watermark column below
    ``withWatermark``; a plain ``filter(kind = 'event')`` would then drop the watermark
    rows before Spark sees them, and an idle stream's watermark would stop. The condition
    here also names ``event_time_watermark`` (never null), which keeps the filter above.
    """
    from pyspark.sql import functions as F

    return df.filter((F.col("kind") == "event") | F.col("event_time_watermark").isNull())


def _events(df: Any, key: str, value: str | None) -> Any:
    from pyspark.sql import functions as F

    for col in (key, value):
        if col is not None and col not in df.columns:
            raise InvalidOptionError(f"column {col!r} is not in the DataFrame ({', '.join(df.columns)})")
    cols = [
        F.col("stream"),
        F.col("segment"),
        F.col("offset"),
        F.col(key).cast("string").alias("key"),
        F.col("payload"),
        F.unix_millis("event_time").alias("et"),
        F.unix_millis("ingestion_time").alias("it"),
        F.col("event_time_watermark"),
        (F.col("kind") == "event").alias("is_event"),
    ]
    if value is not None:
        cols.append(F.col(value).cast("double").alias("value"))
    # Watermark rows must reach the watermark operator: a filter on kind here would be pushed
    # below withWatermark by the optimizer, so they go on to the stateful function, which skips them.
    return with_event_time_watermark(df).select(*cols)


def _check_late(late: str) -> None:
    if late not in _LATE_MODES:
        raise InvalidOptionError(f"late must be one of {_LATE_MODES}, got {late!r}")


def _finish(out: Any, late: str, metrics: str | None) -> Any:
    from pyspark.sql import functions as F

    if metrics:
        out = out.observe(metrics, F.count(F.when(F.col("late"), 1)).alias("late_rows"))
    if late == "drop":
        out = out.filter(~F.col("late"))
    return out


def reorder_by_event_time(
    df: Any, *, key: str = "routing_key", late: str = "flag", metrics: str | None = LATE_METRICS
) -> Any:
    """Events of each ``key`` in event-time order, released by the watermark; late ones flagged or dropped.

    Output: ``stream, segment, offset, routing_key, payload, event_time, ingestion_time,
    late, watermark``. State per key: the buffered events. O(buffer) per key and batch.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    _check_late(late)
    out = (
        _events(df, key, None)
        .groupBy("key")
        .applyInPandasWithState(
            _reorder_group, _REORDER_OUT, "buf binary", "append", GroupStateTimeout.EventTimeTimeout
        )
        .select(
            "stream",
            "segment",
            "offset",
            F.col("key").alias("routing_key"),
            "payload",
            F.timestamp_millis("et").alias("event_time"),
            F.timestamp_millis("it").alias("ingestion_time"),
            "late",
            F.timestamp_millis("wm").alias("watermark"),
        )
    )
    return _finish(out, late, metrics)


def event_time_windows(
    df: Any,
    size: str | int,
    *,
    key: str = "routing_key",
    value: str | None = None,
    late: str = "flag",
    metrics: str | None = LATE_METRICS,
) -> Any:
    """Tumbling event-time windows per ``key`` (count; sum/min/max of ``value``); late rows flagged/dropped.

    Output: ``key, window_start, window_end, count, value_sum, value_min, value_max,
    late, event_time, offset, watermark``; a window row has ``late = false`` and null
    ``event_time``; a late row has ``count = 1`` and the window it missed. O(windows) state per key.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    _check_late(late)
    size_ms = parse_duration_ms(size, "size")
    if size_ms <= 0:
        raise InvalidOptionError(f"window size must be > 0, got {size!r}")
    events = _events(df, key, value)
    if value is None:
        events = events.withColumn("value", F.lit(None).cast("double"))

    def fn(k: tuple[Any, ...], pdfs: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        return _window_group(size_ms, k, pdfs, state)

    out = (
        events.groupBy("key")
        .applyInPandasWithState(
            fn, _WINDOW_OUT, "windows string", "append", GroupStateTimeout.EventTimeTimeout
        )
        .select(
            "key",
            F.timestamp_millis("start").alias("window_start"),
            F.timestamp_millis("end").alias("window_end"),
            "count",
            "value_sum",
            "value_min",
            "value_max",
            "late",
            F.timestamp_millis("et").alias("event_time"),
            "offset",
            F.timestamp_millis("wm").alias("watermark"),
        )
    )
    return _finish(out, late, metrics)


def late_rows(query: Any, metrics: str = LATE_METRICS) -> int:
    """Late rows counted so far: over a query's recent progress reports, or a list of them."""
    total = 0
    for p in query if isinstance(query, list) else query.recentProgress:
        observed = (p.get("observedMetrics") if isinstance(p, dict) else p.observedMetrics) or {}
        row = observed.get(metrics)
        if row is not None:
            total += int(row["late_rows"] or 0)
    return total


# ---------------------------------------------------------------------- pandas side (executors)
def _concat(pdfs: Iterator[pd.DataFrame]) -> pd.DataFrame | None:
    """The group's event rows (watermark rows dropped), or None."""
    frames = [p[p["is_event"].fillna(False).astype(bool)] for p in pdfs]
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else None


def _late_mask(batch: pd.DataFrame, wm: int) -> Any:
    return batch["et"].isna() | (batch["et"].fillna(0) <= wm)


def _set_timeout(state: Any, at_ms: int, wm: int) -> None:
    state.setTimeoutTimestamp(max(at_ms, wm, 1))


def _reorder_group(key: tuple[Any, ...], pdfs: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
    wm = int(state.getCurrentWatermarkMs())
    buf = _load_frame(state.get[0]) if state.exists else pd.DataFrame(columns=_EVENT_COLS)
    out: list[pd.DataFrame] = []
    new = _concat(pdfs)
    if new is not None:
        new = new[_EVENT_COLS]
        late = _late_mask(new, wm)
        if late.any():
            out.append(new[late].assign(late=True, wm=wm))
        buf = pd.concat([buf, new[~late]], ignore_index=True) if len(buf) else new[~late]
    if len(buf):
        buf = buf.sort_values(["et", "it", "offset"], kind="stable")
        ready = buf["et"] <= wm
        if ready.any():
            out.append(buf[ready].assign(late=False, wm=wm))
            buf = buf[~ready]
    if len(buf):
        state.update((_dump_frame(buf),))
        _set_timeout(state, int(buf["et"].min()) - 1, wm)
    elif state.exists:
        state.remove()
    if out:
        result = pd.concat(out, ignore_index=True)
        result["et"] = result["et"].astype("Int64")
        yield result[[*_EVENT_COLS, "late", "wm"]]


def _window_group(
    size_ms: int, key: tuple[Any, ...], pdfs: Iterator[pd.DataFrame], state: Any
) -> Iterator[pd.DataFrame]:
    wm = int(state.getCurrentWatermarkMs())
    windows: dict[str, list[Any]] = json.loads(state.get[0]) if state.exists else {}
    rows: list[dict[str, Any]] = []
    k = key[0]
    new = _concat(pdfs)
    if new is not None:
        late = _late_mask(new, wm)
        for r in new[late].itertuples(index=False):
            missed = None if pd.isna(r.et) else int(r.et) // size_ms * size_ms
            rows.append(
                _window_row(k, missed, size_ms, [1, r.value, r.value, r.value], True, r.et, r.offset, wm)
            )
        on_time = new[~late]
        if len(on_time):
            starts = on_time["et"].astype("int64") // size_ms * size_ms
            for first, g in on_time.groupby(starts):
                _add(windows, str(int(first)), g["value"])
    for name in sorted(windows, key=int):
        if int(name) + size_ms - 1 <= wm:
            rows.append(_window_row(k, int(name), size_ms, windows.pop(name), False, None, None, wm))
    if windows:
        state.update((json.dumps(windows),))
        _set_timeout(state, min(int(s) for s in windows) + size_ms - 2, wm)
    elif state.exists:
        state.remove()
    if rows:
        frame = pd.DataFrame(rows)
        for col in ("start", "end", "et", "offset"):
            frame[col] = frame[col].astype("Int64")
        yield frame


def _add(windows: dict[str, list[Any]], start: str, values: pd.Series) -> None:
    """Fold ``values`` into the window's ``[count, sum, min, max]``."""
    v = values.dropna()
    acc: list[Any] = windows.get(start, [0, None, None, None])
    acc[0] += len(values)
    if len(v):
        acc[1] = float(v.sum()) + (acc[1] or 0.0)
        acc[2] = float(v.min()) if acc[2] is None else min(acc[2], float(v.min()))
        acc[3] = float(v.max()) if acc[3] is None else max(acc[3], float(v.max()))
    windows[start] = acc


def _window_row(
    key: Any, start: int | None, size_ms: int, acc: list[Any], late: bool, et: Any, offset: Any, wm: int
) -> dict[str, Any]:
    def num(x: Any) -> float | None:
        return None if x is None or pd.isna(x) else float(x)

    return {
        "key": key,
        "start": start,
        "end": None if start is None else start + size_ms,
        "count": int(acc[0]),
        "value_sum": num(acc[1]),
        "value_min": num(acc[2]),
        "value_max": num(acc[3]),
        "late": late,
        "et": None if et is None or pd.isna(et) else int(et),
        "offset": None if offset is None or pd.isna(offset) else int(offset),
        "wm": wm,
    }


def _dump_frame(frame: pd.DataFrame) -> bytes:
    table = pa.Table.from_pandas(frame.reset_index(drop=True), preserve_index=False)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _load_frame(data: bytes) -> pd.DataFrame:
    with pa.ipc.open_stream(pa.py_buffer(data)) as reader:
        frame: pd.DataFrame = reader.read_all().to_pandas()
    return frame
