"""``write_encoded``: events framed in bulk, each key's events in order and once, across scaling."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from readergroup import EventWriter, WriterClosedError, WriterConfig, decode_frames
from readergroup.format.frame_batch import encode_events
from readergroup.writing.transaction import TransactionalEventWriter
from segmentstore import ManualClock, SegmentStore
from segmentstore.client import EmbeddedClient, SegmentStoreClient

Row = tuple[str, bytes, int | None]

rows_st = st.lists(
    st.tuples(st.sampled_from(["a", "b", "ç", "", "key-4", "key-5"]), st.binary(max_size=20), st.none()),
    max_size=30,
)
ops_st = st.lists(st.one_of(rows_st, st.sampled_from(["split", "merge", "flush"])), max_size=12)


def encoded(rows: list[Row]) -> Any:
    return encode_events(
        pa.array([r[0] for r in rows], pa.string()),
        pa.array([r[1] for r in rows], pa.binary()),
        pa.array([r[2] for r in rows], pa.int64()),
    )


def contents(client: SegmentStoreClient, stream: str) -> dict[str, list[tuple[str, bytes, int | None]]]:
    """Every segment's events (sealed ones too), by segment name without the stream."""
    out = {}
    todo = [s.name for s in client.get_stream(stream).active_segments]
    todo += list(client.get_head_cut(stream).as_dict())
    while todo:
        seg = todo.pop()
        if seg.split("/", 2)[-1] in out:
            continue
        data = client.read(seg, 0, client.get_info(seg).length).data
        frames, _ = decode_frames(data)
        out[seg.split("/", 2)[-1]] = [(f.routing_key, f.payload, f.event_time) for f in frames if f.is_event]
        todo += [s.segment.name for s in client.get_successors(seg)]
    return out


def by_key(segments: dict[str, list[Row]]) -> dict[str, list[Row]]:
    """Each key's events in the order a reader delivers them: segment by segment, epoch by epoch."""
    out: dict[str, list[Row]] = {}
    for name in sorted(segments, key=lambda n: (int(n.rsplit(".", 1)[-1]), n)):
        for row in segments[name]:
            out.setdefault(row[0], []).append(row)
    return out


def scale(client: SegmentStoreClient, stream: str, op: str) -> None:
    segs = sorted(client.get_stream(stream).active_segments, key=lambda s: s.key_low)
    if op == "split" and len(segs) < 5:
        s = segs[len(segs) // 2]
        mid = (s.key_low + s.key_high) / 2
        client.scale_stream(stream, [s.name], [(s.key_low, mid), (mid, s.key_high)])
    elif op == "merge" and len(segs) > 1:
        a, b = segs[0], segs[1]
        client.scale_stream(stream, [a.name, b.name], [(a.key_low, b.key_high)])


@settings(max_examples=80)  # below the profile's 100: each example runs a writer over a store
@given(ops=ops_st, batch=st.sampled_from([1, 4, 1000]), sync=st.booleans())
def test_write_encoded_keeps_each_keys_order_across_scaling(ops: list[Any], batch: int, sync: bool) -> None:
    """Each key's events once and in order, appends pending across splits and merges; as ``write_event``."""
    with SegmentStore(clock=ManualClock(1_000)) as store:
        c = EmbeddedClient(store)
        config = WriterConfig(max_batch_events=batch, max_batch_bytes=300, sync=sync)
        writers = {}
        for stream in ("x/one", "x/bulk"):
            c.create_stream(stream, 2)
            writers[stream] = EventWriter(c, stream, config=config)
        for op in ops:
            for stream, w in writers.items():
                if op == "flush":
                    w.flush()
                elif isinstance(op, str):
                    scale(c, stream, op)
                elif stream == "x/one":
                    for k, p, t in op:
                        w.write_event(k, p, t)
                else:
                    w.write_encoded(encoded(op))
        for w in writers.values():
            w.close()
            w._check()
        written = by_key({"all.0": [r for op in ops if not isinstance(op, str) for r in op]})
        assert by_key(contents(c, "x/one")) == by_key(contents(c, "x/bulk")) == written
        with pytest.raises(WriterClosedError):
            writers["x/bulk"].write_encoded(encoded([("a", b"", None)]))


def test_appends_hold_at_most_max_batch_events() -> None:
    with SegmentStore(clock=ManualClock(1_000)) as store:
        c = EmbeddedClient(store)
        c.create_stream("x/s", 1)
        sizes = []
        real = c.append

        def counting(name: str, data: bytes, *a: Any, **kw: Any) -> Any:
            sizes.append(len(decode_frames(data)[0]))
            return real(name, data, *a, **kw)

        c.append = counting  # type: ignore[method-assign]
        with EventWriter(c, "x/s", config=WriterConfig(max_batch_events=100)) as w:
            w.write_encoded(encoded([("k", b"p", i) for i in range(1_050)]))
        assert sizes == [100] * 10 + [50]


def test_a_transaction_takes_encoded_events() -> None:
    with SegmentStore(clock=ManualClock(1_000)) as store:
        c = EmbeddedClient(store)
        for stream in ("x/one", "x/bulk"):
            c.create_stream(stream, 3)
        rows = [(f"k{i % 9}", bytes([i % 256]) * (i % 7), i) for i in range(500)]
        one = TransactionalEventWriter(c, "x/one", config=WriterConfig(max_batch_events=64)).begin_txn()
        for k, p, t in rows:
            one.write_event(k, p, t)
        bulk = TransactionalEventWriter(c, "x/bulk", config=WriterConfig(max_batch_events=64)).begin_txn()
        bulk.write_encoded(encoded(rows[:200]))
        bulk.write_encoded(encoded(rows[200:]))
        assert contents(c, "x/bulk") == {s: [] for s in contents(c, "x/one")}  # nothing visible yet
        one.commit()
        bulk.commit()
        assert contents(c, "x/one") == contents(c, "x/bulk")
        assert sum(map(len, contents(c, "x/bulk").values())) == 500
