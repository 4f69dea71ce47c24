"""Durable store costs, measured side by side in one run.

- ``append``: 100-byte appends per second with each sync policy (``none``,
  ``interval``, ``always``) against the in-memory store, on a ``ManualClock``.
- ``recovery``: the time to open a data directory left by a crash (kill -9) whose log
  holds 10^6 appends (``--quick``: 10^5) to 10 segments, each at a new millisecond,
  replaying the whole log, against opening it after a snapshot of the same state (10^6
  watermark index entries; the log then being empty).

Run ``python -m bench.perf.bench_durable [--quick | --tiny]``; ``run(size)`` returns the rows.
"""

from __future__ import annotations

import gc
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from segmentstore import ManualClock, SegmentStore, StoreConfig
from segmentstore.clock import monotonic_s

from .errors import BenchmarkError
from .suite import Row, Size, module_main, row, sized

__all__ = ["run", "main"]

EVENT_BYTES = 100
SEGMENTS = 10


def _config(sync: str = "none", **extra: Any) -> StoreConfig:
    return StoreConfig(advancer_thread=False, sync=sync, **extra)  # type: ignore[arg-type]


def _events(n: int) -> list[bytes]:
    return [(i.to_bytes(8, "little") * 13)[:EVENT_BYTES] for i in range(n)]


@contextmanager
def _append_store(sync: str | None, work: Path) -> Iterator[SegmentStore]:
    """A store with an empty segment ``bench`` (``sync=None``: in memory); its data directory goes after."""
    d = None if sync is None else work / f"append-{sync}"
    store = SegmentStore(ManualClock(1), _config(sync or "none"), data_dir=d)
    try:
        store.create_segment("bench")
        yield store
    finally:
        store.close()
        if d is not None:
            shutil.rmtree(d, ignore_errors=True)


def _append_all(store: SegmentStore, events: list[bytes]) -> None:
    append = store.append
    for e in events:
        append("bench", e)


def _check_durable(work: Path) -> None:
    """With each sync policy, appended events are there after a reopen (before timing)."""
    events = _events(100)
    for sync in ("none", "interval", "always"):
        d = work / f"check-{sync}"
        with SegmentStore(ManualClock(1), _config(sync), data_dir=d) as store:
            store.create_segment("bench")
            _append_all(store, events)
        with SegmentStore(ManualClock(1), _config(sync), data_dir=d) as store:
            if store.read("bench", 0, 1 << 20).data != b"".join(events):
                raise BenchmarkError(f"sync={sync}: the appended events are not there after a reopen")
        shutil.rmtree(d, ignore_errors=True)


def _appends_per_s(n: int, sync: str | None, work: Path) -> float:
    """Appends per second of ``n`` 100-byte events (``sync=None``: the in-memory store)."""
    events = _events(n)
    with _append_store(sync, work) as store:
        gc.collect()
        gc.disable()
        try:
            t0 = monotonic_s()
            _append_all(store, events)
            elapsed = monotonic_s() - t0
        finally:
            gc.enable()
    return n / elapsed


def _append_rows(n: int, n_always: int, work: Path, repeats: int) -> list[Row]:
    """Best of ``repeats`` runs each (fsync-bound ``always``: one run)."""
    mem = max(_appends_per_s(n, None, work) for _ in range(repeats))
    rows = [row("append 100 B, in memory", mem, "appends/s", "itself", 1.0)]
    for sync, count in (("none", n), ("interval", n), ("always", n_always)):
        rate = max(_appends_per_s(count, sync, work) for _ in range(1 if sync == "always" else repeats))
        rows.append(
            row(
                f"append 100 B, data_dir, sync={sync}",
                rate,
                "appends/s",
                f"in-memory store ({mem:,.0f} appends/s); x slower",
                mem / rate,
            )
        )
    return rows


def _open_checked(d: Path, ops: int) -> tuple[SegmentStore, float]:
    """Open the store in ``d``, timed; check it holds the ``ops - SEGMENTS`` appends of ``_recovery_dirs``."""
    gc.collect()
    t0 = monotonic_s()
    store = SegmentStore(ManualClock(1), _config(), data_dir=d)
    elapsed = monotonic_s() - t0
    total = sum(store.get_info(f"seg{i}").length for i in range(SEGMENTS))
    if total != (ops - SEGMENTS) * EVENT_BYTES:
        store.close()
        want = (ops - SEGMENTS) * EVENT_BYTES
        raise BenchmarkError(f"recovered {total} bytes from {d.name}, expected {want}")
    return store, elapsed


def _timed_open(d: Path, ops: int) -> tuple[float, int]:
    store, elapsed = _open_checked(d, ops)
    try:
        stats = store.durable_stats
        replayed = stats.recovery.operations_replayed if stats is not None else 0
    finally:
        store.close()
    return elapsed, replayed


def _recovery_dirs(ops: int, work: Path) -> tuple[Path, Path]:
    """What a kill -9 leaves after ``ops`` operations on 10 segments: a log alone, and a snapshot."""
    src = work / "recovery-src"
    names = [f"seg{i}" for i in range(SEGMENTS)]
    clock = ManualClock(1)
    store = SegmentStore(clock, _config(snapshot_every_ops=10 * ops), data_dir=src)
    try:
        for n in names:
            store.create_segment(n)
        payload = b"e" * EVENT_BYTES
        append, tick = store.append, clock.advance
        for i in range(ops - SEGMENTS):
            tick(1)  # a new timestamp each time: one watermark index entry per append
            append(names[i % SEGMENTS], payload)
        log_only = work / "recovery-log"
        shutil.copytree(src, log_only)  # what a kill -9 now leaves: a log of `ops` operations
        store.snapshot()
        with_snap = work / "recovery-snapshot"
        shutil.copytree(src, with_snap)
    finally:
        store.close()
    return log_only, with_snap


def _recovery_rows(ops: int, work: Path) -> list[Row]:
    log_only, with_snap = _recovery_dirs(ops, work)
    t_log, replayed = _timed_open(log_only, ops)
    t_snap, _ = _timed_open(with_snap, ops)
    return [
        row(
            f"recovery, log of {replayed:,} ops, no snapshot",
            t_log,
            "s",
            f"{replayed / t_log:,.0f} ops/s replayed; itself",
            1.0,
        ),
        row(
            f"recovery, snapshot of the same {ops:,} ops",
            t_snap,
            "s",
            "recovery from the log alone; x of its time",
            t_snap / t_log,
        ),
    ]


def _sizes(size: Size) -> tuple[int, int, int]:
    """(appends, appends with sync=always, operations in the recovered log) at ``size``."""
    return sized(
        size, tiny=(2_000, 50, 5_000), quick=(20_000, 500, 100_000), full=(200_000, 3_000, 1_000_000)
    )


def run(size: Size = "full") -> list[Row]:
    """Measure every figure in one process and return the rows (``quick``: 10x fewer operations)."""
    n, n_always, ops = _sizes(size)
    with tempfile.TemporaryDirectory(prefix="ingestwm-bench-") as tmp:
        work = Path(tmp)
        _check_durable(work)
        return _append_rows(n, n_always, work, 3) + _recovery_rows(ops, work)


# ---------------------------------------------------------------- pytest-benchmark (bench/perf/conftest.py)
def _bench_appends(benchmark: Any, sync: str | None, n: int) -> None:
    with tempfile.TemporaryDirectory(prefix="ingestwm-bench-") as tmp:
        _check_durable(Path(tmp))
        with _append_store(sync, Path(tmp)) as store:
            benchmark(_append_all, store, _events(n))


def test_append_in_memory(benchmark: Any) -> None:
    _bench_appends(benchmark, None, 1_000)


def test_append_sync_none(benchmark: Any) -> None:
    _bench_appends(benchmark, "none", 1_000)


def test_append_sync_interval(benchmark: Any) -> None:
    _bench_appends(benchmark, "interval", 1_000)


def test_append_sync_always(benchmark: Any) -> None:
    _bench_appends(benchmark, "always", 20)


def _bench_recovery(benchmark: Any, bench_size: Size, snapshot: bool) -> None:
    ops = _sizes(bench_size)[2]
    with tempfile.TemporaryDirectory(prefix="ingestwm-bench-") as tmp:
        work = Path(tmp)
        log_only, with_snap = _recovery_dirs(ops, work)
        src = with_snap if snapshot else log_only
        copies = iter(range(1 << 30))

        def fresh_copy() -> tuple[tuple[Path, int], dict[str, Any]]:
            d = work / f"round-{next(copies)}"
            shutil.copytree(src, d)
            return (d, ops), {}

        def open_close(d: Path, ops: int) -> None:
            store, _ = _open_checked(d, ops)
            store.close()
            shutil.rmtree(d, ignore_errors=True)

        benchmark.pedantic(open_close, setup=fresh_copy, rounds=3, iterations=1)


def test_recovery_from_the_log(benchmark: Any, bench_size: Size) -> None:
    _bench_recovery(benchmark, bench_size, snapshot=False)


def test_recovery_from_a_snapshot(benchmark: Any, bench_size: Size) -> None:
    _bench_recovery(benchmark, bench_size, snapshot=True)


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m bench.perf.bench_durable [--quick | --tiny]`` and print the table."""
    module_main(run, argv, __doc__, "10x fewer operations")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
