"""Store throughput, measured side by side with a bare-Python baseline in the same run.

- ``append``: 100-byte events through ``SegmentStore.append`` vs a bare
  ``bytearray.extend`` + ``list.append`` loop (goal: within 6x of the loop, issue 14;
  ``bench_append_cost`` shows where the time goes).
- ``append_batch``: the same events through ``SegmentStore.append_batch`` in batches
  of 1000 (goal: >= 1 M events/s).
- ``append_each``: a writer's tick, one append to each of 1,000 segments, through one
  ``SegmentStore.append_each`` call vs a loop of ``append`` (issue 46).
- ``read``: sequential 64 KiB reads through ``SegmentStore.read`` vs slicing the bytes
  out of a ``bytearray`` (MB/s), and 100-byte event reads per second.

Contenders run in turns on small chunks (about 1 ms each) and each keeps its best
per-chunk rate, so a busy machine slows all of them alike instead of skewing one.
Run ``python -m bench.perf.bench_store [--quick | --tiny]``; ``run(size)`` returns the rows.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from segmentstore import ManualClock, SegmentStore, StoreConfig, WallClock
from segmentstore.clock import Clock, monotonic_s

from .errors import BenchmarkError
from .suite import Row, Size, module_main, row, sized

__all__ = ["run", "main", "EVENT_BYTES", "BATCH_EVENTS", "READ_CHUNK", "TICK_SEGMENTS"]

EVENT_BYTES = 100
BATCH_EVENTS = 1_000
READ_CHUNK = 64 * 1024
BATCH_GOAL_EVENTS_PER_S = 1_000_000
TICK_SEGMENTS = 1_000
"""Segments a tick appends to, one append each (``append_each`` vs a loop of ``append``)."""
APPEND_GOAL_SLOWDOWN = 6.0

_Runner = Callable[[list[Any]], None]
_Factory = Callable[[ExitStack], _Runner]


def _race(contenders: dict[str, _Factory], items: list[Any], chunk: int, rounds: int) -> dict[str, float]:
    """Best seconds per item of each contender; chunks of ``items`` are timed in turns. O(rounds * items)."""
    best = dict.fromkeys(contenders, float("inf"))
    chunks = [items[i : i + chunk] for i in range(0, len(items), chunk)]
    for _ in range(rounds):
        with ExitStack() as stack:
            runners = {name: make(stack) for name, make in contenders.items()}
            gc.collect()
            gc.disable()
            try:
                for c in chunks:
                    for name, runner in runners.items():
                        t0 = monotonic_s()
                        runner(c)
                        best[name] = min(best[name], (monotonic_s() - t0) / len(c))
            finally:
                gc.enable()
    return best


def _events(n: int) -> list[bytes]:
    """``n`` distinct 100-byte events (distinct objects, as a producer would hand them over)."""
    return [(i.to_bytes(8, "little") * 13)[:EVENT_BYTES] for i in range(n)]


def _store(stack: ExitStack, clock: Clock) -> SegmentStore:
    store = stack.enter_context(SegmentStore(clock=clock, config=StoreConfig(advancer_thread=False)))
    store.create_segment("bench")
    return store


def _bare(stack: ExitStack) -> _Runner:
    buf = bytearray()
    offsets: list[int] = []

    def go(events: list[bytes]) -> None:
        extend, add = buf.extend, offsets.append
        for e in events:
            extend(e)
            add(len(buf))

    return go


def _appends(clock_kind: type[Clock]) -> _Factory:
    def make(stack: ExitStack) -> _Runner:
        append = _store(stack, ManualClock(1) if clock_kind is ManualClock else WallClock()).append

        def go(events: list[bytes]) -> None:
            for e in events:
                append("bench", e)

        return go

    return make


def _batches(stack: ExitStack) -> _Runner:
    append_batch = _store(stack, ManualClock(1)).append_batch

    def go(events: list[bytes]) -> None:
        for i in range(0, len(events), BATCH_EVENTS):
            append_batch("bench", events[i : i + BATCH_EVENTS])

    return go


def _append_rows(n: int, rounds: int) -> list[Row]:
    best = _race(
        {
            "bare": _bare,
            "manual": _appends(ManualClock),
            "wall": _appends(WallClock),
            "batch": _batches,
        },
        _events(n),
        chunk=BATCH_EVENTS,  # ~2 ms for the slowest contender: short enough to often run unpreempted
        rounds=rounds,
    )
    bare = best["bare"]
    vs = (
        f"bare bytearray.extend+list.append loop ({1 / bare:,.0f} events/s); "
        f"x slower, goal <= {APPEND_GOAL_SLOWDOWN:.0f}"
    )
    return [
        row("bare loop: bytearray.extend + list.append", 1 / bare, "events/s", "itself", 1.0),
        row("store.append 100 B (ManualClock)", 1 / best["manual"], "events/s", vs, best["manual"] / bare),
        row("store.append 100 B (WallClock)", 1 / best["wall"], "events/s", vs, best["wall"] / bare),
        row(
            f"store.append_batch {BATCH_EVENTS} x 100 B",
            1 / best["batch"],
            "events/s",
            "goal 1M events/s; x the goal",
            (1 / best["batch"]) / BATCH_GOAL_EVENTS_PER_S,
        ),
    ]


def _tick_store(stack: ExitStack) -> tuple[SegmentStore, list[str]]:
    store = stack.enter_context(SegmentStore(ManualClock(1), StoreConfig(advancer_thread=False)))
    names = [f"tick/{i}" for i in range(TICK_SEGMENTS)]
    for name in names:
        store.create_segment(name)
    return store, names


def _tick_loop(stack: ExitStack) -> _Runner:
    store, names = _tick_store(stack)
    append = store.append

    def go(events: list[bytes]) -> None:
        for name, e in zip(names, events, strict=False):
            append(name, e)

    return go


def _tick_each(stack: ExitStack) -> _Runner:
    store, names = _tick_store(stack)
    append_each = store.append_each

    def go(events: list[bytes]) -> None:
        append_each(list(zip(names, events, strict=False)))

    return go


def _check_ticks(events: list[bytes]) -> None:
    """A tick through ``append_each`` answers and stores what a loop of ``append`` does (before timing)."""
    with ExitStack() as stack:
        (loop, names), (each, _) = _tick_store(stack), _tick_store(stack)
        want = [loop.append(n, e) for n, e in zip(names, events, strict=False)]
        got = list(each.append_each(list(zip(names, events, strict=False))))
        if got != want:
            raise BenchmarkError("append_each answered differently from a loop of append")
        for n in names[: len(events)]:
            if each.read(n, 0, EVENT_BYTES + 1).data != loop.read(n, 0, EVENT_BYTES + 1).data:
                raise BenchmarkError(f"append_each stored other bytes in {n!r} than a loop of append")


def _tick_rows(n: int, rounds: int) -> list[Row]:
    best = _race({"loop": _tick_loop, "each": _tick_each}, _events(n), chunk=TICK_SEGMENTS, rounds=rounds)
    return [
        row(f"tick: append to {TICK_SEGMENTS:,} segments, a loop of append", 1 / best["loop"], "appends/s"),
        row(
            f"tick: append to {TICK_SEGMENTS:,} segments, one append_each",
            1 / best["each"],
            "appends/s",
            "the loop of append; x faster",
            best["loop"] / best["each"],
        ),
    ]


def _check_appends(events: list[bytes]) -> None:
    """``append`` and ``append_batch`` store the events' bytes at the offsets they return (before timing)."""
    with ExitStack() as stack:
        store = _store(stack, ManualClock(1))
        offsets = [store.append("bench", e).offset for e in events]
        batch_store = stack.enter_context(SegmentStore(ManualClock(1), StoreConfig(advancer_thread=False)))
        batch_store.create_segment("bench")
        for i in range(0, len(events), BATCH_EVENTS):
            batch_store.append_batch("bench", events[i : i + BATCH_EVENTS])
        want = b"".join(events)
        for s in (store, batch_store):
            got = s.read("bench", 0, len(want) + 1).data
            if got != want:
                raise BenchmarkError(f"the store holds {len(got)} bytes, not the {len(want)} appended")
        if offsets != [i * EVENT_BYTES for i in range(len(events))]:
            raise BenchmarkError("append returned wrong offsets")


def _read_store(stack: ExitStack, total_bytes: int) -> tuple[SegmentStore, bytearray]:
    """A store whose segment holds ``total_bytes`` (100 KiB per append, an attribute update every 16),
    and the same bytes in a ``bytearray``; checked to read back the same."""
    block = bytes(range(256)) * (EVENT_BYTES * 4)  # 100 KiB per append
    store = _store(stack, ManualClock(1))
    buf = bytearray()
    for i in range(max(1, total_bytes // len(block))):
        store.append("bench", block)
        buf += block
        if i % 16 == 0:
            store.update_attributes("bench", [])
    for off in (0, len(buf) // 3, len(buf) - EVENT_BYTES):
        if store.read("bench", off, READ_CHUNK).data != buf[off : off + READ_CHUNK]:
            raise BenchmarkError(f"store.read at {off} differs from the bytes appended")
    return store, buf


def _store_reads(store: SegmentStore, size: int) -> _Factory:
    read = store.read

    def make(_: ExitStack) -> _Runner:
        def go(offsets: list[int]) -> None:
            for off in offsets:
                read("bench", off, size)

        return go

    return make


def _bare_reads(buf: bytearray, size: int) -> _Factory:
    def make(_: ExitStack) -> _Runner:
        def go(offsets: list[int]) -> None:
            for off in offsets:
                bytes(buf[off : off + size])

        return go

    return make


def _read_rows(total_bytes: int, rounds: int) -> list[Row]:
    with ExitStack() as stack:
        store, buf = _read_store(stack, total_bytes)
        length = len(buf)
        big = _race(
            {"store": _store_reads(store, READ_CHUNK), "bare": _bare_reads(buf, READ_CHUNK)},
            list(range(0, length, READ_CHUNK)),
            chunk=8,
            rounds=rounds,
        )
        n_events = min(500_000, length // EVENT_BYTES)
        small = _race(
            {"store": _store_reads(store, EVENT_BYTES), "bare": _bare_reads(buf, EVENT_BYTES)},
            list(range(0, n_events * EVENT_BYTES, EVENT_BYTES)),
            chunk=1_000,
            rounds=rounds,
        )
    mb = READ_CHUNK / 1e6
    return [
        row(
            "store.read 64 KiB sequential",
            mb / big["store"],
            "MB/s",
            f"bytearray slice copy ({mb / big['bare']:,.0f} MB/s); x slower",
            big["store"] / big["bare"],
        ),
        row(
            "store.read 100 B events",
            1 / small["store"],
            "events/s",
            f"bytearray slice copy ({1 / small['bare']:,.0f} events/s); x slower",
            small["store"] / small["bare"],
        ),
    ]


def _sizes(size: Size) -> tuple[int, int, int]:
    """(events appended, rounds, bytes read) at ``size``."""
    return sized(
        size,
        tiny=(4_000, 1, 1024 * 1024),
        quick=(100_000, 3, 16 * 1024 * 1024),
        full=(500_000, 5, 64 * 1024 * 1024),
    )


def run(size: Size = "full") -> list[Row]:
    """Measure every figure in one process and return the rows (``quick``: ~10x less work)."""
    n, rounds, total_read = _sizes(size)
    _check_appends(_events(2 * BATCH_EVENTS))
    _check_ticks(_events(TICK_SEGMENTS))
    return _append_rows(n, rounds) + _tick_rows(n, rounds) + _read_rows(total_read, rounds)


# ---------------------------------------------------------------- pytest-benchmark (bench/perf/conftest.py)
def _bench_appends(benchmark: Any, make: _Factory) -> None:
    _check_appends(_events(2 * BATCH_EVENTS))
    events = _events(BATCH_EVENTS * 10)
    with ExitStack() as stack:
        benchmark(make(stack), events)


def test_bare_loop(benchmark: Any) -> None:
    _bench_appends(benchmark, _bare)


def test_append_manual_clock(benchmark: Any) -> None:
    _bench_appends(benchmark, _appends(ManualClock))


def test_append_wall_clock(benchmark: Any) -> None:
    _bench_appends(benchmark, _appends(WallClock))


def test_append_batch(benchmark: Any) -> None:
    _bench_appends(benchmark, _batches)


def test_tick_append_loop(benchmark: Any) -> None:
    _check_ticks(_events(TICK_SEGMENTS))
    with ExitStack() as stack:
        benchmark(_tick_loop(stack), _events(TICK_SEGMENTS))


def test_tick_append_each(benchmark: Any) -> None:
    _check_ticks(_events(TICK_SEGMENTS))
    with ExitStack() as stack:
        benchmark(_tick_each(stack), _events(TICK_SEGMENTS))


def _bench_reads(benchmark: Any, bench_size: Size, size: int) -> None:
    with ExitStack() as stack:
        store, buf = _read_store(stack, _sizes(bench_size)[2])
        offsets = list(range(0, min(len(buf), 1_000 * size), size))
        benchmark(_store_reads(store, size)(stack), offsets)


def test_read_64k(benchmark: Any, bench_size: Size) -> None:
    _bench_reads(benchmark, bench_size, READ_CHUNK)


def test_read_100_byte_events(benchmark: Any, bench_size: Size) -> None:
    _bench_reads(benchmark, bench_size, EVENT_BYTES)


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m bench.perf.bench_store [--quick | --tiny]`` and print the table."""
    rows = module_main(run, argv, __doc__, "about 10x less work")
    append = next(r for r in rows if r["name"].startswith("store.append 100 B (ManualClock)"))
    batch = next(r for r in rows if r["name"].startswith("store.append_batch"))
    print(
        f"\nsingle append: {append['ratio']:.2f}x the bare loop (goal <= {APPEND_GOAL_SLOWDOWN:.0f}x: "
        f"{'met' if append['ratio'] <= APPEND_GOAL_SLOWDOWN else 'NOT met'}); "
        f"append_batch: {batch['value'] / 1e6:.2f} M events/s (goal >= 1 M: "
        f"{'met' if batch['value'] >= BATCH_GOAL_EVENTS_PER_S else 'NOT met'})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
