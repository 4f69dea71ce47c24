"""Where a simulated reader's poll goes at Pravega's scale (issue 46), call by call.

Runs ``bench/perf/pravega-scale.yaml`` (4,096 segments, 1,000 readers polling every 100 ms,
1 M events/s, every other field at its default; ``bench_sim.PRAVEGA_SCALE``) for a while of
simulated time with a timer around each of the calls a poll is made of, and prints the
wall time per call and each one's share of the run:

- a reader's ``read_batch`` that returns events (its sync, its look at the tails, the merge);
- its next ``read_batch`` of the poll, which returns nothing (the caught-up report);
- of those, the segments' block reads and looks at the tails (``_fetch_all``: one
  store read, the blocks decoded together, taken by their segments; at this scale nearly
  all of them looks), their store read alone (embedded: ``read_packed``, ``read_many``'s answers
  in columns), and the report
  (``ReaderGroupState.sync_report``: framed, appended to the group's state log, applied);
- the recorder and pipeline per batch (``ReaderActor.on_batch``), and the writers' ticks
  (``WriterActor.step``);
- then, side by side in turns (shorter runs), the look taking its answers in columns
  (``read_packed``) and from ``read_many``'s answers (``ReaderBlocks.packed_reads`` off);
- and a reader's whole poll (``PolledReader._read``: its ``read_batch`` calls and the recorder) at
  the scenario's width and at a hundredth of it (``NARROW``: 41 segments, 10 readers, the same
  ~4 segments and ~100 events a poll and ~6 events an append), the same number of polls each,
  in turns: whether a poll costs more because the other readers' state crowds the caches.

The look and the report are parts of ``read_batch`` calls (their shares overlap). The
timers cost a little each (measured on an empty function and printed: compare the
calls with it in mind). The run is checked first: every event written was delivered once.
Run ``python -m bench.perf.bench_poll [--quick | --tiny]``.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from readergroup.format import events as event_format
from readergroup.group_state.state import ReaderGroupState
from readergroup.reading.reader import EventReader
from readergroup.reading.reader_blocks import ReaderBlocks
from segmentstore.client import EmbeddedClient
from segmentstore.core.warmup import warm_kernels

from ..sim.actors import WriterActor
from ..sim.engine import run_scenario
from ..sim.readers import PolledReader, ReaderActor
from ..sim.result import SimResult
from ..spec.scenario import Scenario, load_scenario
from .bench_sim import PRAVEGA_SCALE
from .suite import Row, Size, module_main, row, sized

__all__ = ["run", "main", "NARROW"]

NARROW = ("stream.segments=41", "readers.0.count=10", "writers.0.workload.rate_per_s=2500")
"""``pravega-scale.yaml`` at a hundredth of its width: 41 segments, 10 readers, 10,000 events/s; per
poll and per append the same work (~4 segments and ~100 events a poll, ~6 events an append)."""

_TIMED: tuple[tuple[type, str, str], ...] = (
    (ReaderBlocks, "_fetch_all", "block reads and looks at the tails (_fetch_all: read, decode, take)"),
    (ReaderGroupState, "sync_report", "report (sync_report: frame, append, apply)"),
    (ReaderActor, "on_batch", "recorder and pipeline per batch (on_batch)"),
    (WriterActor, "step", "writers' ticks (WriterActor.step)"),
)


def _timed(
    cls: type, name: str, key: Callable[[Any], str], seconds: dict[str, float], calls: Counter[str]
) -> Any:
    """Put a timer around ``cls.name`` (each call's seconds and count under ``key(its result)``);
    returns the original, for the caller to put back."""
    orig = cls.__dict__[name]

    @functools.wraps(orig)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        out = orig(*args, **kwargs)
        k = key(out)
        seconds[k] = seconds.get(k, 0.0) + time.perf_counter() - t0
        calls[k] += 1
        return out

    setattr(cls, name, wrapper)
    return orig


def _named(label: str) -> Callable[[Any], str]:
    return lambda _out: label


def _batch_kind(b: Any) -> str:
    if len(b):
        return "read_batch that returns events"
    if b.watermark is None and b.checkpoint_name is None:
        return "read_batch that returns nothing (the caught-up report)"
    return "read_batch that returns a watermark or a checkpoint"


@contextlib.contextmanager
def _timers(seconds: dict[str, float], calls: Counter[str]) -> Iterator[None]:
    """Time ``_TIMED``'s methods, the embedded store reads and ``read_batch`` (split by what it
    returned) while the block runs; the originals are back after it."""
    timed = [
        *((cls, name, _named(label)) for cls, name, label in _TIMED),
        (EmbeddedClient, "read_packed", _named("  of them: the store read (read_packed)")),
        (EmbeddedClient, "read_many", _named("  of them: the store read (read_many)")),
        (EventReader, "read_batch", _batch_kind),
    ]
    saved: list[tuple[type, str, Any]] = []
    try:
        for cls, name, key in timed:
            saved.append((cls, name, _timed(cls, name, key, seconds, calls)))
        yield
    finally:
        for cls, name, orig in saved:
            setattr(cls, name, orig)


def _delivered_once(summary: dict[str, Any], which: str) -> dict[str, Any]:
    """A run's event counts, checked: every event written was delivered once."""
    ev: dict[str, Any] = summary["events"]
    if not (ev["written"] == ev["delivered"] == ev["unique"] and ev["missing"] == ev["duplicates"] == 0):
        raise AssertionError(f"bench_poll: {which} run did not deliver every event once: {ev}")
    return ev


def _timer_cost() -> float:
    """Seconds the timer (``_timed``) adds around a call: an empty method's, with and without it."""

    class Empty:
        def f(self) -> None:
            return None

    e = Empty()
    plain = time.perf_counter()
    for _ in range(100_000):
        e.f()
    plain = time.perf_counter() - plain
    _timed(Empty, "f", _named("x"), {}, Counter())
    t = time.perf_counter()
    for _ in range(100_000):
        e.f()
    return max(0.0, (time.perf_counter() - t - plain) / 100_000)


def run(size: Size = "full") -> list[Row]:
    """One timed run of the Pravega-scale scenario; a row per call, per call and as a share."""
    ms = sized(size, tiny=200, quick=1_000, full=3_000)
    scenario = load_scenario(PRAVEGA_SCALE, [f"duration_ms={ms}"])
    seconds: dict[str, float] = {}
    calls: Counter[str] = Counter()
    warm_kernels()  # loaded before: the rows are the steady state's (the first read would load them)
    event_format._kernels()
    with _timers(seconds, calls):
        result = run_scenario(scenario)
    ev = _delivered_once(result.summary, "the")
    wall = result.wall_s - result.setup_wall_s
    rows = [
        row(
            f"pravega-scale, {ms / 1000:g} s simulated: {ev['delivered']:,} events, "
            f"{calls['read_batch that returns events']:,} busy polls (kernels loaded first, timers on)",
            round(wall, 2),
            "s",
        )
    ]
    for key in sorted(seconds, key=lambda k: -seconds[k]):
        rows.append(row(key, round(seconds[key] / calls[key] * 1e6, 1), "us/call", "share of the run",
                        round(seconds[key] / wall, 3)))  # fmt: skip
    rows.append(row("a timer around a call adds", round(_timer_cost() * 1e6, 2), "us/call"))
    side_ms, rounds = sized(size, tiny=100, quick=300, full=1_000), sized(size, tiny=1, quick=2, full=4)
    rows += _packed_side_by_side(side_ms, rounds)
    rows += _narrow_side_by_side(sized(size, tiny=2_000, quick=5_000, full=10_000), rounds)
    return rows


def _timed_run(scenario: Scenario, cls: type, name: str) -> tuple[SimResult, float]:
    """``scenario`` run with a timer around ``cls.name``: the result and the seconds per call."""
    seconds: dict[str, float] = {}
    calls: Counter[str] = Counter()
    orig = _timed(cls, name, _named("timed"), seconds, calls)
    try:
        result = run_scenario(scenario)
    finally:
        setattr(cls, name, orig)
    return result, seconds["timed"] / calls["timed"]


def _packed_side_by_side(ms: int, rounds: int) -> list[Row]:
    """The look (``_fetch_all``) taking its answers in columns (``read_packed``) and from
    ``read_many``'s answers (``ReaderBlocks.packed_reads`` off): runs of ``ms`` simulated in turns,
    each checked to deliver what the other does; the best round of each."""
    scenario = load_scenario(PRAVEGA_SCALE, [f"duration_ms={ms}"])
    best: dict[bool, float] = {}
    delivered: set[int] = set()
    try:
        for _ in range(rounds):
            for packed in (True, False):
                ReaderBlocks.packed_reads = packed
                result, per_call = _timed_run(scenario, ReaderBlocks, "_fetch_all")
                delivered.add(result.summary["events"]["delivered"])
                best[packed] = min(best.get(packed, per_call), per_call)
    finally:
        ReaderBlocks.packed_reads = True
    if len(delivered) != 1:
        raise AssertionError(f"bench_poll: packed and read_many's answers delivered differently: {delivered}")
    label = f"pravega-scale {ms / 1000:g} s, best of {rounds} round{'s' if rounds > 1 else ''} each, in turns"
    return [
        row(f"look (_fetch_all), answers in columns (read_packed); {label}", round(best[True] * 1e6, 1),
            "us/call", "from read_many's answers", round(best[True] / best[False], 3)),
        row("look (_fetch_all), from read_many's answers (packed_reads off)", round(best[False] * 1e6, 1),
            "us/call"),
    ]  # fmt: skip


def _narrow_side_by_side(polls: int, rounds: int) -> list[Row]:
    """A reader's poll (``PolledReader._read``) at the scenario's width and at ``NARROW``'s, ``polls``
    polls each, in turns (each run checked to deliver every event once); the best round of each."""
    runs = {
        "full": load_scenario(PRAVEGA_SCALE, [f"duration_ms={polls // 10}"]),  # 1,000 readers: 10 polls/ms
        "narrow": load_scenario(PRAVEGA_SCALE, [f"duration_ms={polls * 10}", *NARROW]),  # 10: 0.1 a ms
    }
    best: dict[str, float] = {}
    for _ in range(rounds):
        for name, scenario in runs.items():
            result, per_poll = _timed_run(scenario, PolledReader, "_read")
            _delivered_once(result.summary, f"the {name}")
            best[name] = min(best.get(name, per_poll), per_poll)
    label = f"{polls:,} polls, best of {rounds} round{'s' if rounds > 1 else ''} each, in turns"
    return [
        row(f"a reader's poll (_read), 4,096 segments, 1,000 readers; {label}", round(best["full"] * 1e6, 1),
            "us/call"),
        row("a reader's poll (_read), 41 segments, 10 readers (the same work a poll)",
            round(best["narrow"] * 1e6, 1), "us/call", "4,096 segments, 1,000 readers",
            round(best["narrow"] / best["full"], 3)),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> list[Row]:
    return module_main(run, argv, __doc__, "1 s simulated, not 3")


if __name__ == "__main__":
    main()
