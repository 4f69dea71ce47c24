"""The controller's administration (segmentstore.controller.admin): scopes, stream configs and framing,
updates that rescale, truncation at a stream cut, epochs; all durable, replayed, finished after a crash."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from readergroup import EventWriter, StreamFramingError, TransactionalEventWriter
from segmentstore import (
    FRAMING_INGESTWM,
    FRAMING_PRAVEGA,
    BadOffsetError,
    InvalidArgumentError,
    ManualClock,
    ScopeNotEmptyError,
    ScopeNotFoundError,
    SegmentStore,
    StoreConfig,
    StreamController,
    StreamExistsError,
    StreamSealedError,
)
from segmentstore.client import EmbeddedClient
from segmentstore.controller.controller import STREAMS_SEGMENT, controller_of
from segmentstore.controller.model import parse_records
from segmentstore.controller.stream_config import StreamConfig, default_config

CFG = StreamConfig("by_rate_events", 100, 2, 2, "time", 86_400_000, 2**63 - 1, ("b", "a", "b"))


def _durable(d: Path) -> SegmentStore:
    return SegmentStore(ManualClock(1_000_000), StoreConfig(advancer_thread=False, sync="always"), data_dir=d)


def _records(store: SegmentStore) -> list[dict[str, Any]]:
    length = store.get_info(STREAMS_SEGMENT).length
    return [r for _, r in parse_records(store.read(STREAMS_SEGMENT, 0, length).data, STREAMS_SEGMENT)]


def test_scopes_are_created_listed_and_deleted_only_when_empty(store: SegmentStore) -> None:
    ctl = controller_of(store)
    assert ctl.create_scope("sc") is True
    assert ctl.create_scope("sc") is False  # Pravega's SCOPE_EXISTS
    EmbeddedClient(store).create_stream("legacy/s")  # ingestwm's API names its scope
    assert ctl.list_scopes() == ["legacy", "sc"] and ctl.scope_exists("legacy")
    ctl.create_stream_in_scope("sc/p", CFG, FRAMING_PRAVEGA)
    with pytest.raises(ScopeNotEmptyError, match="'sc/p'"):
        ctl.delete_scope("sc")
    ctl.seal_stream("sc/p")
    ctl.delete_stream("sc/p")
    ctl.delete_scope("sc")
    assert ctl.list_scopes() == ["legacy"] and not ctl.scope_exists("sc")
    with pytest.raises(ScopeNotFoundError, match="'sc'"):
        ctl.delete_scope("sc")
    with pytest.raises(ScopeNotFoundError, match="create it first"):
        ctl.create_stream_in_scope("sc/q", CFG)
    for bad in ("", "_sys", "a/b", "x" * 256, 5):
        with pytest.raises(InvalidArgumentError, match="scope name"):
            ctl.create_scope(bad)  # type: ignore[arg-type]
    ctl._check()


def test_a_stream_keeps_its_framing_and_config_and_old_records_read_as_ingestwm(store: SegmentStore) -> None:
    ctl = controller_of(store)
    ctl.create_scope("sc")
    info = ctl.create_stream_in_scope("sc/p", CFG, FRAMING_PRAVEGA)
    assert info.framing == FRAMING_PRAVEGA and len(info.active_segments) == 2 == CFG.min_segments
    assert ctl.get_stream_config("sc/p").tags == ("b", "a")  # in order, without repeats
    with pytest.raises(StreamExistsError):
        ctl.create_stream_in_scope("sc/p", CFG)
    legacy = EmbeddedClient(store).create_stream("sc/own", 3)
    assert legacy.framing == FRAMING_INGESTWM
    assert ctl.get_stream_config("sc/own") == default_config(3)
    recs = _records(store)
    own = next(r for r in recs if r.get("stream") == "sc/own")
    assert "framing" not in own and "config" not in own  # the record older builds wrote and read
    again = StreamController(store)
    assert again.get_stream("sc/p").framing == FRAMING_PRAVEGA
    assert again.get_stream_config("sc/p") == ctl.get_stream_config("sc/p")
    assert again.get_stream("sc/own").framing == FRAMING_INGESTWM
    assert again.list_scopes() == ["sc"]
    again._check()


def test_bad_configs_name_the_field() -> None:
    for kw, match in (
        (dict(scaling_kind="auto"), "scaling policy kind"),
        (dict(min_segments=0), "min_segments"),
        (dict(scaling_kind="by_rate_kbytes", target_rate=0, scale_factor=2), "target_rate > 0"),
        (dict(retention_kind="forever"), "retention policy kind"),
        (dict(retention_param=-1), "retention policy's parameter"),
        (dict(tags=("",)), "a tag must be"),
        (dict(tags=tuple(f"t{i}" for i in range(129))), "at most 128 tags"),
        (dict(tags="abc"), "tags must be a sequence"),
    ):
        with pytest.raises(InvalidArgumentError, match=match):
            StreamConfig(**kw)  # type: ignore[arg-type]


def test_an_update_replaces_the_config_and_rescales_as_pravega_does(store: SegmentStore) -> None:
    ctl = controller_of(store)
    ctl.create_scope("sc")
    ctl.create_stream_in_scope("sc/p", StreamConfig(min_segments=3), FRAMING_PRAVEGA)
    ctl.update_stream("sc/p", StreamConfig(min_segments=3, tags=("t1",)))  # same count: no scale
    assert ctl.get_stream("sc/p").epoch == 0 and ctl.get_stream_config("sc/p").tags == ("t1",)
    ctl.update_stream("sc/p", StreamConfig(min_segments=1))  # a fixed count of 1: merged into one
    info = ctl.get_stream("sc/p")
    assert info.epoch == 1 and [(s.key_low, s.key_high) for s in info.active_segments] == [(0.0, 1.0)]
    auto = StreamConfig("by_rate_kbytes", 10, 2, 2)
    ctl.update_stream("sc/p", auto)  # auto-scaling keeps at least min_segments
    assert len(ctl.get_stream("sc/p").active_segments) == 2
    ctl.update_stream("sc/p", StreamConfig("by_rate_kbytes", 10, 2, 1))  # more than the minimum: kept
    assert len(ctl.get_stream("sc/p").active_segments) == 2 and ctl.get_stream("sc/p").epoch == 2
    assert StreamController(store).get_stream_config("sc/p") == StreamConfig("by_rate_kbytes", 10, 2, 1)
    ctl.seal_stream("sc/p")
    with pytest.raises(StreamSealedError):
        ctl.update_stream("sc/p", auto)
    ctl._check()


def _written(store: SegmentStore, name: str, n: int) -> None:
    store.append(name, b"x" * n)


def test_truncation_makes_the_cut_the_head(store: SegmentStore) -> None:
    ctl = controller_of(store)
    first = ctl.create_stream("sc/s", 2).active_segments
    for s in first:
        _written(store, s.name, 10)
    left = ctl.scale_stream("sc/s", [first[0].name], [(0.0, 0.25), (0.25, 0.5)])
    for s in left:
        _written(store, s.name, 6)
    cut = {left[0].name: 4, left[1].name: 0, first[1].name: 7}
    ctl.truncate_stream("sc/s", cut)
    assert not store.exists(first[0].name)  # wholly before the cut
    assert store.get_info(left[0].name).start_offset == 4 and store.get_info(first[1].name).start_offset == 7
    assert ctl.get_head_cut("sc/s").as_dict() == cut
    assert ctl.get_successors(first[0].name)  # metadata of the truncated history stays
    # a later cut may move forward, never back before the head
    with pytest.raises(InvalidArgumentError, match="before the stream's head"):
        ctl.truncate_stream("sc/s", {first[0].name: 0, first[1].name: 7})
    with pytest.raises(BadOffsetError, match="outside its readable range"):
        ctl.truncate_stream("sc/s", {left[0].name: 2, left[1].name: 0, first[1].name: 7})
    with pytest.raises(BadOffsetError, match=r"\[7, 10\]"):
        ctl.truncate_stream("sc/s", {left[0].name: 4, left[1].name: 0, first[1].name: 11})
    with pytest.raises(InvalidArgumentError, match="do not cover the routing keys"):
        ctl.truncate_stream("sc/s", {left[0].name: 4, first[1].name: 7})
    with pytest.raises(InvalidArgumentError, match="not a segment of it"):
        ctl.truncate_stream("sc/s", {"sc/s/9.#epoch.0": 0})
    assert ctl.get_head_cut("sc/s").as_dict() == cut  # the refused cuts changed nothing
    ctl.truncate_stream("sc/s", {left[0].name: 6, left[1].name: 6, first[1].name: 10})
    assert ctl.get_head_cut("sc/s").as_dict() == {left[0].name: 6, left[1].name: 6, first[1].name: 10}
    again = StreamController(store)
    assert again.get_head_cut("sc/s") == ctl.get_head_cut("sc/s")
    again._check()
    ctl.seal_stream("sc/s")
    with pytest.raises(StreamSealedError):
        ctl.truncate_stream("sc/s", {left[0].name: 6, left[1].name: 6, first[1].name: 10})
    ctl.delete_stream("sc/s")  # segments gone already are no error
    assert not [n for n in store.list_segments() if n.startswith("sc/s/")]


def test_a_truncation_cut_short_by_a_crash_is_finished_on_opening(tmp_path: Path) -> None:
    d = tmp_path / "d"
    store = _durable(d)
    ctl = controller_of(store)
    first = ctl.create_stream("sc/s", 1).active_segments[0]
    _written(store, first.name, 8)
    nxt = ctl.scale_stream("sc/s", [first.name], [(0.0, 1.0)])[0]
    _written(store, nxt.name, 8)

    def crash(*_: Any) -> None:  # the record is written; the process dies before the store changes
        raise RuntimeError("kill -9")

    ctl._finish_truncation = crash  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        ctl.truncate_stream("sc/s", {nxt.name: 5})
    assert store.exists(first.name)
    shutil.copytree(d, tmp_path / "crashed")
    store.close()
    after = _durable(tmp_path / "crashed")
    try:
        again = controller_of(after)
        assert not after.exists(first.name) and after.get_info(nxt.name).start_offset == 5
        assert again.get_head_cut("sc/s").as_dict() == {nxt.name: 5}
        again._check()
    finally:
        after.close()


def test_epoch_segments_are_those_active_in_that_epoch(store: SegmentStore) -> None:
    ctl = controller_of(store)
    a, b = ctl.create_stream("sc/s", 2).active_segments
    a1, a2 = ctl.scale_stream("sc/s", [a.name], [(0.0, 0.25), (0.25, 0.5)])
    (m,) = ctl.scale_stream("sc/s", [a2.name, b.name], [(0.25, 1.0)])
    assert ctl.epoch_segments("sc/s", 0) == (a, b)
    assert ctl.epoch_segments("sc/s", 1) == (a1, a2, b)
    assert ctl.epoch_segments("sc/s", 2) == (a1, m) == ctl.get_stream("sc/s").active_segments
    with pytest.raises(InvalidArgumentError, match="epochs 0 to 2; there is no epoch 3"):
        ctl.epoch_segments("sc/s", 3)


def test_ingestwm_writers_refuse_a_pravega_framed_stream(store: SegmentStore) -> None:
    ctl = controller_of(store)
    ctl.create_scope("sc")
    ctl.create_stream_in_scope("sc/p", StreamConfig(), FRAMING_PRAVEGA)
    client = EmbeddedClient(store)
    with pytest.raises(StreamFramingError, match="'sc/p' holds pravega-framed events"):
        EventWriter(client, "sc/p")
    with pytest.raises(StreamFramingError, match="write it with a pravega client"):
        TransactionalEventWriter(client, "sc/p")
    assert all(store.get_info(s.name).length == 0 for s in ctl.get_stream("sc/p").active_segments)


def test_scope_and_config_records_are_plain_json(store: SegmentStore) -> None:
    ctl = controller_of(store)
    ctl.create_scope("sc")
    ctl.create_stream_in_scope("sc/p", CFG, FRAMING_PRAVEGA)
    recs = _records(store)
    assert recs[0] == {"op": "scope", "scope": "sc"}
    assert recs[1]["framing"] == "pravega" and recs[1]["config"]["tags"] == ["b", "a"]
    json.dumps(recs)


def test_stream_info_of_an_ingestwm_stream_reads_as_before_on_older_peers() -> None:
    """``framing`` (protocol version 2) is sent only when it is not ingestwm's: a version 1 peer, which
    takes a ``StreamInfo`` of exactly 4 fields, reads every ingestwm stream's as before."""
    import msgpack

    from segmentstore import StreamInfo
    from segmentstore.net.protocol import pack, unpack

    own = StreamInfo("a/b", False, 3, ())
    pravega = StreamInfo("a/c", True, 0, (), FRAMING_PRAVEGA)
    assert unpack(pack(own)) == own and unpack(pack(pravega)) == pravega
    fields_sent = [len(msgpack.unpackb(msgpack.unpackb(pack(x)).data)) - 1 for x in (own, pravega)]
    assert fields_sent == [4, 5]
