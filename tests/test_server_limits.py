"""The served store under abuse, and the operator's settings (issue 13).

Memory follows the bytes a peer actually sent, never a declared length; before the
hello only a small frame is taken; connections are bounded (``max_connections``),
peers without a hello or that trickle a frame are closed; and through all of it a
well-behaved client gets right answers. ``ingestwm serve`` takes the store's and the
server's settings from flags and from a TOML file.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from segmentstore import ManualClock, SegmentStore
from segmentstore.client import RemoteClient
from segmentstore.clock import monotonic_s
from segmentstore.errors import InvalidArgumentError
from segmentstore.net.protocol import PROTOCOL_VERSION, encode_frame, unpack
from segmentstore.net.serve_config import load_serve_config
from segmentstore.net.server import SegmentStoreServer

ROOT = Path(__file__).resolve().parents[1]
MiB = 1 << 20
_HELLO = b"".join(bytes(p) for p in encode_frame([0, 1, "hello", {"version": PROTOCOL_VERSION}]))


def _prefix(declared: int, header: int = 4) -> bytes:
    return struct.pack(">II", declared, header)


def _frames_until_closed(s: socket.socket, timeout_s: float = 10) -> list[Any]:
    """Headers of the frames the server sends until it closes the connection."""
    s.settimeout(timeout_s)
    buf = b""
    try:
        while chunk := s.recv(65536):
            buf += chunk
    except ConnectionResetError:
        pass
    except TimeoutError:
        raise AssertionError(f"the server did not close the connection within {timeout_s} s") from None
    finally:
        s.close()
    out = []
    while len(buf) >= 8:
        n, h = struct.unpack(">II", buf[:8])
        out.append(unpack(buf[8 : 8 + h]))
        buf = buf[4 + n :]
    return out


def _fatal(headers: list[Any], reason: str | None = None) -> Any:
    assert headers, "closed without an error frame"
    last = headers[-1]
    assert last[0] == 2 and last[5] is True, last
    if reason is not None:
        assert last[4].get("reason") == reason, last
    return last


def _healthy(port: int) -> None:
    with RemoteClient(("127.0.0.1", port), timeout_s=20) as c:
        name = f"ok-{os.getpid()}-{threading.get_ident()}-{monotonic_s()}"
        c.create_segment(name)
        c.append(name, b"abc")
        assert c.read(name, 0, 10).data == b"abc"


@pytest.fixture
def served() -> Iterator[tuple[SegmentStore, int]]:
    st = SegmentStore(clock=ManualClock(1_000))
    srv = SegmentStoreServer(st, max_connections=8, handshake_timeout_s=0.5, frame_timeout_s=0.5)
    port = srv.start()
    try:
        yield st, port
    finally:
        srv.stop()
        st.close()


# ---------------------------------------------------------------- frames
def test_before_the_hello_only_a_small_frame_is_taken(served: tuple[SegmentStore, int]) -> None:
    _, port = served
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(_prefix(16 * MiB) + bytes(1024))
    err = _fatal(_frames_until_closed(s))
    assert err[2] == "ProtocolError" and str(16 * MiB) in err[3]
    _healthy(port)


def test_a_msgpack_bomb_is_refused_and_the_server_stays_well(served: tuple[SegmentStore, int]) -> None:
    _, port = served
    for bomb in (
        b"\xdd\xff\xff\xff\xff",  # an array declaring 4 G items
        b"\xdf\xff\xff\xff\xff",  # a map declaring 4 G pairs
        b"\x91" * 60_000 + b"\xc0",  # arrays nested 60,000 deep
    ):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(_HELLO + struct.pack(">II", 4 + len(bomb), len(bomb)) + bomb)
        _fatal(_frames_until_closed(s))
    _healthy(port)


def test_connections_without_a_hello_and_slow_senders_are_closed(served: tuple[SegmentStore, int]) -> None:
    _, port = served
    silent = socket.create_connection(("127.0.0.1", port))
    _fatal(_frames_until_closed(silent), "handshake")
    trickle = socket.create_connection(("127.0.0.1", port))
    trickle.sendall(_HELLO + _prefix(1000, 10) + b"x")  # a frame that never completes
    _fatal(_frames_until_closed(trickle), "slow")
    _healthy(port)


def test_beyond_max_connections_a_connection_is_refused_with_an_error(
    served: tuple[SegmentStore, int],
) -> None:
    _, port = served
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(8)]
    for h in held:
        h.sendall(_HELLO)
        h.recv(1024)
    extra = socket.create_connection(("127.0.0.1", port))
    err = _fatal(_frames_until_closed(extra), "busy")
    assert "max_connections=8" in err[3]
    for _ in range(4):  # room for the client's pool
        held.pop().close()
    deadline = monotonic_s() + 10
    while True:  # the server notices the close asynchronously
        try:
            _healthy(port)
            break
        except Exception:
            if monotonic_s() > deadline:
                raise
            threading.Event().wait(0.05)
    for h in held:
        h.close()


# ---------------------------------------------------------------- memory, measured on a served process
def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc to measure RSS")
def test_declared_lengths_floods_and_slow_senders_keep_the_server_small(tmp_path: Path) -> None:
    p = subprocess.Popen(
        [sys.executable, "-m", "bench.cli", "serve", "--port", "0", "--max-connections", "200",
         "--handshake-timeout", "30"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert p.stdout is not None
        line = p.stdout.readline()
        port = int(line.rsplit(":", 1)[1])
        _healthy(port)
        base = _rss_kib(p.pid)
        socks = []
        for _i in range(64):  # after the hello: declare 16 MiB, send 1 MiB
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(_HELLO)
            s.recv(1024)
            s.sendall(_prefix(16 * MiB, 8) + bytes(MiB))
            socks.append(s)
        for _i in range(64):  # before the hello: declare 16 MiB (refused at once)
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(_prefix(16 * MiB) + bytes(64 * 1024))
            socks.append(s)
        flood = []
        for _ in range(300):  # beyond max_connections: refused, not held
            try:
                flood.append(socket.create_connection(("127.0.0.1", port), timeout=10))
            except OSError:
                break
        threading.Event().wait(1.0)
        grown = (_rss_kib(p.pid) - base) * 1024
        print(f"server RSS growth: {grown / 1e6:.1f} MB")
        assert grown < 64_000_000, f"the server grew by {grown / 1e6:.0f} MB"
        refused = sum(1 for f in _close_all(flood) if f and f[-1][4].get("reason") == "busy")
        assert refused >= 300 - 200 + 64 - 1, refused  # held: the 64 senders and the flood up to 200
        _healthy(port)
        _close_all(socks)
        _healthy(port)
    finally:
        p.terminate()
        p.wait(30)


def _close_all(socks: list[socket.socket]) -> list[list[Any]]:
    """Each socket's frames: the refused ones got an error frame and were closed by the server."""
    out = []
    for s in socks:
        s.setblocking(False)
        try:
            data = s.recv(65536)
        except BlockingIOError:
            data = b""
        s.close()
        frames = []
        while len(data) >= 8:
            n, h = struct.unpack(">II", data[:8])
            frames.append(unpack(data[8 : 8 + h]))
            data = data[4 + n :]
        out.append(frames)
    return out


# ---------------------------------------------------------------- operator settings
def test_serve_settings_come_from_flags_over_a_toml_file(tmp_path: Path) -> None:
    f = tmp_path / "serve.toml"
    f.write_text(
        "[store]\nmax_watermark_lag_ms = 2500\npolling_period_ms = 100\nsync = 'interval'\n"
        "[server]\nport = 0\nmax_connections = 7\nidle_timeout_s = 30\n"
    )
    c = load_serve_config(f, {"polling_period_ms": 250, "max_connections": None, "host": "127.0.0.1"})
    assert (c.store.max_watermark_lag_ms, c.store.polling_period_ms, c.store.sync) == (2500, 250, "interval")
    assert (c.server.port, c.server.max_connections, c.server.idle_timeout_s) == (0, 7, 30.0)
    assert load_serve_config(None).store.max_watermark_lag_ms == 10_000


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[store]\nmax_watermark_lag = 5\n", "'max_watermark_lag'"),
        ("[stor]\nx = 1\n", "[stor]"),
        ("[server]\nmax_connections = 'many'\n", "'many'"),
        ("[store]\npolling_period_ms = 0\n", "polling_period_ms"),
        ("[store\n", "not valid TOML"),
    ],
)
def test_a_bad_config_file_is_refused_naming_what_is_wrong(tmp_path: Path, text: str, named: str) -> None:
    f = tmp_path / "serve.toml"
    f.write_text(text)
    with pytest.raises(InvalidArgumentError, match=r"serve\.toml") as ei:
        load_serve_config(f)
    assert named in str(ei.value)


def test_serve_cli_refuses_a_bad_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench.cli import main

    f = tmp_path / "serve.toml"
    f.write_text("[store]\nmax_watermark_lag_ms = -1\n")
    assert main(["serve", "--config", str(f)]) == 1
    assert "max_watermark_lag_ms" in capsys.readouterr().err
    assert main(["serve", "--polling-period", "0"]) == 1
    assert "polling_period_ms" in capsys.readouterr().err
