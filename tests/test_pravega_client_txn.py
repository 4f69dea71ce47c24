"""The real Pravega client (``pravega`` 0.3.8) against ``ingestwm serve --pravega-port``: transactions
(committed, aborted, their state, a lease running out on the server's injected clock, through kill -9 and
a restart), byte streams (write, flush, seek, truncate, head and tail offsets), events over 8 MiB, and
writes to a sealed stream. The server runs in a subprocess (the client holds the GIL while it waits)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pravega_helpers import ROOT, Served, free_port, parse_events, served, start_served

from segmentstore.client.remote import RemoteClient

pravega_client = pytest.importorskip("pravega_client", reason="pravega==0.3.8 is in the test extra")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server() -> Iterator[Served]:
    with served() as s:
        yield s


def _manager(s: Served | str) -> Any:
    return pravega_client.StreamManager(s if isinstance(s, str) else s.controller_uri, False, False)


def _stream_events(port: int, stream: str) -> list[bytes]:
    """Every event stored in the stream's active segments, through ingestwm."""
    with RemoteClient(("127.0.0.1", port), timeout_s=30) as c:
        out: list[bytes] = []
        for n in sorted(seg.name for seg in c.get_stream(stream).active_segments):
            info = c.get_info(n)
            offset, data = info.start_offset, bytearray()
            while offset < info.length:
                r = c.read(n, offset, 1 << 20)
                data += r.data
                offset += len(r.data)
            out += parse_events(bytes(data))
        return out


def test_transactions_committed_and_aborted_as_a_pravega_user_sees_them(server: Served) -> None:
    m = _manager(server)
    m.create_scope("tx")
    m.create_stream("tx", "s", 3)
    tw = m.create_transaction_writer("tx", "s", 17)
    txn = tw.begin_txn()
    assert txn.is_open()
    events = [b"txn-%03d" % i for i in range(60)]
    for i, e in enumerate(events):
        txn.write_event_bytes(e, routing_key=f"key-{i % 7}")
    w = m.create_writer("tx", "s")
    w.write_event("outside")
    w.flush()
    assert _stream_events(server.port, "tx/s") == [b"outside"]  # nothing of the open transaction
    txn.commit()
    assert not txn.is_open()
    assert sorted(_stream_events(server.port, "tx/s")) == sorted([b"outside", *events])  # all at once
    with pytest.raises(pravega_client.TxnFailedException):
        txn.commit()  # the client knows it is closed
    again = tw.get_txn(txn.get_txn_id())
    assert not again.is_open()
    aborted = tw.begin_txn()
    assert aborted.get_txn_id() != txn.get_txn_id()
    for e in events[:10]:
        aborted.write_event_bytes(b"never-" + e)
    aborted.abort()
    assert not aborted.is_open()
    with pytest.raises(pravega_client.TxnFailedException):
        aborted.write_event("after the abort")
    assert sorted(_stream_events(server.port, "tx/s")) == sorted([b"outside", *events])


_CLOCKED = """
import sys
from segmentstore import ManualClock, SegmentStore
from segmentstore.pravega.endpoints import PravegaEndpoints
clock = ManualClock(1_000_000)
store = SegmentStore(clock=clock)
ep = PravegaEndpoints(store, "127.0.0.1", 0, 0)
ep.start()
print(ep.controller_port, flush=True)
for line in sys.stdin:
    clock.advance(int(line))
    print("advanced", flush=True)
ep.stop()
store.close()
"""


def test_a_transaction_whose_lease_runs_out_on_the_servers_clock_is_aborted() -> None:
    """The server's ingestion clock is a ManualClock moved from here: the client's 90 s lease runs out
    when the clock passes it, not the wall clock, and the timeout sweep aborts the transaction."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _CLOCKED], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        m = _manager(f"tcp://127.0.0.1:{int(proc.stdout.readline())}")
        m.create_scope("lease")
        m.create_stream("lease", "s", 1)
        tw = m.create_transaction_writer("lease", "s", 3)  # kept: its pinger must outlive the commit
        txn = tw.begin_txn()
        txn.write_event("before the lease ran out")
        assert txn.is_open()
        proc.stdin.write("89000\n")
        proc.stdin.flush()
        proc.stdout.readline()
        time.sleep(0.6)  # two sweeps
        assert txn.is_open()  # 89 s of its 90 s lease
        proc.stdin.write("1000\n")
        proc.stdin.flush()
        proc.stdout.readline()
        deadline = time.monotonic() + 10
        while txn.is_open() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not txn.is_open()
        with pytest.raises(ValueError, match=r"(?s)Commit of transaction failed.*lease of 90000 ms ran out"):
            txn.commit()
    finally:
        proc.stdin.close()
        proc.wait(30)


_TXN_WRITER = """
import sys, time, pravega_client
uri = sys.argv[1]
m = pravega_client.StreamManager(uri, False, False)
tw = m.create_transaction_writer("k9", "s", 5)
done = tw.begin_txn()
for i in range(20):
    done.write_event_bytes(b"committed-%02d" % i, routing_key="k%d" % (i % 3))
done.commit()
left = tw.begin_txn()
for i in range(20):
    left.write_event_bytes(b"left-%02d" % i, routing_key="k%d" % (i % 3))
print(done.get_txn_id(), left.get_txn_id(), flush=True)
input()  # the server is killed and restarted meanwhile
print(done.is_open(), left.is_open(), flush=True)
left.commit()
print("committed", left.is_open(), flush=True)
"""


def test_transactions_through_kill_9_and_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    ports = dict(port=free_port(), controller_port=free_port(), segment_port=free_port())
    s = start_served(data, **ports)
    try:
        m = _manager(s)
        m.create_scope("k9")
        m.create_stream("k9", "s", 2)
        writer = subprocess.Popen(
            [sys.executable, "-c", _TXN_WRITER, s.controller_uri],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert writer.stdin is not None and writer.stdout is not None
        ids = writer.stdout.readline().split()
        assert len(ids) == 2, ids
        time.sleep(
            1
        )  # its events are acknowledged meanwhile (else the client resends them after the restart)
        s.kill()
        s = start_served(data, **ports)
        writer.stdin.write("\n")
        writer.stdin.flush()
        assert writer.stdout.readline().split() == ["False", "True"]  # committed stays, open stays open
        assert writer.stdout.readline().split() == ["committed", "False"]
        assert writer.wait(60) == 0
        events = _stream_events(s.port, "k9/s")
        assert sorted(events) == sorted(
            [b"committed-%02d" % i for i in range(20)] + [b"left-%02d" % i for i in range(20)]
        )
    finally:
        s.stop()


def _read(bs: Any, n: int) -> bytes:
    """``n`` bytes from a ByteStream (a read returns what one segment read brought)."""
    out = bytearray()
    while len(out) < n:
        buf = bytearray(n - len(out))
        got = bs.readinto(buf)
        assert got > 0
        out += buf[:got]
    return bytes(out)


def test_a_byte_stream_writes_seeks_truncates_and_reports_head_and_tail(server: Served) -> None:
    m = _manager(server)
    m.create_scope("bytes")
    m.create_stream("bytes", "b", 1)
    bs = m.create_byte_stream("bytes", "b")
    assert bs.write(b"0123456789") == 10
    assert bs.write(b"abcdef") == 6
    bs.flush()
    assert (bs.current_head_offset(), bs.current_tail_offset()) == (0, 16)
    assert _read(bs, 16) == b"0123456789abcdef"
    assert bs.seek(4) == 4 and bs.tell() == 4
    assert _read(bs, 3) == b"456"
    assert bs.seek(-2, 2) == 14
    assert _read(bs, 2) == b"ef"
    bs.truncate(10)
    assert (bs.current_head_offset(), bs.current_tail_offset()) == (10, 16)
    bs.seek(10)
    assert _read(bs, 6) == b"abcdef"
    # a second ByteStream's writer starts at offset 0: its conditional append is refused, nothing stored
    other = m.create_byte_stream("bytes", "b")
    other.write(b"clobber")
    with pytest.raises(OSError, match="ConditionalCheckFailure"):
        other.flush()
    assert bs.current_tail_offset() == 16
    assert m.seal_stream("bytes", "b")
    with pytest.raises(OSError):
        bs.write(b"after the seal")
        bs.flush()
    assert bs.current_tail_offset() == 16


def test_an_event_over_8_mib_goes_through_a_transient_segment(server: Served) -> None:
    m = _manager(server)
    m.create_scope("huge")
    m.create_stream("huge", "s", 1)
    w = m.create_writer("huge", "s")
    w.write_event("small before")
    big = bytes(range(256)) * (12 * 1024 * 1024 // 256)
    w.write_event_bytes(big)
    w.write_event("small after")
    w.flush()
    assert _stream_events(server.port, "huge/s") == [b"small before", big, b"small after"]


def test_a_write_to_a_sealed_stream_is_refused_as_pravegas_client_sees_it(
    server: Served, capfd: pytest.CaptureFixture[str]
) -> None:
    m = _manager(server)
    m.create_scope("sealed")
    m.create_stream("sealed", "s", 2)
    w = m.create_writer("sealed", "s")
    w.write_event("kept")
    w.flush()
    assert m.seal_stream("sealed", "s")
    with pytest.raises(ValueError, match="Error observed while writing an event"):
        w.write_event("refused")
    logged = capfd.readouterr()
    assert "Stream is sealed" in logged.out + logged.err
    assert _stream_events(server.port, "sealed/s") == [b"kept"]
    tw = m.create_transaction_writer("sealed", "s", 1)
    with pytest.raises(ValueError, match="sealed"):
        tw.begin_txn()
    assert m.delete_stream("sealed", "s")
    assert m.delete_scope("sealed")


def test_sealing_a_stream_aborts_its_open_transactions_as_pravega_does(server: Served) -> None:
    """Pravega's controller aborts a stream's open transactions before it seals the stream: their events
    never appear, a transaction committed before keeps its events, and one of another stream stays open."""
    m = _manager(server)
    m.create_scope("sealtx")
    m.create_stream("sealtx", "s", 2)
    m.create_stream("sealtx", "other", 1)
    tw = m.create_transaction_writer("sealtx", "s", 21)
    done, left = tw.begin_txn(), tw.begin_txn()
    done.write_event_bytes(b"committed", routing_key="k")
    done.commit()
    left.write_event_bytes(b"never", routing_key="k")
    other_writer = m.create_transaction_writer("sealtx", "other", 22)  # (kept: its pinger serves the txn)
    elsewhere = other_writer.begin_txn()
    elsewhere.write_event_bytes(b"other stream", routing_key="k")
    assert left.is_open() and elsewhere.is_open()
    assert m.seal_stream("sealtx", "s")
    assert not left.is_open()
    assert elsewhere.is_open()
    with pytest.raises(ValueError, match=r"(?s)ABORTED.*its stream was sealed"):
        left.commit()
    assert _stream_events(server.port, "sealtx/s") == [b"committed"]
    elsewhere.commit()
    assert _stream_events(server.port, "sealtx/other") == [b"other stream"]
