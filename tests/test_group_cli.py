"""``ingestwm group list|describe|offline|delete`` against a served store (issue 16)."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator

import pytest

from bench.cli import main
from readergroup.config import ReaderGroupConfig, TimeDomain
from readergroup.errors import ReaderGroupNotFoundError
from readergroup.group_state.state import state_segment
from readergroup.reading.group import ReaderGroup
from readergroup.writing.writer import EventWriter
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


def test_list_on_a_store_without_groups_says_so(
    store: SegmentStore, capsys: pytest.CaptureFixture[str]
) -> None:
    with SegmentStoreServer(store) as srv:
        endpoint = f"127.0.0.1:{srv.port}"
        assert main(["group", "list", "--endpoint", endpoint]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""  # stdout stays one name per line for scripts
    assert captured.err.strip() == f"no reader groups in the store at {endpoint}"


def test_describe_shows_utc_times_and_never_a_negative_lag(served: tuple[str, ReaderGroup]) -> None:
    """The store's clock ahead of this machine's: lag 0 and by how much it is ahead, not ``lag -1234``."""
    from bench.cli.group import describe_group, format_description
    from segmentstore.client import RemoteClient

    endpoint, group = served
    wm = group.group_watermark
    assert wm is not None
    with RemoteClient(endpoint) as c:
        behind = describe_group(c, "g1", wm + 2_500)
        ahead = describe_group(c, "g1", wm - 1_500)
    assert behind["watermark_lag_ms"] == 2_500 and behind["watermark_ahead_ms"] == 0
    assert ahead["watermark_lag_ms"] == 0 and ahead["watermark_ahead_ms"] == 1_500
    for d in (behind, ahead):
        assert all(s["watermark_lag_ms"] >= 0 and s["watermark_ahead_ms"] >= 0 for s in d["segments"])
        assert all(r["heartbeat_age_ms"] >= 0 for r in d["readers"])
    iso = dt.datetime.fromtimestamp(wm / 1000, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{wm % 1000:03d}Z"
    assert ahead["group_watermark_utc"] == iso
    text = "\n".join(format_description(ahead))
    assert f"group watermark {iso}  lag 0 ms (1500 ms ahead of this machine's clock)" in text
    assert "lag -" not in text and not re.search(r"\s-\d", text)
    assert str(wm) not in text  # no epoch milliseconds in the text
    assert "lag 2500 ms" in "\n".join(format_description(behind))
