"""The real Pravega client (``pravega`` 0.3.8, pravega-client-rust 0.3.7) against ``ingestwm serve
--pravega-port``: every StreamManager call, every StreamWriter call, events read back exactly (through
ingestwm's own protocol and through the client's ByteStream reads), large events, a kill -9 and
restart on the same ports, credentials, and the refusal of ingestwm-framed streams.

The server runs in a subprocess: the client's calls hold the GIL while they wait, so a server in the
test's own process could not answer them.
"""

from __future__ import annotations

import asyncio
import collections
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pravega_helpers import ROOT, Served, free_port, parse_events, served, start_served

from segmentstore import FRAMING_INGESTWM, FRAMING_PRAVEGA
from segmentstore.client.remote import RemoteClient

pravega_client = pytest.importorskip("pravega_client", reason="pravega==0.3.8 is in the test extra")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server() -> Iterator[Served]:
    with served() as s:
        yield s


def _manager(s: Served, auth: bool = False) -> Any:
    return pravega_client.StreamManager(s.controller_uri, auth, False)


def _remote(s: Served, token: str | None = None) -> RemoteClient:
    return RemoteClient(("127.0.0.1", s.port), token=token, timeout_s=30)


def stored(c: RemoteClient, stream: str) -> dict[str, list[bytes]]:
    """Every Pravega event stored in each active segment of ``stream``, read through ingestwm."""
    out: dict[str, list[bytes]] = {}
    names = (
        [n for n in c.list_segments() if n.startswith(stream + "/")] if hasattr(c, "list_segments") else []
    )
    if not names:
        names = [s.name for s in c.get_stream(stream).active_segments]
    for name in names:
        info = c.get_info(name)
        data = bytearray()
        offset = info.start_offset
        while offset < info.length:
            r = c.read(name, offset, 1 << 20)
            data += r.data
            offset += len(r.data)
        out[name] = parse_events(bytes(data))
    return out


def test_stream_manager_calls_as_a_pravega_user_makes_them(server: Served) -> None:
    m = _manager(server)
    assert m.create_scope("mgr") is True
    assert m.create_scope("mgr") is False
    assert "mgr" in m.list_scope()
    assert m.create_stream("mgr", "fixed", 3) is True
    assert m.create_stream("mgr", "fixed", 3) is False
    assert m.get_stream_tags("mgr", "fixed") == []
    rate = pravega_client.StreamScalingPolicy.auto_scaling_policy_by_data_rate(10, 2, 2)
    size = pravega_client.StreamRetentionPolicy.by_size(10 * 1024**3)
    assert m.create_stream_with_policy("mgr", "auto", rate, size, ["t1", "t2"]) is True
    assert m.get_stream_tags("mgr", "auto") == ["t1", "t2"]
    events = pravega_client.StreamScalingPolicy.auto_scaling_policy_by_event_rate(10, 2, 1)
    by_time = pravega_client.StreamRetentionPolicy.by_time(24 * 3600 * 1000)
    assert m.update_stream_with_policy("mgr", "auto", events, by_time, ["t4", "t5"]) is True
    assert m.get_stream_tags("mgr", "auto") == ["t4", "t5"]
    assert m.update_stream_with_policy(scope_name="mgr", stream_name="fixed", tags=["only"]) is True
    with _remote(server) as c:
        assert c.get_stream("mgr/auto").framing == FRAMING_PRAVEGA
        assert len(c.get_stream("mgr/auto").active_segments) == 2
        # the update's default scaling policy is a fixed count of 1: the stream was merged into one
        assert len(c.get_stream("mgr/fixed").active_segments) == 1
    assert sorted(m.list_stream("mgr")) == ["auto", "fixed"]
    with pytest.raises(ValueError, match="Stream Not Sealed"):
        m.delete_stream("mgr", "fixed")
    with pytest.raises(ValueError, match="Scope not empty"):
        m.delete_scope("mgr")
    for stream in ("fixed", "auto"):
        assert m.seal_stream("mgr", stream) is True
        assert m.delete_stream("mgr", stream) is True
    assert m.delete_stream("mgr", "fixed") is False
    assert m.list_stream("mgr") == []
    assert m.delete_scope("mgr") is True
    assert m.delete_scope("mgr") is False
    assert "mgr" not in m.list_scope()


def test_every_writer_call_stores_the_events_exactly(server: Served) -> None:
    m = _manager(server)
    m.create_scope("w")
    m.create_stream("w", "s", 4)
    w = m.create_writer("w", "s")
    w.write_event("plain")
    w.write_event_bytes(b"\x00raw\xff")
    keyed = [f"k1-{i}".encode() for i in range(50)]
    for e in keyed:
        w.write_event_bytes(e, routing_key="k1")
    w.write_event("k2 as str", routing_key="k2")

    async def write_async() -> None:
        await asyncio.gather(*(w.write_event_async(f"async-{i}", routing_key="k3") for i in range(20)))

    asyncio.run(write_async())
    w.flush()
    with _remote(server) as c:
        by_segment = stored(c, "w/s")
    everything = collections.Counter(e for events in by_segment.values() for e in events)
    want = collections.Counter(
        [b"plain", b"\x00raw\xff", *keyed, b"k2 as str", *(b"async-%d" % i for i in range(20))]
    )
    assert everything == want  # each event once, as written
    # one routing key, one segment, in order
    (k1_segment,) = [evs for evs in by_segment.values() if b"k1-0" in evs]
    assert [e for e in k1_segment if e.startswith(b"k1-")] == keyed


def test_events_read_back_through_the_clients_own_reads(server: Served) -> None:
    """ByteStream reads a one-segment stream with ReadSegment: the bytes are the writer's events, framed."""
    m = _manager(server)
    m.create_scope("r")
    m.create_stream("r", "one", 1)
    w = m.create_writer("r", "one")
    payloads = [b"e%d" % i * (i + 1) for i in range(30)]
    for p in payloads:
        w.write_event_bytes(p)
    w.flush()
    bs = m.create_byte_stream("r", "one")
    tail = bs.current_tail_offset()
    assert bs.current_head_offset() == 0 and tail == sum(8 + len(p) for p in payloads)
    buf = bytearray(tail)
    got = bytearray()
    while len(got) < tail:
        n = bs.readinto(buf)
        got += buf[:n]
    assert parse_events(bytes(got)) == payloads
    bs.seek(8 + len(payloads[0]), 0)
    n = bs.readinto(buf)
    assert parse_events(bytes(buf[:n]))[0] == payloads[1]
    # at the tail, a read waits for data instead of spinning: another process writes after 1 s
    bs.seek(tail, 0)
    script = (
        "import time, pravega_client as p; time.sleep(1); "
        f"m = p.StreamManager({server.controller_uri!r}, False, False); "
        "w = m.create_writer('r', 'one'); w.write_event_bytes(b'late'); w.flush()"
    )
    later = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT)
    start = time.monotonic()
    n = bs.readinto(buf)
    waited = time.monotonic() - start
    later.wait(60)
    assert parse_events(bytes(buf[:n])) == [b"late"]
    assert 0.5 < waited < 4.5  # it waited for the data, less than the 5 s a read waits at most


def test_large_events_up_to_pravegas_8_mib_and_many_100_kb_ones(server: Served) -> None:
    m = _manager(server)
    m.create_scope("big")
    m.create_stream("big", "s", 2)
    w = m.create_writer("big", "s")
    largest = bytes(range(256)) * (8 * 1024 * 1024 // 256)  # exactly Pravega's limit
    assert len(largest) == 8 * 1024 * 1024
    w.write_event_bytes(largest, routing_key="large")
    hundred_kb = [bytes([i % 256]) * 100_000 for i in range(120)]
    for i, e in enumerate(hundred_kb):
        w.write_event_bytes(e, routing_key=f"key-{i % 7}")
    w.flush()
    with _remote(server) as c:
        events = [e for evs in stored(c, "big/s").values() for e in evs]
    assert len(events) == 121
    assert events.count(largest) == 1
    assert collections.Counter(e for e in events if e != largest) == collections.Counter(hundred_kb)


def test_a_pravega_client_is_refused_an_ingestwm_framed_stream(
    server: Served, capfd: pytest.CaptureFixture[str]
) -> None:
    with _remote(server) as c:
        c.create_stream("own/ingestwm", 1)
        assert c.get_stream("own/ingestwm").framing == FRAMING_INGESTWM
    m = _manager(server)
    assert "ingestwm" in m.list_stream("own")  # visible to its administration ...
    w = m.create_writer("own", "ingestwm")
    with pytest.raises(ValueError, match="Error observed while writing an event"):
        w.write_event("garbage for ingestwm's readers")  # ... but refused its segments
    err = capfd.readouterr().err
    assert "ingestwm-framed events" in err and "created through the Pravega controller" in err
    with _remote(server) as c:
        assert c.get_info(c.get_stream("own/ingestwm").active_segments[0].name).length == 0


def test_with_a_token_the_client_needs_credentials_and_uses_delegation_tokens(tmp_path: Path) -> None:
    env = {"pravega_client_auth_method": "Basic", "pravega_client_auth_token": "t0ken"}
    os.environ.update(env)
    try:
        with served(token="t0ken") as s:
            m = _manager(s, auth=True)
            assert m.create_scope("auth") is True
            assert m.create_stream("auth", "s", 1) is True
            w = m.create_writer("auth", "s")
            w.write_event("behind a token")
            w.flush()
            with _remote(s, token="t0ken") as c:
                assert [e for evs in stored(c, "auth/s").values() for e in evs] == [b"behind a token"]
    finally:
        for k in env:
            del os.environ[k]


_WRITER = """
import sys, pravega_client
uri, n = sys.argv[1], int(sys.argv[2])
m = pravega_client.StreamManager(uri, False, False)  # kept: its runtime runs the writer
w = m.create_writer("k9", "s")
for i in range(n):
    w.write_event_bytes(b"event-%05d" % i, routing_key="key-%d" % (i % 5))
    print(i, flush=True)
w.flush()
print("flushed", flush=True)
"""


def test_a_writer_through_kill_9_and_a_restart_on_the_same_ports_stores_every_event_once(
    tmp_path: Path,
) -> None:
    """The writer runs in a process of its own: a write blocks holding the GIL until it is acknowledged."""
    data = tmp_path / "data"
    ports = dict(port=free_port(), controller_port=free_port(), segment_port=free_port())
    s = start_served(data, **ports)
    n = 400
    try:
        m = _manager(s)
        m.create_scope("k9")
        m.create_stream("k9", "s", 2)
        writer = subprocess.Popen(
            [sys.executable, "-c", _WRITER, s.controller_uri, str(n)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert writer.stdout is not None
        acked = [writer.stdout.readline() for _ in range(100)]
        s.kill()
        time.sleep(0.5)
        s = start_served(data, **ports)
        rest = writer.stdout.read()
        assert writer.wait(180) == 0, "the writer failed across the kill -9 and restart"
        lines = [x.strip() for x in acked] + rest.split()
        assert lines == [str(i) for i in range(n)] + ["flushed"]
        with _remote(s) as c:
            events = [e for evs in stored(c, "k9/s").values() for e in evs]
        assert sorted(events) == [b"event-%05d" % i for i in range(n)]  # every acknowledged event, once
    finally:
        s.stop()
