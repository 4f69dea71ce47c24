"""Shared reader-group state through a served store: updates per second, joining, a bounded log.

The group's state is a log of update batches in the store (``readergroup.group_state.synchronizer``);
every change is a conditional append. Against ``ingestwm serve`` in another process,
over a stream of 10^3 segments (``--quick``: 100, ``--tiny``: 20) of 1,024 events each:

- ``updates 1 process``: one process appending position reports (``ReaderGroupState.report``)
  as fast as it can: updates per second, each a conditional append plus its apply;
- ``updates 3 processes``: three processes doing the same at once on the same log,
  each reporting its own segments: updates per second in all (``ratio``: against the
  single process), ``conflicts/update`` (appends lost to another process and retried
  after catching up) and ``slowest process share`` (its updates / a third of the total:
  1.0 is fair). Optimistic concurrency favours the process that just appended, so in
  this tight loop one process may starve the others; readers update once per report
  interval, not in a loop;
- ``join``: a new process joins the group (``ReaderGroup.open``: connect, load the
  snapshot and the batches after it) — milliseconds; ``first segments``: until its
  new reader holds its share of segments (one read);
- ``log retained``: bytes of the state log kept (from its start offset) against all bytes
  ever appended to it: compaction keeps the log bounded (``ratio`` = kept / appended).

Run ``python -m bench.perf.bench_group [--quick | --tiny]``; ``run(size)`` returns the rows.
"""

from __future__ import annotations

import multiprocessing
from typing import Any

from segmentstore.clock import monotonic_s

from .serving import serve_in_process
from .suite import Row, Size, module_main, row, sized

__all__ = ["run", "main"]

STREAM = "bench/group"
GROUP = "bench-group"
EVENTS_PER_SEGMENT = 1_024
"""Events written to each segment before the updates: every reported position is an event's end,
so the new reader of ``join`` reads from real positions (a segment read to its end gets no more
reports; at ~10^4 updates/s over 20 segments or more, that takes seconds)."""


def _frame() -> bytes:
    from readergroup.format.events import encode_event

    return encode_event("k", bytes(8))


def _updater(endpoint: tuple[str, int], rid: str, seconds: float, go: Any, out: Any) -> None:
    """Report positions an event further each time, round its segments, for ``seconds``; put the counts."""
    from readergroup.group_state.state import ReaderGroupState
    from segmentstore import WallClock
    from segmentstore.client import RemoteClient

    with RemoteClient(endpoint, timeout_s=60) as client:
        st = ReaderGroupState.open(client, GROUP, WallClock())
        st.add_reader(rid)
        out.put("ready")
        go.wait(60)
        segs = [seg.name for seg, _, _ in st.acquire(rid)] or sorted(st.segments_of(rid))
        sync = st.synchronizer
        before = sync.stats.conflicts
        step = len(_frame())
        end = step * EVENTS_PER_SEGMENT
        pos = {name: st.model.entries[name].position for name in segs}  # one event further each report
        n = 0
        t_end = monotonic_s() + seconds
        while monotonic_s() < t_end and segs:
            name = segs[n % len(segs)]
            if pos[name] + step > end:  # read to its end: no further position to report
                segs.remove(name)
                continue
            pos[name] += step
            st.report(rid, [(name, pos[name], pos[name])])
            n += 1
        st.remove_reader(rid)
        out.put((n, sync.stats.conflicts - before, sync.stats.snapshots_written))


def _joiner(endpoint: tuple[str, int], out: Any) -> None:
    """A new process: time to join the group, and until its reader holds its segments."""
    from readergroup.reading.group import ReaderGroup
    from segmentstore import WallClock
    from segmentstore.client import RemoteClient

    t0 = monotonic_s()
    with RemoteClient(endpoint, timeout_s=60) as client:
        group = ReaderGroup.open(GROUP, client, WallClock())
        t1 = monotonic_s()
        reader = group.create_reader("joiner")
        reader.read_next_event(timeout_ms=0)
        t2 = monotonic_s()
        held = len(group.state.segments_of("joiner"))
        reader.close()
    out.put((t1 - t0, t2 - t1, held))


def _updates(endpoint: tuple[str, int], procs: int, seconds: float) -> tuple[float, float, float]:
    ctx = multiprocessing.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    ps = [
        ctx.Process(target=_updater, args=(endpoint, f"u{procs}-{i}", seconds, go, out)) for i in range(procs)
    ]
    for p in ps:
        p.start()
    for _ in ps:  # every process joined (interpreter start, snapshot load)
        assert out.get(timeout=120) == "ready"
    go.set()
    got = [out.get(timeout=120) for _ in ps]
    for p in ps:
        p.join(60)
    updates = sum(g[0] for g in got)
    conflicts = sum(g[1] for g in got)
    share = min(g[0] for g in got) * procs / max(1, updates)
    return updates / seconds, conflicts / max(1, updates), share


def run(size: Size = "full") -> list[Row]:
    from readergroup.config import ReaderGroupConfig, TimeDomain
    from readergroup.group_state.state import state_segment
    from readergroup.reading.group import ReaderGroup
    from segmentstore import WallClock
    from segmentstore.client import RemoteClient

    segments = sized(size, 20, 100, 1_000)
    seconds = sized(size, 0.3, 1.0, 3.0)
    server, port = serve_in_process()
    endpoint = ("127.0.0.1", port)
    try:
        with RemoteClient(endpoint, timeout_s=60) as client:
            client.create_stream(STREAM, segments)
            data = _frame() * EVENTS_PER_SEGMENT
            for seg in client.get_stream(STREAM).active_segments:
                client.append(seg.name, data)
            cfg = ReaderGroupConfig((STREAM,), time_domain=TimeDomain.INGESTION_TIME)
            ReaderGroup(GROUP, cfg, client, WallClock())
            one, _, _ = _updates(endpoint, 1, seconds)
            three, conflicts, share = _updates(endpoint, 3, seconds)
            ctx = multiprocessing.get_context("spawn")
            out = ctx.Queue()
            p = ctx.Process(target=_joiner, args=(endpoint, out))
            p.start()
            join_s, first_s, held = out.get(timeout=120)
            p.join(60)
            info = client.get_info(state_segment(GROUP))
    finally:
        server.terminate()
        server.wait(30)
    kept = info.length - info.start_offset
    return [
        row(f"updates 1 process ({segments} segments)", round(one), "updates/s"),
        row("updates 3 processes", round(three), "updates/s", "1 process", round(three / one, 2)),
        row("conflicts/update (3 processes)", round(conflicts, 4), "ratio"),
        row("slowest process share (3 processes)", round(share, 3), "ratio"),
        row(f"join ({segments} segments)", round(join_s * 1000, 1), "ms"),
        row(f"first segments ({held} held)", round(first_s * 1000, 1), "ms"),
        row("log retained", kept, "bytes", "appended", round(kept / max(1, info.length), 4)),
    ]


def main(argv: list[str] | None = None) -> list[Row]:
    return module_main(run, argv, __doc__, "100 segments, 1 s per measurement")


if __name__ == "__main__":
    main()
