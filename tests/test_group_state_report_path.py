"""A reader's report on its own path (issue 46): the same bytes in the log and the same replicas as an update.

``ReaderGroupState.sync_report`` frames a report with ``ReportFramer`` and applies it with
``GroupModel.apply_report`` instead of building a ``Report`` and going through
``encode_batch`` and ``GroupModel.apply``. These tests hold it to exactly what the
generic path appends and applies: the frame byte for byte, the replica that appended it
equal to one that decoded it from the log, a rejection rejected alike, and a concurrent
writer in another replica detected and handled as before (catch up and report again, or
nothing when the layout moved). Over the embedded and the remote client.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from readergroup.config import ReaderGroupConfig, TimeDomain
from readergroup.group_state import group_updates
from readergroup.group_state.group_model import GroupModel
from readergroup.group_state.group_updates import (
    Acquire,
    AddReader,
    Position,
    Report,
    ReportFramer,
    decode_batches,
    encode_batch,
)
from readergroup.group_state.state import ReaderGroupState, state_segment
from segmentstore import ConnectionLostError, ManualClock, StreamSegment
from segmentstore.client import SegmentStoreClient

S = "test/reports"
_NAMES = st.text(max_size=12)  # any str: quotes, backslashes, control and non-ASCII characters
_INTS = st.integers(-(2**70), 2**70)  # beyond int64 too: JSON writes any int alike


class _Name(str):
    pass


class _Small(IntEnum):
    ONE = 1


# ---------------------------------------------------------------------- the frame
@given(
    _NAMES,
    _NAMES,
    st.integers(0, 2**63 - 1),
    _NAMES,
    _INTS,
    _INTS,
    st.lists(st.lists(st.tuples(_NAMES, _INTS, _INTS), max_size=4).map(tuple), min_size=1, max_size=3),
)
def test_a_report_is_framed_as_encode_batch_frames_it(
    group_id: str,
    origin: str,
    seq: int,
    reader_id: str,
    token: int,
    epoch: int,
    reports: list[tuple[Position, ...]],
) -> None:
    """The same bytes for every report, also from the names the framer kept from earlier frames."""
    framer = ReportFramer(group_id, origin)
    for positions in reports:
        frame = framer.frame(seq, reader_id, token, epoch, positions)
        assert frame == encode_batch(group_id, origin, seq, [Report(reader_id, token, epoch, positions)])
        (batch,), used = decode_batches("seg", frame, 0)
        assert used == len(frame) and batch.updates == (Report(reader_id, token, epoch, positions),)


@pytest.mark.parametrize(
    "args",
    [
        (True, "r", 1, 0, (("a", 1, 2),)),  # a bool seq
        (1, "r", False, 0, (("a", 1, 2),)),  # a bool token
        (1, "r", 1, _Small.ONE, (("a", 1, 2),)),  # an int subclass
        (1, _Name("r"), 1, 0, (("a", 1, 2),)),  # a str subclass
        (1, "r", 1, 0, ((_Name("a"), 1, 2),)),
        (1, "r", 1, 0, (("a", True, 2),)),
        (1, "r", 1, 0, (("a", 1, 2.0),)),
        (1, "r", 1, 0, (("a", 1),)),  # no triple
        (1, "r", 1, 0, (("a", 1, 2, 3),)),
    ],
)
def test_a_value_of_another_type_is_left_to_encode_batch(args: tuple[Any, ...]) -> None:
    framer = ReportFramer("gid", "origin")
    assert framer.frame(1, "r", 1, 0, (("a", 1, 2),)) is not None  # (the names kept: no shortcut)
    assert framer.frame(*args) is None


def test_the_names_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group_updates, "_MAX_NAMES", 2)
    monkeypatch.setattr(group_updates, "_KEPT_NAMES", {})
    monkeypatch.setattr(group_updates, "_KEPT_READERS", {})
    framer = ReportFramer("gid", "origin")
    for i in range(7):
        positions = tuple((f"seg{i + k}", i, -i) for k in range(3))
        assert framer.frame(i, f"r{i % 3}", i, 0, positions) == encode_batch(
            "gid", "origin", i, [Report(f"r{i % 3}", i, 0, positions)]
        )
        assert len(framer._names) <= 3 and len(framer._readers) <= 2


def test_framers_share_the_text_they_keep() -> None:
    """Framers of other groups and origins take the names and reader ids another framer quoted: same bytes."""
    positions = (("s/x/0.#epoch.0", 5, 7), ('s/"q"/1.#epoch.0', 6, 8))
    framers = [ReportFramer(g, o) for g, o in [("g1", "o1"), ("g2", 'o"2'), ("g1", "o1")]]
    for i, framer in enumerate(framers * 2):
        frame = framer.frame(i, "r\\1", i, 2, positions[: 1 + i % 2])
        assert frame == encode_batch(
            framer.group_id, framer.origin, i, [Report("r\\1", i, 2, positions[: 1 + i % 2])]
        )
    assert framers[0]._names is framers[1]._names and framers[0]._readers is framers[2]._readers


# ---------------------------------------------------------------------- applying
def test_apply_report_changes_the_replica_as_apply_does() -> None:
    """Valid and rejected reports alike: the same answers, the same replica, the same count of rejections."""
    segs = [StreamSegment("s/x", i, 0, f"s/x/{i}.#epoch.0", i / 4, (i + 1) / 4, 1_000) for i in range(4)]
    config = ReaderGroupConfig(("s/x",), time_domain=TimeDomain.INGESTION_TIME)
    generic = GroupModel.initial("g", "gid", config, [(s, 0, 999) for s in segs])
    for i, u in enumerate([AddReader("r"), AddReader("q"), Acquire("r", 0, 0), Acquire("q", 1, 0)]):
        assert generic.apply(u, i)
    own = GroupModel.from_obj(generic.to_obj())
    own.layout = generic.layout  # (counted by this replica since it loaded: not in the snapshot)
    held = sorted(generic.readers["r"].segments)
    other = sorted(generic.readers["q"].segments)[0]
    reports = [
        ("r", 0, 0, ((held[0], 10, 1_005), (held[1], 0, 1_000))),
        ("r", 0, 0, ((held[0], 12, 1_004),)),  # a watermark lower than the state's: kept
        ("r", 0, 0, ((held[0], 20, 2_000), (held[1], 5, 990))),
        ("r", 0, 0, ((held[1], 30, 3_000), (held[0], 3, 3_000))),  # below the acknowledged position
        ("r", 0, 0, ((held[0], 40, 3_000), (other, 5, 3_000))),  # a segment it does not hold
        ("r", 0, 0, ((held[0], True, 3_000),)),  # a bool position
        ("r", 7, 0, ((held[0], 50, 3_000),)),  # another token
        ("r", 0, 1, ((held[0], 50, 3_000),)),  # another epoch
        ("z", 0, 0, ((held[0], 50, 3_000),)),  # no such reader
        ("r", 0, 0, ((held[0], 60, 4_000), (held[1], 60, 4_000))),
    ]
    for i, (rid, token, epoch, positions) in enumerate(reports):
        ok = own.apply_report(rid, token, epoch, positions)
        assert ok == generic.apply(Report(rid, token, epoch, positions), 10 + i), i
        assert own.to_obj() == generic.to_obj(), i
        assert (own.rejected, own.layout, own.floor) == (generic.rejected, generic.layout, generic.floor)
        own._check()
    assert own.rejected == 6


# ---------------------------------------------------------------------- through the state log
def _group(client: SegmentStoreClient, clock: ManualClock) -> tuple[ReaderGroupState, ReaderGroupState]:
    """4 segments; replica ``a`` with reader ``ra``, ``b`` (another process's) with ``rb``."""
    client.create_stream(S, 4)
    config = ReaderGroupConfig((S,), time_domain=TimeDomain.INGESTION_TIME, state_snapshot_interval=1_000)
    a = ReaderGroupState.create(client, "g", config, clock)
    b = ReaderGroupState.open(client, "g", clock)
    a.add_reader("ra")
    b.add_reader("rb")
    a.refresh()
    a.acquire("ra")
    b.refresh()
    b.acquire("rb")
    a.refresh()
    assert len(a.segments_of("ra")) == len(b.segments_of("rb")) == 2
    return a, b


def _acked(s: ReaderGroupState, rid: str, step: int) -> list[Position]:
    m = s.model
    return [
        (n, m.entries[n].position + step, m.entries[n].watermark + step) for n in sorted(s.segments_of(rid))
    ]


def _appends(client: SegmentStoreClient) -> tuple[list[bytes], Callable[[], None]]:
    """Record every frame appended to the group's log (landed or not); returns them and an undo."""
    real = client.append
    frames: list[bytes] = []

    def recording(name: str, data: bytes, expected_offset: int | None = None, **kw: Any) -> Any:
        if name == state_segment("g"):
            frames.append(data)
        return real(name, data, expected_offset, **kw)

    client.append = recording  # type: ignore[method-assign]
    return frames, lambda: setattr(client, "append", real)


def _expected(s: ReaderGroupState, seq: int, rid: str, acked: list[Position]) -> bytes:
    m = s.model
    u = Report(rid, m.readers[rid].token, m.epoch, tuple(acked))
    return encode_batch(m.group_id, s.synchronizer.origin, seq, [u])


def _same(a: ReaderGroupState, b: ReaderGroupState) -> None:
    b.refresh()
    a.refresh()
    assert a.revision == b.revision
    assert a.model.to_obj() == b.model.to_obj() and a.model.layout == b.model.layout
    assert a.model.rejected == b.model.rejected
    a._check()
    b._check()


def test_a_report_appends_what_the_update_would_and_every_replica_applies_it_alike(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    a, b = _group(client, clock)
    frames, undo = _appends(client)
    try:
        token, layout = a.model.readers["ra"].token, a.model.layout
        for step in (10, 0, 5):  # (0: nothing moved, nothing appended)
            acked = _acked(a, "ra", step)
            seq, at = a.synchronizer._seq + 1, a.revision
            assert a.sync_report("ra", token, a.epoch, acked, layout) is True
            if step:
                assert frames[-1] == _expected(a, seq, "ra", acked)
                assert a.revision == at + len(frames[-1])
            else:
                assert a.revision == at
            _same(a, b)
        assert len(frames) == 2
        # a report the state rejects (another incarnation's token) is appended and rejected alike
        acked = _acked(a, "ra", 3)
        assert a.sync_report("ra", token + 1_000, a.epoch, acked, layout) is False
        u = Report("ra", token + 1_000, a.epoch, tuple(acked))
        assert frames[-1] == encode_batch(a.model.group_id, a.synchronizer.origin, a.synchronizer._seq, [u])
        _same(a, b)
        assert a.model.rejected == 1
    finally:
        undo()


def test_a_report_racing_another_replica_catches_up_and_reports_again(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    a, b = _group(client, clock)
    frames, undo = _appends(client)
    try:
        ta, tb = a.model.readers["ra"].token, b.model.readers["rb"].token
        layout = a.model.layout
        assert b.sync_report("rb", tb, b.epoch, _acked(b, "rb", 7), layout) is True  # a is behind now
        conflicts = a.synchronizer.stats.conflicts
        acked = _acked(a, "ra", 4)
        assert a.sync_report("ra", ta, a.epoch, acked, layout) is True
        assert a.synchronizer.stats.conflicts == conflicts + 1
        seq = a.synchronizer._seq
        assert frames[-2:] == [_expected(a, seq - 1, "ra", acked), _expected(a, seq, "ra", acked)]
        _same(a, b)
        # another replica's update that moves the layout: the report is not made (the caller syncs)
        b.add_reader("rc")
        before = client.get_info(state_segment("g")).length
        assert a.sync_report("ra", ta, a.epoch, _acked(a, "ra", 4), layout) is None
        assert a.synchronizer.stats.conflicts == conflicts + 2
        assert client.get_info(state_segment("g")).length == before
        _same(a, b)
    finally:
        undo()


def test_a_report_whose_reply_was_lost_is_found_in_the_log_not_appended_twice(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    a, b = _group(client, clock)
    real = client.append
    lost = {"n": 0}

    def flaky(name: str, data: bytes, expected_offset: int | None = None, **kw: Any) -> Any:
        out = real(name, data, expected_offset, **kw)
        if name == state_segment("g") and lost["n"] < 1:
            lost["n"] += 1
            raise ConnectionLostError("reply lost")
        return out

    client.append = flaky  # type: ignore[method-assign]
    try:
        at = a.revision
        acked = _acked(a, "ra", 9)
        assert a.sync_report("ra", a.model.readers["ra"].token, a.epoch, acked, a.model.layout) is True
    finally:
        client.append = real  # type: ignore[method-assign]
    assert a.synchronizer.stats.lost_replies == 1
    assert a.revision == at + len(_expected(a, a.synchronizer._seq, "ra", acked))
    _same(a, b)
