"""Reader throughput: events/s one reader delivers, per event and in batches, vs raw store reads.

One stream segment holds ``N`` events of 100 bytes (frames of routing key + payload),
written 1000 per append. Measured side by side in one process, in turns, best of the
rounds for each contender:

- ``raw``: ``client.read`` of 1 MiB blocks over the whole segment (bytes only: the floor).
- ``batch``: ``EventReader.read_batch`` (columns: numpy + Arrow, ingestion times from one
  ``watermarks_at`` call per block), INGESTION_TIME, a reader group on the wall clock.
  Goal: >= 1 M events/s.
- ``per event``: ``EventReader.read_next_event``, one ``EventRead`` per event.

Each round resets the group to the head of the stream (a new epoch), so every round
reads the same events. Run ``python -m bench.perf.bench_reader [--quick | --tiny]``; ``run(size)``
returns the rows.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from readergroup.config import ReaderGroupConfig, TimeDomain
from readergroup.format.events import decode_columns, encode_event
from readergroup.reading.group import ReaderGroup
from readergroup.reading.reader import ReadKind
from segmentstore import ManualClock, SegmentStore, StoreConfig, WallClock
from segmentstore.client import EmbeddedClient
from segmentstore.clock import monotonic_s

from .errors import BenchmarkError
from .suite import Row, Size, module_main, row, sized

__all__ = ["run", "main", "EVENT_BYTES", "BATCH_GOAL_EVENTS_PER_S"]

EVENT_BYTES = 100
BATCH_GOAL_EVENTS_PER_S = 1_000_000
STREAM = "bench/reader"
_BLOCK = 1 << 20
_WRITE_BATCH = 1_000


def _frames() -> list[bytes]:
    """1000 distinct 100-byte frames (4-byte routing key, 81-byte payload)."""
    out = [encode_event(f"k{i:03d}", i.to_bytes(4, "little") * 20 + b"!") for i in range(_WRITE_BATCH)]
    assert all(len(f) == EVENT_BYTES for f in out)
    return out


@contextmanager
def _contenders(n: int) -> Iterator[tuple[dict[str, Callable[[], int]], int]]:
    """The contenders over a segment of ``n`` events (each returns the events it read), and ``n``.

    Each is run once and checked to read every event before this yields (a warm-up too:
    kernels load, caches fill).
    """
    clock = ManualClock(1_000_000)
    store = SegmentStore(clock=clock, config=StoreConfig(advancer_thread=False))
    try:
        client = EmbeddedClient(store)
        seg = client.create_stream(STREAM, 1).active_segments[0].name
        frames = _frames()
        for _ in range(max(1, n // _WRITE_BATCH)):
            clock.advance(1)
            client.append_batch(seg, frames)
        total = client.get_info(seg).length // EVENT_BYTES
        cfg = ReaderGroupConfig((STREAM,), time_domain=TimeDomain.INGESTION_TIME)
        group = ReaderGroup("bench", cfg, client, WallClock())
        reader = group.create_reader("reader")
        head = client.get_head_cut(STREAM)

        def raw() -> int:
            off = 0
            while True:
                r = client.read(seg, off, _BLOCK)
                off += len(r.data)
                if r.at_tail:
                    return off // EVENT_BYTES

        def raw_decode() -> int:
            off, events = 0, 0
            while True:
                r = client.read(seg, off, _BLOCK)
                cols, used = decode_columns(r.data, off, events_only=True)
                off += used
                events += len(cols["offset"])
                if r.at_tail and used == len(r.data):
                    return events

        def batch() -> int:
            group.reset_to(head)
            events = 0
            while events < total:
                events += len(reader.read_batch(65_536))
            return events

        def per_event() -> int:
            group.reset_to(head)
            events = 0
            read = reader.read_next_event
            kind = ReadKind.EVENT
            while events < total:
                if read().kind is kind:
                    events += 1
            return events

        contenders: dict[str, Callable[[], int]] = {
            "raw": raw,
            "raw+decode": raw_decode,
            "batch": batch,
            "per event": per_event,
        }
        for name, go in contenders.items():
            got = go()
            if got != total:
                raise BenchmarkError(f"{name} read {got} of {total} events")
        yield contenders, total
    finally:
        store.close()


def _measure(n: int, rounds: int) -> dict[str, float]:
    """Best seconds per event of each contender over ``rounds`` turns. O(rounds * n)."""
    with _contenders(n) as (contenders, total):
        best = dict.fromkeys(contenders, float("inf"))
        for _ in range(rounds):
            for name, go in contenders.items():
                gc.collect()
                gc.disable()
                try:
                    t0 = monotonic_s()
                    got = go()
                    best[name] = min(best[name], (monotonic_s() - t0) / got)
                finally:
                    gc.enable()
                if got != total:
                    raise BenchmarkError(f"{name} read {got} of {total} events")
        return best


def _sizes(size: Size) -> tuple[int, int]:
    """(events in the segment, rounds) at ``size``."""
    return sized(size, tiny=(10_000, 1), quick=(200_000, 3), full=(1_000_000, 5))


def run(size: Size = "full") -> list[Row]:
    """Measure every figure in one process and return the rows (``quick``: ~5x less work)."""
    best = _measure(*_sizes(size))
    raw = 1 / best["raw"]
    vs = f"raw store reads of 1 MiB blocks ({raw:,.0f} events/s); fraction of raw"
    batch = 1 / best["batch"]
    dec, one = best["raw+decode"], best["per event"]
    return [
        row("store.read 1 MiB blocks (raw bytes)", raw, "events/s", "itself", 1.0),
        row("store.read + decode_columns", 1 / dec, "events/s", vs, best["raw"] / dec),
        row("reader.read_batch (columns)", batch, "events/s", vs, best["raw"] / best["batch"]),
        row("reader.read_next_event", 1 / one, "events/s", vs, best["raw"] / one),
        row(
            "reader.read_batch vs goal",
            batch,
            "events/s",
            f"goal {BATCH_GOAL_EVENTS_PER_S:,} events/s; x the goal",
            batch / BATCH_GOAL_EVENTS_PER_S,
        ),
    ]


# ---------------------------------------------------------------- pytest-benchmark (bench/perf/conftest.py)
def _bench(benchmark: Any, bench_size: Size, contender: str) -> None:
    with _contenders(_sizes(bench_size)[0]) as (contenders, total):
        got = benchmark(contenders[contender])
    if got != total:
        raise BenchmarkError(f"{contender} read {got} of {total} events")


def test_raw_store_reads(benchmark: Any, bench_size: Size) -> None:
    _bench(benchmark, bench_size, "raw")


def test_raw_reads_and_decode_columns(benchmark: Any, bench_size: Size) -> None:
    _bench(benchmark, bench_size, "raw+decode")


def test_read_batch(benchmark: Any, bench_size: Size) -> None:
    _bench(benchmark, bench_size, "batch")


def test_read_next_event(benchmark: Any, bench_size: Size) -> None:
    _bench(benchmark, bench_size, "per event")


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m bench.perf.bench_reader [--quick | --tiny]`` and print the table."""
    rows = module_main(run, argv, __doc__, "about 5x less work")
    batch = rows[-1]["value"]
    met = "met" if batch >= BATCH_GOAL_EVENTS_PER_S else "NOT met"
    print(f"\nbatch API: {batch / 1e6:.2f} M events/s (goal >= 1 M: {met})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
