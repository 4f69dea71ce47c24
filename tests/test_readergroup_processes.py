"""One reader group, readers in separate processes against a served store (issue 16).

Writers in this process append keyed events with per-key sequence numbers while the
stream splits and merges; reader processes (``bench.sim.reader_worker``, spawn context)
join the group by name and log every event, watermark and checkpoint marker they
deliver, line by line before their next read (which acknowledges it). Some are killed
with SIGKILL at random moments — declared offline by the group when their lease runs
out, or taken over by a restarted process with the same id — and new ones start; one
leaves cleanly. Afterwards, from the logs:

- every written event was delivered at least once;
- an event delivered more than once was first delivered by a killed process, and what
  a killed process had delivered of a segment and someone delivered again is a suffix
  of its deliveries there (redelivery starts at its last acknowledged position);
- exactly once for everything no killed process had delivered;
- per-key order: within each process, and the first deliveries of a key across
  processes in sequence order (by the time they were logged);
- no process delivered an event at or below a watermark it had emitted in the same
  epoch, and its watermarks strictly ascend;
- a checkpoint initiated here completed with every online reader, wherever it runs;
- the group's state log stayed bounded (compacted snapshots).
"""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

from bench.sim.reader_worker import ReaderProcesses
from readergroup.config import ReaderGroupConfig, TimeDomain
from readergroup.group_state.state import state_segment
from readergroup.reading.group import ReaderGroup
from readergroup.writing.writer import EventWriter
from segmentstore import SegmentStore, StoreConfig, WallClock
from segmentstore.client import EmbeddedClient
from segmentstore.net.server import SegmentStoreServer

pytestmark = pytest.mark.slow

S = "mp/events"
KEYS = 24


def _writer(client: EmbeddedClient, written: list[str], stop: threading.Event, seconds: float) -> None:
    """Keyed events ``key:seq`` for ``seconds``, splitting and merging the stream every 0.6 s."""
    rng = random.Random(7)
    w = EventWriter(client, S)
    seq = [0] * KEYS
    end = time.monotonic() + seconds
    next_scale = time.monotonic() + 0.6
    while time.monotonic() < end and not stop.is_set():
        batch = []
        for _ in range(20):
            k = rng.randrange(KEYS)
            batch.append(f"k{k}:{seq[k]}")
            w.write_event(f"k{k}", batch[-1].encode())
            seq[k] += 1
        w.flush()
        written.extend(batch)  # acknowledged
        if time.monotonic() >= next_scale:
            next_scale += 0.6
            active = client.get_stream(S).active_segments
            if len(active) < 5 and rng.random() < 0.6:
                seg = active[rng.randrange(len(active))]
                mid = (seg.key_low + seg.key_high) / 2
                client.scale_stream(S, [seg.name], [(seg.key_low, mid), (mid, seg.key_high)])
            elif len(active) > 1:
                i = rng.randrange(len(active) - 1)
                a, b = active[i], active[i + 1]
                client.scale_stream(S, [a.name, b.name], [(a.key_low, b.key_high)])
        time.sleep(0.01)
    w.close()


def test_readers_in_separate_processes_share_one_group(tmp_path: Path) -> None:
    store = SegmentStore(
        clock=WallClock(), config=StoreConfig(max_watermark_lag_ms=300, polling_period_ms=50)
    )
    server = SegmentStoreServer(store)
    endpoint = ("127.0.0.1", server.start())
    client = EmbeddedClient(store)
    client.create_stream(S, 3)
    cfg = ReaderGroupConfig(
        (S,),
        time_domain=TimeDomain.INGESTION_TIME,
        position_report_interval_ms=400,  # a killed reader leaves unacknowledged deliveries behind
        reader_timeout_ms=3_000,  # generous: a loaded machine must not expire a live reader
        state_snapshot_interval=50,
    )
    group = ReaderGroup("mp", cfg, client, WallClock())
    procs = ReaderProcesses(endpoint, "mp", tmp_path, read_timeout_ms=50, work_ms=0.5)
    written: list[str] = []
    stop = threading.Event()
    rng = random.Random(11)
    try:
        for rid in ("r0", "r1", "r2"):
            procs.start(rid)
        _wait_started(procs)
        writer = threading.Thread(target=_writer, args=(client, written, stop, 6.0), daemon=True)
        writer.start()
        time.sleep(1.0)
        checkpoint = None
        plan = ["kill", "kill-takeover", "checkpoint", "leave", "kill"]
        next_id = 3
        for step in plan:
            time.sleep(0.6 + rng.random() * 0.6)
            _wait_started(procs)  # a loaded machine takes seconds to start one: kill readers, not imports
            live = sorted(procs.alive())
            victim = live[rng.randrange(len(live))]
            rid = victim.split("@")[0]
            if step == "kill":
                procs.kill(victim)
                procs.start(f"r{next_id}")  # the dead one expires on its lease
                next_id += 1
            elif step == "kill-takeover":
                procs.kill(victim)
                procs.start(rid, takeover=True)  # a restart declares its old self offline
            elif step == "leave":
                procs.stop(victim)
                procs.start(f"r{next_id}")
                next_id += 1
            else:
                checkpoint = group.initiate_checkpoint("cp-mp")
        writer.join(60)
        assert not writer.is_alive()
        assert checkpoint is not None and checkpoint.result(timeout=60).name == "cp-mp"
        deadline = time.monotonic() + 120
        want = set(written)
        while time.monotonic() < deadline:
            got = {r["p"] for _, recs in procs.logs() for r in recs if r["k"] == "e"}
            if want <= got:
                break
            time.sleep(0.5)
        for name in procs.alive():
            assert procs.stop(name) == 0
        logs = dict(procs.logs())
        info = client.get_info(state_segment("mp"))
        log_bytes = info.length - info.start_offset
    finally:
        stop.set()
        procs.close()
        server.stop()
        store.close()
    _check_logs(logs, set(procs.killed), written)
    assert log_bytes < 200_000 and info.start_offset > 0, (log_bytes, info.start_offset)  # compacted


def _wait_started(procs: ReaderProcesses, timeout_s: float = 120.0) -> None:
    """Until every live reader process has joined the group (logged its start)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        logs = dict(procs.logs())
        if all(logs.get(n) and logs[n][0]["k"] == "start" for n in procs.alive()):
            return
        time.sleep(0.05)
    raise AssertionError(f"reader processes did not start within {timeout_s:g} s: {procs.alive()}")


def _check_logs(logs: dict[str, list[dict]], killed: set[str], written: list[str]) -> None:
    for name, recs in logs.items():
        assert recs and recs[0]["k"] == "start", f"{name} never started: {recs[:3]}"
        errors = [r for r in recs if r["k"] == "error"]
        assert not errors, f"{name}: {errors}"
        if name not in killed:
            assert recs[-1]["k"] == "end", f"{name} did not close cleanly"
    deliveries: dict[str, list[tuple[int, str]]] = defaultdict(list)  # payload -> (time, incarnation)
    for name, recs in logs.items():
        last_wm: dict[int, int] = {}
        per_key: dict[tuple[int, str], int] = {}
        for r in recs:
            if r["k"] == "w":
                ep = r["ep"]
                assert r["w"] > last_wm.get(ep, r["w"] - 1), f"{name}: watermarks not strictly ascending"
                last_wm[ep] = r["w"]
            elif r["k"] == "e":
                ep = r["ep"]
                assert r["it"] > last_wm.get(ep, r["it"] - 1), (
                    f"{name}: late ingestion: {r['p']} at {r['it']} after watermark {last_wm.get(ep)}"
                )
                key, seq = r["p"].split(":")
                prev = per_key.get((ep, key), -1)
                assert int(seq) > prev, f"{name}: {key} out of order: {seq} after {prev}"
                per_key[(ep, key)] = int(seq)
                deliveries[r["p"]].append((r["t"], name))
    print(
        f"written {len(written)}, delivered {sum(map(len, deliveries.values()))}, "
        f"redelivered {sum(len(d) - 1 for d in deliveries.values())}, killed {sorted(killed)}, "
        f"watermarks {sum(1 for recs in logs.values() for r in recs if r['k'] == 'w')}, "
        f"processes {sorted(logs)}"
    )
    missing = set(written) - set(deliveries)
    assert not missing, f"{len(missing)} written events never delivered, e.g. {sorted(missing)[:5]}"
    for p, ds in deliveries.items():
        ds.sort()
        if len(ds) > 1:
            assert ds[0][1] in killed, f"{p} delivered {len(ds)} times, first by {ds[0][1]}, not killed"
        by_killed = [n for _, n in ds if n in killed]
        if not by_killed:
            assert len(ds) == 1, f"{p} delivered twice though no process that delivered it died: {ds}"
    # redelivery starts where a killed reader had acknowledged: per segment, a suffix of what it delivered
    for name in killed:
        per_seg: dict[str, list[tuple[int, str]]] = defaultdict(list)
        for r in logs[name]:
            if r["k"] == "e":
                per_seg[r["s"]].append((r["o"], r["p"]))
        for seg, evs in per_seg.items():
            again = []
            for _, p in evs:
                mine = next(t for t, n in deliveries[p] if n == name)
                again.append(any(n != name and t > mine for t, n in deliveries[p]))
            if True in again:
                first = again.index(True)
                assert all(again[first:]), f"{name} on {seg}: redelivered {again}, not a suffix"
    # per-key order across processes: first deliveries in sequence order
    first_time = {p: ds[0][0] for p, ds in deliveries.items()}
    by_key: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for p, t in first_time.items():
        key, seq = p.split(":")
        by_key[key].append((int(seq), t))
    for key, items in by_key.items():
        items.sort()
        times = [t for _, t in items]
        assert times == sorted(times), f"first deliveries of {key} out of sequence order"


def test_a_reset_starts_a_new_epoch_in_every_reader_process(tmp_path: Path) -> None:
    """PIP-194 across processes: after ``reset_to`` every process re-reads in the new epoch, never the old."""
    config = StoreConfig(max_watermark_lag_ms=300, polling_period_ms=50)
    store = SegmentStore(clock=WallClock(), config=config)
    server = SegmentStoreServer(store)
    endpoint = ("127.0.0.1", server.start())
    client = EmbeddedClient(store)
    client.create_stream(S, 4)
    w = EventWriter(client, S)
    written = [f"k{i % KEYS}:{i // KEYS}" for i in range(400)]
    for p in written:
        w.write_event(p.split(":")[0], p.encode())
    w.close()
    cfg = ReaderGroupConfig((S,), time_domain=TimeDomain.INGESTION_TIME, position_report_interval_ms=100)
    group = ReaderGroup("reset", cfg, client, WallClock())
    procs = ReaderProcesses(endpoint, "reset", tmp_path, read_timeout_ms=50)
    try:
        names = [procs.start(f"r{i}") for i in range(3)]

        def delivered(epoch: int) -> set[str]:
            return {r["p"] for _, recs in procs.logs() for r in recs if r["k"] == "e" and r["ep"] == epoch}

        def reached(epoch: int) -> set[str]:
            logs = procs.logs()
            return {n for n, recs in logs if any(r["k"] in ("e", "w") and r["ep"] == epoch for r in recs)}

        def started() -> set[str]:
            return {n for n, recs in procs.logs() if any(r["k"] == "start" for r in recs)}

        # On a loaded machine a process may still be importing when the others have read
        # everything: the reset must find all three online, and the test waits for each of
        # them to deliver in the new epoch (the group hands one of two segments over from
        # a reader holding two to one holding none), not only for the events.
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and (started() != set(names) or delivered(0) != set(written)):
            time.sleep(0.2)
        assert group.reset_to(client.get_head_cut(S)) == 1
        while time.monotonic() < deadline and (delivered(1) != set(written) or reached(1) != set(names)):
            time.sleep(0.2)
        for n in names:
            assert procs.stop(n) == 0
        logs = dict(procs.logs())
    finally:
        procs.close()
        server.stop()
        store.close()
    again = {r["p"] for recs in logs.values() for r in recs if r["k"] == "e" and r["ep"] == 1}
    assert again == set(written)
    for n, recs in logs.items():
        epochs = [r["ep"] for r in recs if r["k"] in ("e", "w")]
        assert epochs == sorted(epochs), f"{n} delivered an old epoch after the new one"
        assert 1 in epochs, f"{n} never reached the new epoch"
