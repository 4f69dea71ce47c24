"""Helpers for the Pravega front door's tests: a raw wire client, events as Pravega frames them, and
``ingestwm serve --pravega-port`` in a subprocess (the real client holds the GIL while it waits,
so it cannot talk to a server in its own process)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from segmentstore.pravega import wire_replies as _replies  # noqa: F401 (registers the reply types)
from segmentstore.pravega import wire_requests as req
from segmentstore.pravega.wire import HEADER, decode_reply, encode

ROOT = Path(__file__).resolve().parents[1]


def frame_events(payloads: list[bytes]) -> bytes:
    """Events as a Pravega writer appends them: type 0, length, payload (big-endian)."""
    return b"".join(struct.pack(">iI", 0, len(p)) + p for p in payloads)


def parse_events(data: bytes) -> list[bytes]:
    """The payloads of Pravega-framed events (asserting the framing is whole)."""
    out, pos = [], 0
    while pos < len(data):
        kind, n = struct.unpack_from(">iI", data, pos)
        assert kind == 0 and pos + 8 + n <= len(data), (pos, kind, n, len(data))
        out.append(data[pos + 8 : pos + 8 + n])
        pos += 8 + n
    return out


class WireClient:
    """A blocking Pravega wire-protocol client over one socket (for tests)."""

    def __init__(self, port: int, hello: bool = True, timeout_s: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        if hello:
            self.send(req.Hello(15, 5))
            reply = self.recv()
            assert reply == req.Hello(15, 5), reply

    def send(self, cmd: Any) -> None:
        self.sock.sendall(encode(cmd))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError(f"closed by the server after {len(out)} of {n} bytes")
            out += chunk
        return bytes(out)

    def recv(self) -> Any:
        code, n = HEADER.unpack(self._exactly(HEADER.size))
        return decode_reply(code, self._exactly(n))

    def call(self, cmd: Any) -> Any:
        self.send(cmd)
        return self.recv()

    def closed_by_server(self, timeout_s: float = 5.0) -> bool:
        """Whether the server closes the connection (reads until EOF; replies before it are skipped)."""
        self.sock.settimeout(timeout_s)
        try:
            while self.sock.recv(65536):
                pass
        except TimeoutError:
            return False
        except ConnectionError:
            return True
        return True

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Served:
    """A running ``ingestwm serve --pravega-port`` subprocess and its ports."""

    proc: subprocess.Popen[str]
    port: int
    controller_port: int
    segment_port: int

    @property
    def controller_uri(self) -> str:
        return f"tcp://127.0.0.1:{self.controller_port}"

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)


def start_served(
    data_dir: Path | None = None,
    *,
    port: int = 0,
    controller_port: int = 0,
    segment_port: int = 0,
    token: str | None = None,
    extra: tuple[str, ...] = (),
) -> Served:
    args = [
        sys.executable,
        "-m",
        "bench.cli",
        "serve",
        "--port",
        str(port),
        "--pravega-port",
        str(controller_port),
    ]
    args += ["--pravega-segment-port", str(segment_port), *extra]
    if data_dir is not None:
        args += ["--data-dir", str(data_dir), "--sync", "always"]
    env = {**os.environ, **({"INGESTWM_TOKEN": token} if token else {})}
    p = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, text=True, env=env)
    assert p.stdout is not None
    first = p.stdout.readline()
    second = p.stdout.readline()
    m = re.search(r"listening on .*:(\d+)$", first.strip())
    n = re.search(r"pravega controller on .*:(\d+), pravega segment store on .*:(\d+)$", second.strip())
    if not (m and n):
        p.kill()
        raise AssertionError(f"ingestwm serve did not start: {first!r} {second!r}")
    return Served(p, int(m.group(1)), int(n.group(1)), int(n.group(2)))


@contextlib.contextmanager
def served(data_dir: Path | None = None, **kw: Any) -> Iterator[Served]:
    s = start_served(data_dir, **kw)
    try:
        yield s
    finally:
        if s.proc.poll() is None:
            s.kill()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
