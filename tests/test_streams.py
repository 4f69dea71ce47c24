"""Stream metadata (the controller): create, scale, successors, cuts, seal, delete, persistence."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from segmentstore import (
    InvalidArgumentError,
    InvalidScaleError,
    ManualClock,
    SegmentNotFoundError,
    SegmentStore,
    SegmentStoreError,
    StreamController,
    StreamCut,
    StreamExistsError,
    StreamNotFoundError,
    StreamNotSealedError,
    StreamSealedError,
)
from segmentstore.client import EmbeddedClient
from segmentstore.controller.controller import STREAMS_SEGMENT, controller_of
from segmentstore.limits import MAX_STREAM_SEGMENTS

S = "scope/s"


@pytest.fixture
def client(store: SegmentStore) -> EmbeddedClient:
    return EmbeddedClient(store)


def active_ranges(client: EmbeddedClient, stream: str = S) -> list[tuple[float, float]]:
    return [(s.key_low, s.key_high) for s in client.get_stream(stream).active_segments]


def snapshot(store: SegmentStore, stream: str = S) -> Any:
    """Everything a failed operation must leave unchanged."""
    ctl = controller_of(store)
    infos = {n: store.get_info(n) for n in store.list_segments()}
    return ctl.get_stream(stream), ctl.list_streams(), infos


# ---------------------------------------------------------------------- create and query
def test_create_splits_key_space_evenly(client: EmbeddedClient, clock: ManualClock) -> None:
    info = client.create_stream(S, 4)
    assert not info.sealed and info.epoch == 0
    segs = info.active_segments
    assert [(s.key_low, s.key_high) for s in segs] == [(0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0)]
    assert [s.number for s in segs] == [0, 1, 2, 3]
    for s in segs:
        assert s.stream == S and s.epoch == 0 and s.name == f"{S}/{s.number}.#epoch.0"
        assert s.creation_time == clock.now() == client.get_info(s.name).creation_time
        assert client.get_segment(s.name) == s
        assert client.get_successors(s.name) == ()
    assert client.get_stream(S) == info


def test_list_streams_with_pattern(client: EmbeddedClient) -> None:
    for name in ("a/x", "a/y", "b/x"):
        client.create_stream(name)
    assert client.list_streams() == ["a/x", "a/y", "b/x"]
    assert client.list_streams("a/*") == ["a/x", "a/y"]
    assert client.list_streams("*/x") == ["a/x", "b/x"]
    assert client.list_streams("c/*") == []


@pytest.mark.parametrize("name", ["noslash", "a/b/c", "/x", "a/", "_system/x", "a/b c", "a/#b", 7, ""])
def test_bad_stream_names(client: EmbeddedClient, name: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="stream name"):
        client.create_stream(name)
    assert client.list_streams() == []


@pytest.mark.parametrize("n", [0, -1, True, 1.0, "2", MAX_STREAM_SEGMENTS + 1])
def test_bad_initial_segments(client: EmbeddedClient, n: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="initial_segments"):
        client.create_stream(S, n)
    assert client.list_streams() == []


def test_missing_and_duplicate_streams(client: EmbeddedClient) -> None:
    client.create_stream(S)
    with pytest.raises(StreamExistsError, match="scope/s"):
        client.create_stream(S, 3)
    assert len(client.get_stream(S).active_segments) == 1
    for call in (client.get_stream, client.get_head_cut, client.get_tail_cut, client.seal_stream):
        with pytest.raises(StreamNotFoundError, match="scope/none"):
            call("scope/none")
    with pytest.raises(SegmentNotFoundError, match="nope"):
        client.get_segment("nope")
    with pytest.raises(SegmentNotFoundError):
        client.get_successors("scope/s/9.#epoch.0")


# ---------------------------------------------------------------------- scaling
def test_split_creates_successors_and_seals_predecessor(client: EmbeddedClient, clock: ManualClock) -> None:
    client.create_stream(S, 2)
    old = client.get_stream(S).active_segments[1]
    client.append(old.name, b"data")
    clock.advance(100)
    new = client.scale_stream(S, [old.name], [(0.5, 0.6), (0.6, 1.0)])
    assert [(s.key_low, s.key_high) for s in new] == [(0.5, 0.6), (0.6, 1.0)]
    assert all(s.epoch == 1 and s.creation_time == clock.now() for s in new)
    assert [s.number for s in new] == [2, 3]
    assert client.get_info(old.name).sealed and client.get_info(old.name).length == 4
    succ = client.get_successors(old.name)
    assert [x.segment for x in succ] == list(new)
    assert all(x.predecessors == (old.name,) for x in succ)
    info = client.get_stream(S)
    assert info.epoch == 1 and active_ranges(client) == [(0.0, 0.5), (0.5, 0.6), (0.6, 1.0)]
    assert client.get_segment(old.name) == old  # sealed segments stay queryable


def test_merge_adjacent_segments(client: EmbeddedClient) -> None:
    segs = client.create_stream(S, 3).active_segments
    (merged,) = client.scale_stream(S, [segs[2].name, segs[1].name], [(1 / 3, 1.0)])
    assert (merged.key_low, merged.key_high) == (segs[1].key_low, 1.0)
    for old in segs[1:]:
        (x,) = client.get_successors(old.name)
        assert x.segment == merged and set(x.predecessors) == {segs[1].name, segs[2].name}
    assert client.get_successors(segs[0].name) == ()
    assert active_ranges(client) == [(0.0, segs[0].key_high), (segs[0].key_high, 1.0)]


def test_scale_snaps_nearly_equal_boundaries(client: EmbeddedClient) -> None:
    segs = client.create_stream(S, 10).active_segments
    new = client.scale_stream(S, [s.name for s in segs[:3]], [(0.0, 0.15), (0.15, 0.1 + 0.2)])
    assert new[-1].key_high == segs[2].key_high  # 0.30000000000000004 snapped to 0.3
    store_ctl = controller_of(client.store)
    store_ctl._check()


def test_successors_are_created_before_predecessors_are_sealed(store: SegmentStore) -> None:
    calls: list[tuple[str, str]] = []

    class Recorder:
        def __getattr__(self, attr: str) -> Any:
            fn = getattr(store, attr)
            if attr in ("create_segment", "seal", "append"):

                def rec(name: str, *a: Any, **k: Any) -> Any:
                    calls.append((attr, name))
                    return fn(name, *a, **k)

                return rec
            return fn

    ctl = StreamController(Recorder())  # type: ignore[arg-type]
    seg = ctl.create_stream(S, 1).active_segments[0]
    calls.clear()
    ctl.scale_stream(S, [seg.name], [(0.0, 0.5), (0.5, 1.0)])
    assert calls == [
        ("create_segment", f"{S}/1.#epoch.1"),
        ("create_segment", f"{S}/2.#epoch.1"),
        ("append", STREAMS_SEGMENT),
        ("seal", seg.name),
    ]


BAD_SCALES: list[tuple[Any, Any, str]] = [
    ([], [(0.0, 1.0)], "non-empty"),
    ("scope/s/0.#epoch.0", [(0.0, 0.5)], "non-empty"),
    (["scope/s/0.#epoch.0", "scope/s/0.#epoch.0"], [(0.0, 0.5)], "twice"),
    (["scope/s/9.#epoch.0"], [(0.0, 0.5)], "not a segment"),
    ([["scope/s/0.#epoch.0"]], [(0.0, 0.5)], "not a str"),
    (["scope/s/0.#epoch.0"], [], "empty"),
    (["scope/s/0.#epoch.0"], [(0.0, 0.4)], "must be equal"),
    (["scope/s/0.#epoch.0"], [(0.0, 0.2), (0.3, 0.5)], "must be equal"),
    (["scope/s/0.#epoch.0"], [(0.0, 0.3), (0.2, 0.5)], "overlaps"),
    (["scope/s/0.#epoch.0"], [(0.0, 0.5), (0.5, 1.0)], "must be equal"),
    (["scope/s/0.#epoch.0"], [(0.3, 0.2), (0.0, 0.5)], "low < high"),
    (["scope/s/0.#epoch.0"], [(-0.5, 0.5)], "low < high"),
    (["scope/s/0.#epoch.0"], [(0.0, float("nan"))], "non-numeric"),
    (["scope/s/0.#epoch.0"], [(0.0, "0.5")], "non-numeric"),
    (["scope/s/0.#epoch.0"], [(0.0,)], "pair"),
    (["scope/s/0.#epoch.0", "scope/s/1.#epoch.0"], [(0.0, 0.5)], "must be equal"),
]


@pytest.mark.parametrize(("seal", "ranges", "match"), BAD_SCALES)
def test_bad_scale_changes_nothing(
    client: EmbeddedClient, store: SegmentStore, seal: Any, ranges: Any, match: str
) -> None:
    client.create_stream(S, 2)
    before = snapshot(store)
    with pytest.raises(InvalidScaleError, match=match):
        client.scale_stream(S, seal, ranges)
    assert snapshot(store) == before


def test_scale_of_sealed_segment_is_rejected(client: EmbeddedClient, store: SegmentStore) -> None:
    seg = client.create_stream(S).active_segments[0]
    client.scale_stream(S, [seg.name], [(0.0, 0.5), (0.5, 1.0)])
    before = snapshot(store)
    with pytest.raises(InvalidScaleError, match="sealed already"):
        client.scale_stream(S, [seg.name], [(0.0, 1.0)])
    assert snapshot(store) == before


# ---------------------------------------------------------------------- seal, delete, cuts
def test_seal_stream(client: EmbeddedClient) -> None:
    segs = client.create_stream(S, 2).active_segments
    client.seal_stream(S)
    client.seal_stream(S)  # idempotent
    info = client.get_stream(S)
    assert info.sealed and info.active_segments == segs
    assert all(client.get_info(s.name).sealed for s in segs)
    assert all(client.get_successors(s.name) == () for s in segs)
    with pytest.raises(StreamSealedError, match="scope/s"):
        client.scale_stream(S, [segs[0].name], [(0.0, 0.5)])
    with pytest.raises(StreamSealedError):
        client.begin_transaction(S)


def test_delete_stream(client: EmbeddedClient, store: SegmentStore) -> None:
    seg = client.create_stream(S).active_segments[0]
    client.scale_stream(S, [seg.name], [(0.0, 0.5), (0.5, 1.0)])
    client.begin_transaction(S)
    with pytest.raises(StreamNotSealedError, match="sealed before"):
        client.delete_stream(S)
    client.seal_stream(S)
    client.delete_stream(S)
    assert client.list_streams() == []
    assert store.list_segments() == [STREAMS_SEGMENT]
    with pytest.raises(StreamNotFoundError):
        client.delete_stream(S)
    with pytest.raises(SegmentNotFoundError):
        client.get_segment(seg.name)
    again = client.create_stream(S, 3)  # the name can be used again
    assert len(again.active_segments) == 3 and again.epoch == 0


def test_head_and_tail_cuts(client: EmbeddedClient) -> None:
    a, b = client.create_stream(S, 2).active_segments
    client.append(a.name, b"x" * 10)
    client.append(b.name, b"y" * 3)
    new = client.scale_stream(S, [b.name], [(0.5, 0.7), (0.7, 1.0)])
    client.append(new[0].name, b"z" * 5)
    client.truncate(a.name, 4)
    head = client.get_head_cut(S)
    assert head.as_dict() == {a.name: 4, b.name: 0}
    tail = client.get_tail_cut(S)
    assert tail.as_dict() == {a.name: 10, new[0].name: 5, new[1].name: 0}
    assert [n for n, _ in tail.positions] == sorted(tail.as_dict())
    assert StreamCut.from_json(tail.to_json()) == tail


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[]",
        '{"stream": "a/b"}',
        '{"stream": "a/b", "positions": [["x", -1]]}',
        '{"stream": "a/b", "positions": [["x", 1], ["x", 2]]}',
        '{"stream": "a/b", "positions": [[1]]}',
    ],
)
def test_bad_stream_cut_json(text: str) -> None:
    with pytest.raises(InvalidArgumentError):
        StreamCut.from_json(text)


# ---------------------------------------------------------------------- sharing and persistence
def test_clients_of_one_store_share_one_controller(store: SegmentStore) -> None:
    c1, c2 = EmbeddedClient(store), EmbeddedClient(store)
    c1.create_stream(S, 2)
    assert c2.get_stream(S) == c1.get_stream(S)
    assert controller_of(store) is controller_of(store)


def test_metadata_is_replayed_by_a_new_controller(store: SegmentStore, clock: ManualClock) -> None:
    c = EmbeddedClient(store)
    segs = c.create_stream(S, 2).active_segments
    clock.advance(10)
    c.scale_stream(S, [segs[0].name], [(0.0, 0.25), (0.25, 0.5)])
    c.create_stream("scope/gone")
    c.seal_stream("scope/gone")
    c.delete_stream("scope/gone")
    c.create_stream("scope/sealed", 3)
    c.seal_stream("scope/sealed")
    old = controller_of(store)
    new = StreamController(store)
    new._check()
    assert new.list_streams() == old.list_streams() == ["scope/s", "scope/sealed"]
    for name in new.list_streams():
        assert new.get_stream(name) == old.get_stream(name)
        assert new.get_head_cut(name) == old.get_head_cut(name)
    assert new.get_successors(segs[0].name) == old.get_successors(segs[0].name)
    # the old controller is stale now that the new one writes
    new.create_stream("scope/more")
    with pytest.raises(SegmentStoreError, match="stale"):
        old.create_stream("scope/other")


def test_interrupted_scale_is_finished_on_reopen(store: SegmentStore) -> None:
    ctl = StreamController(store)
    seg = ctl.create_stream(S).active_segments[0]

    class CrashOnSeal:
        def __getattr__(self, attr: str) -> Any:
            if attr == "seal":
                raise RuntimeError("crash")
            return getattr(store, attr)

    crashing = StreamController(CrashOnSeal())  # type: ignore[arg-type]
    with pytest.raises(RuntimeError):
        crashing.scale_stream(S, [seg.name], [(0.0, 0.5), (0.5, 1.0)])
    assert not store.get_info(seg.name).sealed
    again = StreamController(store)
    assert store.get_info(seg.name).sealed
    assert [(s.key_low, s.key_high) for s in again.get_stream(S).active_segments] == [(0.0, 0.5), (0.5, 1.0)]
    again._check()


def test_leftovers_of_an_unrecorded_scale_are_replaced(store: SegmentStore) -> None:
    seg = StreamController(store).create_stream(S).active_segments[0]

    class CrashOnRecord:  # dies while writing the record: no clean-up runs either
        def __getattr__(self, attr: str) -> Any:
            if attr in ("append", "delete"):
                raise RuntimeError("crash")
            return getattr(store, attr)

    crashing = StreamController(CrashOnRecord())  # type: ignore[arg-type]
    with pytest.raises(RuntimeError):
        crashing.scale_stream(S, [seg.name], [(0.0, 0.5), (0.5, 1.0)])
    assert store.exists(f"{S}/1.#epoch.1")  # an empty leftover
    ctl = StreamController(store)
    assert ctl.get_stream(S).epoch == 0 and not store.get_info(seg.name).sealed
    new = ctl.scale_stream(S, [seg.name], [(0.0, 0.3), (0.3, 1.0)])
    assert [s.key_high for s in new] == [0.3, 1.0]
    ctl._check()


def test_concurrent_scaling_from_threads(store: SegmentStore) -> None:
    client = EmbeddedClient(store)
    names = [f"scope/t{i}" for i in range(4)]
    errors: list[BaseException] = []

    def work(stream: str) -> None:
        try:
            client.create_stream(stream, 2)
            for _ in range(10):
                segs = client.get_stream(stream).active_segments
                s = segs[-1]
                mid = (s.key_low + s.key_high) / 2
                client.scale_stream(stream, [s.name], [(s.key_low, mid), (mid, s.key_high)])
                segs = client.get_stream(stream).active_segments
                client.scale_stream(stream, [segs[-2].name, segs[-1].name], [(segs[-2].key_low, 1.0)])
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    controller_of(store)._check()
    assert all(client.get_stream(n).epoch == 20 for n in names)


# ---------------------------------------------------------------------- random scaling (stateful)
class ScalingMachine(RuleBasedStateMachine):
    """Random splits and merges; metadata invariants hold and a replay sees the same streams."""

    def __init__(self) -> None:
        super().__init__()
        self.store = SegmentStore(clock=ManualClock(1_000))
        self.client = EmbeddedClient(self.store)
        self.client.create_stream(S, 2)

    @rule(i=st.integers(0, 100), parts=st.integers(2, 3), data=st.data())
    def split(self, i: int, parts: int, data: st.DataObject) -> None:
        segs = self.client.get_stream(S).active_segments
        s = segs[i % len(segs)]
        cuts = sorted(data.draw(st.lists(st.floats(0.05, 0.95), min_size=parts - 1, max_size=parts - 1)))
        bounds = [s.key_low] + [s.key_low + c * (s.key_high - s.key_low) for c in cuts] + [s.key_high]
        ranges = list(itertools.pairwise(bounds))
        if any(hi - lo < 1e-6 for lo, hi in ranges):
            return
        self.client.scale_stream(S, [s.name], ranges)

    @precondition(lambda self: len(self.client.get_stream(S).active_segments) > 1)
    @rule(i=st.integers(0, 100), n=st.integers(2, 3))
    def merge(self, i: int, n: int) -> None:
        segs = self.client.get_stream(S).active_segments
        i %= len(segs) - 1
        group = segs[i : i + n]
        self.client.scale_stream(S, [s.name for s in group], [(group[0].key_low, group[-1].key_high)])

    @rule()
    def append(self) -> None:
        for s in self.client.get_stream(S).active_segments:
            self.client.append(s.name, b"e")

    @invariant()
    def consistent(self) -> None:
        controller_of(self.store)._check()

    def teardown(self) -> None:
        replay = StreamController(self.store)
        replay._check()
        assert replay.get_stream(S) == self.client.get_stream(S)
        self.store.close()


TestScaling = ScalingMachine.TestCase
TestScaling.settings = settings(max_examples=25, stateful_step_count=15)


def test_metadata_survives_a_durable_store_restart(tmp_path: Any) -> None:
    with SegmentStore(clock=ManualClock(1_000), data_dir=tmp_path) as first:
        c = EmbeddedClient(first)
        seg = c.create_stream(S, 2).active_segments[0]
        c.scale_stream(S, [seg.name], [(0.0, 0.25), (0.25, 0.5)])
        c.create_stream("scope/sealed")
        c.seal_stream("scope/sealed")
        infos = {n: c.get_stream(n) for n in c.list_streams()}
        successors = c.get_successors(seg.name)
    with SegmentStore(clock=ManualClock(1_000), data_dir=tmp_path) as second:
        c = EmbeddedClient(second)
        assert {n: c.get_stream(n) for n in c.list_streams()} == infos
        assert c.get_successors(seg.name) == successors
        controller_of(second)._check()
