"""Where a single ``store.append`` spends its time: a ladder of steps, timed side by side.

Each rung does what the rung before it did plus one more step of
``SegmentContainer.append``'s path for a plain append (no expected offset, no writer
id), on the store's own objects: the call with the append's signature; the argument
checks; the container's lock and the segment lookup; the operation processor's stamp
(a clock reading); the data append; the segment length and the watermark index; the
times and the ``AppendResult``. The last rung is the real ``store.append``. The
rungs run in turns on chunks of the same events (``bench_store``'s race), so load
slows them alike; each figure is ns per append and its ratio to the bare
``bytearray.extend`` + ``list.append`` loop (issue 14's goal: the real append within
6x of it). The difference between two rungs is what that step costs. Beside them, the
floor: a minimal append (checks, a lock, a clock reading, the extend, a tuple) with no
segment object, index or result type, the least a validating, atomic append costs here.

The ladder is an instrument that mirrors the container's code: before timing, the
fullest stand-in rung must leave its store exactly as ``store.append`` leaves its own
(length, bytes, watermarks, last write time), so a change to the container that the
ladder no longer mirrors fails the run instead of misreporting.
Run ``python -m bench.perf.bench_append_cost [--quick | --tiny]``.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from segmentstore import ManualClock, SegmentStore
from segmentstore.results import AppendResult

from .bench_store import BATCH_EVENTS, _bare, _events, _race, _store
from .errors import BenchmarkError
from .suite import Row, Size, module_main, row, sized

__all__ = ["run", "main", "GOAL_SLOWDOWN", "RUNGS"]

GOAL_SLOWDOWN = 6.0
"""Issue 14: a single 100-byte append within 6x of the bare loop."""

RUNGS = (
    "a call with the append's signature",
    "+ argument checks",
    "+ lock and segment lookup",
    "+ stamp (processor, clock)",
    "+ data append",
    "+ length and watermark index",
    "+ times and AppendResult",
)
_Runner = Callable[[list[Any]], None]
_new = tuple.__new__


def _rung(level: int, store: SegmentStore) -> _Runner:
    """The first ``level`` steps of a plain append on ``store``'s own objects (see the module doc)."""
    c = store._container
    segments = c._segments
    proc = c.processor
    lock = c.lock
    limit = c._max_append_bytes

    def append(
        name: str,
        data: bytes,
        expected_offset: int | None = None,
        *,
        writer_id: int | None = None,
        event_number: int | None = None,
    ) -> AppendResult | None:
        if level == 1:
            return None
        if type(data) is not bytes:
            raise BenchmarkError("the ladder appends bytes")
        n = len(data)
        if not 0 < n <= limit:
            raise BenchmarkError("bad length")
        if writer_id is not None or event_number is not None or expected_offset is not None:
            raise BenchmarkError("the ladder does plain appends")
        if level == 2:
            return None
        lock.acquire()
        try:
            seg = segments.get(name) if type(name) is str else None
            if seg is None or seg.sealed:
                raise BenchmarkError(f"no segment {name!r}")
            if level == 3:
                return None
            offset = seg.length
            _, ts = proc.stamp()
            if proc.log is not None:
                raise BenchmarkError("the ladder runs without a log")
            if level == 4:
                return None
            seg.data.append(data)
            if level == 5:
                return None
            seg.length = end = offset + n
            seg.windex.record_write_trusted(end, ts)
            if level == 6:
                return None
            seg.last_write_time = ts
            seg.last_used = ts
            if seg.futures:
                raise BenchmarkError("the ladder's segment has no waiting reads")
        finally:
            lock.release()
        result: AppendResult = _new(AppendResult, (offset, n, ts, False))
        return result

    def go(events: list[bytes]) -> None:
        for e in events:
            append("bench", e)

    return go


def _minimal(stack: ExitStack) -> _Runner:
    """The floor: a minimal append that validates, locks, stamps, appends and returns a tuple.

    No segment object, no watermark index, no result type: a list for the length, two
    lists for the offsets and times. What any validating, atomic append in CPython costs.
    """
    clock = ManualClock(1)
    now = clock.now
    buf = bytearray()
    ends: list[int] = []
    times: list[int] = []
    lock = threading.Lock()
    segments = {"bench": [0]}

    def append(name: str, data: bytes) -> tuple[int, int, int]:
        if type(data) is not bytes:
            raise BenchmarkError("the minimal append takes bytes")
        n = len(data)
        if not 0 < n <= 1 << 20:
            raise BenchmarkError("bad length")
        with lock:
            seg = segments.get(name)
            if seg is None:
                raise BenchmarkError(f"no segment {name!r}")
            ts = now()
            offset = seg[0]
            buf.extend(data)
            seg[0] = end = offset + n
            ends.append(end)
            times.append(ts)
        return (offset, n, ts)

    def go(events: list[bytes]) -> None:
        for e in events:
            append("bench", e)

    return go


def _factory(level: int) -> Callable[[ExitStack], _Runner]:
    def make(stack: ExitStack) -> _Runner:
        store = _store(stack, ManualClock(1))
        if level > len(RUNGS):
            append = store.append

            def go(events: list[bytes]) -> None:
                for e in events:
                    append("bench", e)

            return go
        return _rung(level, store)

    return make


def _check(events: list[bytes]) -> None:
    """The fullest stand-in rung leaves its store as ``store.append`` leaves its own (before timing)."""
    with ExitStack() as stack:
        stores = []
        for level in (len(RUNGS), len(RUNGS) + 1):
            clock = ManualClock(1)
            store = _store(stack, clock)
            runner = _rung(level, store) if level <= len(RUNGS) else None
            for i in range(0, len(events), 100):
                clock.advance(1)  # several index entries
                chunk = events[i : i + 100]
                if runner is not None:
                    runner(chunk)
                else:
                    for e in chunk:
                        store.append("bench", e)
            store._check()
            stores.append(store)
        ladder, real = stores
        n = len(b"".join(events))
        for what, get in (
            ("info", lambda s: s.get_info("bench")),
            ("bytes", lambda s: s.read("bench", 0, n + 1).data),
            ("watermarks", lambda s: [s.watermark_at("bench", o) for o in range(0, n + 1, 50)]),
        ):
            if get(ladder) != get(real):
                raise BenchmarkError(f"the ladder no longer mirrors store.append: its {what} differ")


def run(size: Size = "full") -> list[Row]:
    """The ladder's rows: ns per append of each rung and of ``store.append``, ratios to the bare loop."""
    n, rounds = sized(size, tiny=(4_000, 1), quick=(100_000, 3), full=(400_000, 5))
    _check(_events(1_000))
    contenders: dict[str, Callable[[ExitStack], _Runner]] = {"bare": _bare, "minimal": _minimal}
    for level in range(1, len(RUNGS) + 2):
        contenders[str(level)] = _factory(level)
    best = _race(contenders, _events(n), chunk=BATCH_EVENTS, rounds=rounds)
    bare = best["bare"]
    vs = f"bare bytearray.extend+list.append loop ({bare * 1e9:.0f} ns); x slower"
    rows = [
        row("bare loop: bytearray.extend + list.append", bare * 1e9, "ns/append", "itself", 1.0),
        row(
            "minimal append: checks, lock, clock, extend, tuple (the floor)",
            best["minimal"] * 1e9,
            "ns/append",
            vs,
            best["minimal"] / bare,
        ),
    ]
    for level, name in enumerate(RUNGS, start=1):
        rows.append(
            row(f"ladder {level}: {name}", best[str(level)] * 1e9, "ns/append", vs, best[str(level)] / bare)
        )
    real = best[str(len(RUNGS) + 1)]
    rows.append(
        row("store.append 100 B (ManualClock)", real * 1e9, "ns/append", f"{vs}, goal <= 6", real / bare)
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m bench.perf.bench_append_cost [--quick | --tiny]`` and print the ladder."""
    rows = module_main(run, argv, __doc__, "about 4x less work")
    real = rows[-1]
    ladder = rows[2:]
    steps = [(r["name"], r["value"] - p["value"]) for p, r in itertools.pairwise(ladder)]
    print(
        f"\nstore.append: {real['ratio']:.1f}x the bare loop (goal <= {GOAL_SLOWDOWN:.0f}x: "
        f"{'met' if real['ratio'] <= GOAL_SLOWDOWN else 'NOT met'}); step costs (ns):"
    )
    print(f"  {ladder[0]['name']}: {ladder[0]['value']:.0f}")
    for name, cost in steps:
        print(f"  {name}: {cost:+.0f}")
    print(f"  (the minimal append alone: {rows[1]['ratio']:.1f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
