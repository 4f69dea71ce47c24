"""``ingestwm group list|describe|offline|delete`` against a served store (issue 16)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from bench.cli import main
from readergroup.config import ReaderGroupConfig, TimeDomain
from readergroup.errors import ReaderGroupNotFoundError
from readergroup.group import ReaderGroup
from readergroup.state import state_segment
from readergroup.writer import EventWriter
from segmentstore import ManualClock, SegmentStore
from segmentstore.client import EmbeddedClient
from segmentstore.net.server import SegmentStoreServer

S = "cli/events"


@pytest.fixture
def served(store: SegmentStore, clock: ManualClock) -> Iterator[tuple[str, ReaderGroup]]:
    client = EmbeddedClient(store)
    client.create_stream(S, 3)
    w = EventWriter(client, S)
    for i in range(30):
        clock.advance(5)
        w.write_event(f"k{i}", b"x" * 10)
    w.close()
    cfg = ReaderGroupConfig((S,), time_domain=TimeDomain.INGESTION_TIME, position_report_interval_ms=0)
    group = ReaderGroup("g1", cfg, client, clock)
    a, b = group.create_reader("a"), group.create_reader("b")
    for _ in range(5):
        a.read_next_event()
        b.read_next_event()
    group.initiate_checkpoint("cp")
    with SegmentStoreServer(store) as srv:
        yield f"127.0.0.1:{srv.port}", group


_COMMANDS = ("list", "describe", "offline", "delete")


@pytest.mark.parametrize("args", [["group", "--help"], *(["group", c, "--help"] for c in _COMMANDS)])
def test_help(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 0
    assert "Usage:" in capsys.readouterr().out


def test_list_describe_and_offline(
    served: tuple[str, ReaderGroup], capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint, group = served
    assert main(["group", "list", "--endpoint", endpoint]) == 0
    assert capsys.readouterr().out.split() == ["g1"]
    assert main(["group", "describe", "g1", "--endpoint", endpoint, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["group"] == "g1" and d["epoch"] == 0 and d["streams"] == [S]
    assert [r["reader"] for r in d["readers"]] == ["a", "b"]
    held = sorted(s for r in d["readers"] for s in r["segments"])
    assert held == sorted(s["segment"] for s in d["segments"])
    for s in d["segments"]:
        info = group.client.get_info(s["segment"])
        assert s["tail"] == info.length and s["lag_bytes"] == info.length - s["position"] >= 0
        assert s["status"] == "assigned" and s["owner"] in ("a", "b")
    assert d["group_watermark"] == group.group_watermark
    assert d["checkpoints"] == [{"name": "cp", "waiting_for": ["a", "b"], "reached": []}]
    assert d["log"]["bytes"] > 0 and d["readers"][0]["heartbeat"] is not None
    assert main(["group", "describe", "g1", "--endpoint", endpoint]) == 0
    text = capsys.readouterr().out
    assert "group g1" in text and "readers (2 online" in text and "checkpoint cp: waiting for a, b" in text
    assert main(["group", "offline", "g1", "a", "--endpoint", endpoint]) == 0
    capsys.readouterr()
    assert group.online_readers() == ["b"]
    assert main(["group", "offline", "g1", "a", "--endpoint", endpoint]) == 1
    assert main(["group", "describe", "nope", "--endpoint", endpoint]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "not online" in err[0] and "does not exist" in err[1]


def test_a_group_with_a_corrupt_log_can_be_deleted_and_made_again(
    served: tuple[str, ReaderGroup], capsys: pytest.CaptureFixture[str]
) -> None:
    """A garbage append makes the log unreadable for good: the operator's way out is ``delete``."""
    endpoint, group = served
    group.client.append(state_segment("g1"), b"\x00garbage that is no batch")
    assert main(["group", "describe", "g1", "--endpoint", endpoint]) == 1
    assert "_system/_rg/g1" in capsys.readouterr().err  # the error names the log
    assert main(["group", "delete", "g1", "--endpoint", endpoint]) == 0
    assert "deleted" in capsys.readouterr().out
    assert main(["group", "list", "--endpoint", endpoint]) == 0
    assert capsys.readouterr().out.split() == []
    cfg = ReaderGroupConfig((S,), time_domain=TimeDomain.INGESTION_TIME, position_report_interval_ms=0)
    again = ReaderGroup("g1", cfg, group.client, ManualClock(2_000_000))
    reader = again.create_reader("a")
    reads = [reader.read_next_event() for _ in range(5)]
    assert any(r.is_event for r in reads)  # a fresh group reads from the head
    with pytest.raises(ReaderGroupNotFoundError):
        group.refresh()  # the old replica learns its group is gone
