"""The stream controller's log compacts itself (segmentstore.controller.log_snapshots): a snapshot of the
metadata and the commits remembered, then a truncation; a restart answers exactly as before, through
scales, seals, deletes, truncations, config updates, scopes and transactions committed directly or
rolled over a scale; a snapshot cut short is ignored; the log stays proportional to the metadata."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from faults import writes_cut_after_first

from segmentstore import ManualClock, SegmentStore, StoreConfig, StreamController, TickingClock
from segmentstore.client import EmbeddedClient, RemoteClient
from segmentstore.controller import controller as controller_module
from segmentstore.controller.controller import STREAMS_SEGMENT, controller_of
from segmentstore.controller.model import StreamMetadata
from segmentstore.controller.stream_config import StreamConfig
from segmentstore.errors import StreamSealedError
from segmentstore.net.server import SegmentStoreServer


def _durable(d: Path, clock: ManualClock) -> SegmentStore:
    return SegmentStore(clock, StoreConfig(advancer_thread=False), data_dir=d)


def _answers(store: SegmentStore) -> dict[str, Any]:
    """Everything a client can ask the controller about every stream, scope and segment."""
    ctl = controller_of(store)
    out: dict[str, Any] = {"scopes": ctl.list_scopes()}
    for name in ctl.list_streams():
        segs = ctl._meta.streams[name].segments
        out[name] = (
            ctl.get_stream(name),
            ctl.get_stream_config(name),
            ctl.get_head_cut(name),
            {n: ctl.get_successors(n) for n in segs if not segs[n].deleted},
            [ctl.epoch_segments(name, e) for e in range(ctl.get_stream(name).epoch + 1)],
        )
    return out


def test_a_snapshot_of_the_metadata_is_the_metadata(tmp_path: Path) -> None:
    clock = ManualClock(1_000_000)
    with _durable(tmp_path, clock) as store:
        c = EmbeddedClient(store)
        ctl = controller_of(store)
        ctl.create_scope("empty")
        seg = c.create_stream("sc/a", 2).active_segments[0]
        c.scale_stream("sc/a", [seg.name], [(0.0, 0.25), (0.25, 0.5)])
        c.create_stream("sc/b", 3)
        c.seal_stream("sc/b")
        ctl.update_stream("sc/a", StreamConfig(min_segments=3, tags=("t",)))
        items = ctl._meta.snapshot_items()
        again = StreamMetadata.from_snapshot(items)
        again._check()
        assert again.snapshot_items() == items
        assert again.scopes == ctl._meta.scopes and set(again.by_segment) == set(ctl._meta.by_segment)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_log_compacts_and_every_restart_answers_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    monkeypatch.setattr(controller_module, "COMPACT_MIN_BYTES", 1_000)
    monkeypatch.setattr(controller_module, "SNAPSHOT_PART_BYTES", 600)  # snapshots of several parts
    rng = random.Random(seed)
    clock = ManualClock(1_000_000)
    store = _durable(tmp_path, clock)
    c = EmbeddedClient(store)
    live: list[str] = []
    committed: list[tuple[str, list[str]]] = []
    made = 0
    try:
        for step in range(160):
            clock.advance(rng.choice([1, 5, 50]))
            ctl = controller_of(store)
            open_ = [s for s in live if not c.get_stream(s).sealed]
            op = rng.choice(
                ["create", "scale", "scale", "txn", "txn", "seal", "delete", "truncate", "update"]
            )
            if op == "create" or not open_:
                made += 1
                name = f"sc{made % 3}/s{made}"
                c.create_stream(name, rng.randint(1, 3))
                live.append(name)
            elif op == "scale":
                name = rng.choice(open_)
                seg = rng.choice(c.get_stream(name).active_segments)
                mid = (seg.key_low + seg.key_high) / 2
                c.scale_stream(name, [seg.name], [(seg.key_low, mid), (mid, seg.key_high)])
            elif op == "txn":  # committed as it is, or rolled over a scale made meanwhile
                name = rng.choice(open_)
                info = c.begin_transaction(name)
                for t in info.segments:
                    c.append(t.name, b"txn")
                if rng.random() < 0.4:
                    seg = c.get_stream(name).active_segments[0]
                    mid = (seg.key_low + seg.key_high) / 2
                    c.scale_stream(name, [seg.name], [(seg.key_low, mid), (mid, seg.key_high)])
                names = [t.name for t in info.segments]
                c.commit_transaction(name, names)
                committed.append((name, names))
            elif op == "seal":
                c.seal_stream(rng.choice(open_))
            elif op == "delete" and len(live) > 1:
                name = rng.choice(live)
                c.seal_stream(name)
                c.delete_stream(name)
                live.remove(name)
            elif op == "truncate":
                name = rng.choice(open_)
                ctl.truncate_stream(name, dict(c.get_tail_cut(name).positions))
            elif op == "update":
                ctl.update_stream(
                    rng.choice(open_), StreamConfig(min_segments=rng.randint(1, 3), tags=("x",))
                )
            ctl._check()
            if step % 20 == 19:
                before = _answers(store)
                store.close()
                store = _durable(tmp_path, clock)
                c = EmbeddedClient(store)
                assert _answers(store) == before, step
                controller_of(store)._check()
                for name, names in committed[-5:]:  # a commit sent again is recognised, as before
                    if name in live:
                        with_sealed = c.get_stream(name).sealed
                        try:
                            c.commit_transaction(name, names)
                        except StreamSealedError:
                            assert with_sealed
        log = store.get_info(STREAMS_SEGMENT)
        assert log.start_offset > 0  # truncated at a snapshot
        growth = controller_of(store)._growth
        assert growth.since <= max(1_000, 2 * growth.snapshot) + 2_000  # (+ one change's records)
        assert log.length - log.start_offset == growth.snapshot + growth.since
    finally:
        store.close()


def test_a_snapshot_cut_short_is_ignored_and_compaction_waits_between_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(controller_module, "SNAPSHOT_PART_BYTES", 200)
    clock = ManualClock(1_000_000)
    with _durable(tmp_path, clock) as store:
        c = EmbeddedClient(store)
        for i in range(6):
            c.create_stream(f"sc/s{i}", 2)
        ctl = controller_of(store)
        with writes_cut_after_first(ctl):  # the first part lands, then the store refuses
            assert ctl.compact() == 0
        c.create_stream("sc/after")  # a record after the parts: the snapshot was cut short
        before = _answers(store)
    with _durable(tmp_path, clock) as store:
        assert _answers(store) == before
        ctl = controller_of(store)
        ctl._check()
        dropped = ctl.compact()
        assert dropped > 0 and store.get_info(STREAMS_SEGMENT).start_offset > 0
        with ctl._mutating(), pytest.raises(Exception, match="only between changes"):
            ctl.compact()
    with _durable(tmp_path, clock) as store:
        assert _answers(store) == before
        controller_of(store)._check()


@pytest.mark.parametrize("via", ["embedded", "remote"])
def test_commits_on_a_ticking_clock_compact_and_a_new_controller_replays_the_snapshot(
    monkeypatch: pytest.MonkeyPatch, via: str
) -> None:
    """Transactions committed (and one rolled over a scale) on a clock that moves by itself, over
    either client: the log compacts between the commits, and a controller opened on the store
    answers as the one that wrote it, resent commits included."""
    monkeypatch.setattr(controller_module, "COMPACT_MIN_BYTES", 3_000)
    monkeypatch.setattr(controller_module, "SNAPSHOT_PART_BYTES", 500)
    store = SegmentStore(clock=TickingClock(1_000_000))
    server = SegmentStoreServer(store) if via == "remote" else None
    c = EmbeddedClient(store) if server is None else RemoteClient(("127.0.0.1", server.start()), timeout_s=20)
    try:
        c.create_stream("sc/t", 3)
        txns: list[list[str]] = []
        for i in range(120):
            info = c.begin_transaction("sc/t")
            for t in info.segments:
                c.append(t.name, b"txn %d" % i)
            if i % 30 == 29:  # committed after a scale: rolled over
                seg = c.get_stream("sc/t").active_segments[-1]
                mid = (seg.key_low + seg.key_high) / 2
                c.scale_stream("sc/t", [seg.name], [(seg.key_low, mid), (mid, seg.key_high)])
            txns.append([t.name for t in info.segments])
            c.commit_transaction("sc/t", txns[-1])
        assert store.get_info(STREAMS_SEGMENT).start_offset > 0
        before = _answers(store)
        replayed = StreamController(store)  # the writer's controller is stale after this one's writes
        replayed._check()
        assert {n: replayed.get_stream(n) for n in replayed.list_streams()} == {
            n: before[n][0] for n in before if n != "scopes"
        }
        lengths = {n: store.get_info(n).length for n in store.list_segments()}
        for names in txns[-3:]:
            replayed.commit_transaction("sc/t", names)  # recognised: nothing merged again
        assert {n: store.get_info(n).length for n in store.list_segments()} == lengths
        store._check()
    finally:
        if server is not None:
            c.close()
            server.stop()
        store.close()
