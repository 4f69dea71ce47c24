"""Durable store costs, measured side by side in one run.

- ``append``: 100-byte appends per second with each sync policy (``none``,
  ``interval``, ``always``) against the in-memory store, on a ``ManualClock``.
- ``recovery``: the time to open a data directory left by a crash (kill -9) whose log
  holds 10^6 appends (``--quick``: 10^5) to 10 segments, each at a new millisecond,
  replaying the whole log, against opening it after a snapshot of the same state (10^6
  watermark index entries; the log then being empty).

Run ``python -m bench.bench_durable [--quick]``; ``run(quick)`` returns the rows.
"""

from __future__ import annotations

import gc
import shutil
import tempfile
from pathlib import Path
from typing import Any

from segmentstore import ManualClock, SegmentStore, StoreConfig
from segmentstore.clock import monotonic_s

from .runner import Row, module_main, row

__all__ = ["run", "main"]

EVENT_BYTES = 100
SEGMENTS = 10


def _config(sync: str = "none", **extra: Any) -> StoreConfig:
    return StoreConfig(advancer_thread=False, sync=sync, **extra)  # type: ignore[arg-type]


def _appends_per_s(n: int, sync: str | None, work: Path) -> float:
    """Appends per second of ``n`` 100-byte events (``sync=None``: the in-memory store)."""
    events = [(i.to_bytes(8, "little") * 13)[:EVENT_BYTES] for i in range(n)]
    d = None if sync is None else work / f"append-{sync}"
    store = SegmentStore(ManualClock(1), _config(sync or "none"), data_dir=d)
    try:
        store.create_segment("bench")
        append = store.append
        gc.collect()
        gc.disable()
        t0 = monotonic_s()
        for e in events:
            append("bench", e)
        elapsed = monotonic_s() - t0
    finally:
        gc.enable()
        store.close()
        if d is not None:
            shutil.rmtree(d, ignore_errors=True)
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


def _timed_open(d: Path) -> tuple[float, int]:
    gc.collect()
    t0 = monotonic_s()
    store = SegmentStore(ManualClock(1), _config(), data_dir=d)
    elapsed = monotonic_s() - t0
    try:
        stats = store.durable_stats
        replayed = stats.recovery.operations_replayed if stats is not None else 0
    finally:
        store.close()
    return elapsed, replayed


def _recovery_rows(ops: int, work: Path) -> list[Row]:
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
    t_log, replayed = _timed_open(log_only)
    t_snap, _ = _timed_open(with_snap)
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


def run(quick: bool = False) -> list[Row]:
    """Measure every figure in one process and return the rows (``quick``: 10x fewer operations)."""
    n = 20_000 if quick else 200_000
    n_always = 500 if quick else 3_000
    ops = 100_000 if quick else 1_000_000
    with tempfile.TemporaryDirectory(prefix="ingestwm-bench-") as tmp:
        work = Path(tmp)
        return _append_rows(n, n_always, work, 3) + _recovery_rows(ops, work)


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m bench.bench_durable [--quick]`` and print the table."""
    module_main(run, argv, __doc__, "10x fewer operations")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
