"""Reader groups of the real Pravega client (``pravega`` 0.3.8, pravega-client-rust 0.3.7) against
``ingestwm serve --pravega-port``: their state lives in table segments the store serves
(segmentstore.pravega.tables). Several readers in one process and across processes, partial reads
with ``release_segment``, ``reader_offline`` and another reader taking over, reading from the head,
the tail and a stream cut, the group's stream cut, a reader across a stream scale, and the group's
state through a kill -9 of the server and a restart on the same ports: every event exactly once.

The server runs in a subprocess (the client holds the GIL while it waits).
"""

from __future__ import annotations

import asyncio
import collections
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pravega_helpers import ROOT, Served, free_port, served, start_served

from segmentstore.client.remote import RemoteClient
from segmentstore.pravega.tables import TABLE_PREFIX

pravega_client = pytest.importorskip("pravega_client", reason="pravega==0.3.8 is in the test extra")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server() -> Iterator[Served]:
    with served() as s:
        yield s


def _manager(s: Served) -> Any:
    return pravega_client.StreamManager(s.controller_uri, False, False)


def _write(m: Any, scope: str, stream: str, events: list[tuple[bytes, str | None]]) -> None:
    w = m.create_writer(scope, stream)
    for data, key in events:
        if key is None:
            w.write_event_bytes(data)
        else:
            w.write_event_bytes(data, routing_key=key)
    w.flush()


def _read(
    readers: dict[str, Any],
    want: int,
    per_slice: int = 0,
    deadline_s: float = 20.0,
    until: Callable[[list[tuple[str, bytes]]], bool] | None = None,
) -> list[tuple[str, bytes]]:
    """Read with every reader in turn until ``want`` events came, ``until`` holds of what came, or
    the deadline passed; each slice is released after at most ``per_slice`` events (0: all it
    holds), the rest staying for later."""

    async def run() -> list[tuple[str, bytes]]:
        got: list[tuple[str, bytes]] = []
        end = time.monotonic() + deadline_s
        while len(got) < want and time.monotonic() < end and not (until and until(got)):
            for name, r in readers.items():
                s = await r.get_segment_slice_async()
                for n, e in enumerate(s, 1):
                    got.append((name, e.data()))
                    if n == per_slice:
                        break
                r.release_segment(s)
        return got

    return asyncio.run(run())


def _lengths(s: Served, stream: str) -> dict[int, int]:
    """Each active segment's number -> its length, through ingestwm's own protocol."""
    with RemoteClient(("127.0.0.1", s.port), timeout_s=30) as c:
        return {seg.number: c.get_info(seg.name).length for seg in c.get_stream(stream).active_segments}


def _table_exists(s: Served, group: str, scope: str) -> bool:
    with RemoteClient(("127.0.0.1", s.port), timeout_s=30) as c:
        return bool(c.exists(f"{TABLE_PREFIX}{scope}/{group}_kvtable/0.#epoch.0"))


def test_several_readers_read_every_event_once_and_the_group_is_kept_got_and_deleted(server: Served) -> None:
    m = _manager(server)
    m.create_scope("rg")
    m.create_stream("rg", "s", 3)
    # every segment holds far more events (58 or more) than r1 reads before the client's first rebalance (its
    # REBALANCE_INTERVAL, 10 s, at one event a second below): the segment r1 gives up still has
    # events for r2 to read
    events = [(b"keyed-%03d" % i, f"key-{i % 30}") for i in range(300)] + [
        (b"free-%02d" % i, None) for i in range(20)
    ]
    _write(m, "rg", "s", events)
    group = m.create_reader_group("g", "rg", "s")
    assert _table_exists(server, "g", "rg")
    readers = {"r1": group.create_reader("r1"), "r2": group.create_reader("r2")}
    got = _read({"r1": readers["r1"]}, 24, per_slice=4)  # partial slices, released and taken up again
    # r1 took every segment; the client rebalances at its own pace (about 10 s), so r1 reads one
    # event per slice until r2 has been handed a segment and read from it, then both read the rest
    r2_read = lambda g: any(n == "r2" for n, _ in g)  # noqa: E731
    got += _read(readers, len(events) - len(got), per_slice=1, deadline_s=60.0, until=r2_read)
    got += _read(readers, len(events) - len(got))
    assert {name for name, _ in got} == {"r1", "r2"}  # r1 gave a segment up, r2 took it
    assert collections.Counter(e for _, e in got) == collections.Counter(e for e, _ in events)  # each once
    keyed = [e for _, e in got if e.startswith(b"keyed-")]
    for k in range(30):  # one routing key, one segment: in the order written
        mine = [e for e in keyed if int(e[6:]) % 30 == k]
        assert mine == sorted(mine)
    for r in readers.values():
        r.reader_offline()  # its segments go back to the group at the positions it reached
    tail = _lengths(server, "rg/s")
    assert group.get_streamcut().get_segment_offset_map() == tail
    # the same name again is the same group: its state, not a new one from the head
    again = m.create_reader_group("g", "rg", "s")
    assert again.get_streamcut().get_segment_offset_map() == tail
    late = again.create_reader("r3")
    assert _read({"r3": late}, 1, deadline_s=0.1) == []  # nothing left to read
    m.delete_reader_group("g", "rg")
    assert not _table_exists(server, "g", "rg")
    with pytest.raises(OSError, match="ReaderGroup is deleted"):
        _read({"r3": late}, 1, deadline_s=0.1)
    m.delete_reader_group("g", "rg")  # deleting what is gone is no error, as on Pravega


_READER = """
import asyncio, os, sys, time, pravega_client
uri, want = sys.argv[1], int(sys.argv[2])
m = pravega_client.StreamManager(uri, False, False)
group = m.create_reader_group("takeover", "rg", "t")
r = group.create_reader("b")
async def run():
    n, end = 0, time.monotonic() + 20
    while n < want and time.monotonic() < end:
        s = await r.get_segment_slice_async()
        for e in s:
            print(e.data().decode(), flush=True)
            n += 1
        r.release_segment(s)
asyncio.run(run())
r.reader_offline()
sys.stdout.flush()
os._exit(0)  # the binding's runtime threads can crash the interpreter's finalization
"""


def test_a_reader_going_offline_hands_its_positions_to_a_reader_in_another_process(server: Served) -> None:
    m = _manager(server)
    m.create_scope("rg")
    m.create_stream("rg", "t", 2)
    events = [(b"t-%03d" % i, f"k{i % 5}") for i in range(50)]
    _write(m, "rg", "t", events)
    group = m.create_reader_group("takeover", "rg", "t")
    a = group.create_reader("a")
    first = _read({"a": a}, 12, per_slice=4)  # a few events from each segment it holds, released at once
    assert 12 <= len(first) < 50
    a.reader_offline()  # gives its segments back at the positions it reached
    b = subprocess.run(
        [sys.executable, "-c", _READER, server.controller_uri, str(50 - len(first))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert b.returncode == 0, b.stderr[-2000:]
    rest = [line.encode() for line in b.stdout.split()]
    assert sorted([e for _, e in first] + rest) == sorted(e for e, _ in events)  # none twice, none lost


def test_reading_from_the_tail_the_head_and_a_stream_cut(server: Served) -> None:
    m = _manager(server)
    m.create_scope("rg")
    m.create_stream("rg", "ht", 2)
    old = [(b"old-%02d" % i, f"k{i}") for i in range(10)]
    _write(m, "rg", "ht", old)
    tail = m.create_reader_group("tail", "rg", "ht", True)
    cut = tail.get_streamcut()
    assert cut.get_segment_offset_map() == _lengths(server, "rg/ht")  # the tail, as the group starts there
    head = m.create_reader_group("head", "rg", "ht", False)
    assert set(head.get_streamcut().get_segment_offset_map().values()) == {0}
    new = [(b"new-%02d" % i, f"k{i}") for i in range(10)]
    _write(m, "rg", "ht", new)
    from_cut = m.create_reader_group("from-cut", "rg", "ht", False, cut)
    got_tail = _read({"t": tail.create_reader("t")}, 10)
    got_head = _read({"h": head.create_reader("h")}, 20)
    got_cut = _read({"c": from_cut.create_reader("c")}, 10)
    assert sorted(e for _, e in got_tail) == sorted(e for e, _ in new)
    assert sorted(e for _, e in got_cut) == sorted(e for e, _ in new)
    assert sorted(e for _, e in got_head) == sorted(e for e, _ in old + new)


def test_a_reader_follows_a_stream_through_a_scale(server: Served) -> None:
    m = _manager(server)
    m.create_scope("rg")
    m.create_stream("rg", "sc", 1)
    before = [(b"before-%02d" % i, f"k{i}") for i in range(15)]
    _write(m, "rg", "sc", before)
    group = m.create_reader_group("scaled", "rg", "sc")
    r = group.create_reader("r")
    got = _read({"r": r}, 5, per_slice=5)
    with RemoteClient(("127.0.0.1", server.port), timeout_s=30) as c:
        (only,) = c.get_stream("rg/sc").active_segments
        c.scale_stream("rg/sc", [only.name], [(0.0, 0.5), (0.5, 1.0)])  # sealed, two successors
    after = [(b"after-%02d" % i, f"k{i}") for i in range(30)]
    _write(m, "rg", "sc", after)
    assert len(_lengths(server, "rg/sc")) == 2
    got += _read({"r": r}, 45 - len(got))
    assert sorted(e for _, e in got) == sorted(e for e, _ in before + after)  # every event once
    assert [e for _, e in got][:15] == [e for e, _ in before]  # the predecessor first, to its end


def test_a_groups_state_survives_kill_9_and_a_restart_on_the_same_ports(tmp_path: Path) -> None:
    data = tmp_path / "data"
    ports = dict(port=free_port(), controller_port=free_port(), segment_port=free_port())
    s = start_served(data, **ports)
    try:
        m = _manager(s)
        m.create_scope("k9")
        m.create_stream("k9", "s", 2)
        events = [(b"k9-%03d" % i, f"k{i % 6}") for i in range(40)]
        _write(m, "k9", "s", events)
        group = m.create_reader_group("survivor", "k9", "s")
        r = group.create_reader("r")
        first = _read({"r": r}, 15, per_slice=5)
        r.reader_offline()
        cut = group.get_streamcut().get_segment_offset_map()
        assert 0 < sum(cut.values()) < sum(_lengths(s, "k9/s").values())
        s.kill()
        time.sleep(0.5)
        s = start_served(data, **ports)
        m = _manager(s)
        group = m.create_reader_group("survivor", "k9", "s")  # the kept state, not a new group at the head
        assert group.get_streamcut().get_segment_offset_map() == cut
        rest = _read({"r2": group.create_reader("r2")}, 40 - len(first))
        assert sorted(e for _, e in first + rest) == sorted(e for e, _ in events)
    finally:
        s.stop()


_EARLY = """
import asyncio, os, sys, time, pravega_client
m = pravega_client.StreamManager(sys.argv[1], False, False)
group = m.create_reader_group("early", "rg", "e")  # reads the group's state now: both segments unassigned
print("opened", flush=True)
sys.stdin.readline()
r = group.create_reader("b")
print("created", flush=True)
async def run():
    end = time.monotonic() + 2
    while time.monotonic() < end:
        s = await r.get_segment_slice_async()
        for e in s:
            print(e.data().decode(), flush=True)
        r.release_segment(s)
asyncio.run(run())
r.reader_offline()
sys.stdout.flush()
os._exit(0)  # the binding's runtime threads can crash the interpreter's finalization
"""


def test_a_group_opened_before_another_process_took_the_segments_does_not_hand_them_out_again(
    server: Served,
) -> None:
    """Process b's synchronizer saw both segments unassigned; reader a (here) then takes both (their
    unassigned keys become tombstones). b's conditional update with its stale versions is refused, its
    delta read from there brings a's changes, and it acquires nothing."""
    m = _manager(server)
    m.create_scope("rg")
    m.create_stream("rg", "e", 2)
    events = [(b"e-%02d" % i, f"k{i}") for i in range(20)]
    _write(m, "rg", "e", events)
    b = subprocess.Popen(
        [sys.executable, "-c", _EARLY, server.controller_uri],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert b.stdout is not None and b.stdout.readline().strip() == "opened"
        group = m.create_reader_group("early", "rg", "e")
        a = group.create_reader("a")
        got = _read({"a": a}, 20)
        out, err = b.communicate("go\n", timeout=30)
    finally:
        if b.poll() is None:
            b.kill()
    lines = out.split()
    assert b.returncode == 0 and lines[0] == "created", (out, err[-3000:])
    assert lines[1:] == []  # a holds both segments: b reads nothing, none twice
    assert sorted(e for _, e in got) == sorted(e for e, _ in events)
