"""Segment store server throughput on loopback against raw sockets, measured side by side in one run.

- ``append``: 100-byte events appended with ``RemoteClient.append_many`` (each event its
  own append with its own offset, pipelined, many per frame) to ``ingestwm serve`` in
  another process, against a raw-socket echo server in another process that sends the
  same bytes straight back (no framing, no store): events per second.
- ``append_async``: the same with one future per event.
- ``read``: sequential 1 MiB reads of a 64 MiB segment (``--quick``: 16 MiB), against a
  raw-socket server that answers each 4-byte request with that many bytes: MB/s.
- ``call``: synchronous ``get_info`` round trips against raw 8-byte ping-pongs.

``ratio`` is the server's figure divided by the raw socket's (1.0 = as fast as raw).
Goals: >= 200k appends/s and reads within 3x of raw (ratio >= 0.33). The CPU time
per append of the client and of the server process (Linux) shows what the rates would
be on idle cores when other work shares the machine.
Run ``python -m bench.perf.bench_server [--quick | --tiny]``; ``run(size)`` returns the rows.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from segmentstore.client import RemoteClient
from segmentstore.clock import monotonic_s

from .errors import BenchmarkError
from .serving import process_cpu_s
from .suite import Row, Size, module_main, row, sized

__all__ = ["run", "main"]

EVENT_BYTES = 100
READ_BYTES = 1 << 20
_ROOT = Path(__file__).resolve().parents[2]
_RAW_SERVER = "from bench.perf.bench_server import _raw_server_main; _raw_server_main()"


# ---------------------------------------------------------------------- raw baseline server
def _raw_serve_connection(conn: socket.socket) -> None:
    """First byte picks the mode: ``E`` echo everything, ``R`` answer u32 requests with that many bytes."""
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    mode = conn.recv(1)
    buf = bytearray(4 << 20)
    view = memoryview(buf)
    blob = b"r" * (READ_BYTES * 2)
    with conn:
        while True:
            n = conn.recv_into(buf) if mode == b"E" else conn.recv_into(view[:4])
            if n == 0:
                return
            if mode == b"E":
                conn.sendall(view[:n])
            else:
                while n < 4:
                    n += conn.recv_into(view[n:4])
                conn.sendall(memoryview(blob)[: int.from_bytes(view[:4], "big")])


def _raw_server_main() -> None:
    """Entry point of the baseline process: prints its port, serves until killed."""
    listener = socket.create_server(("127.0.0.1", 0))
    print(listener.getsockname()[1], flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_raw_serve_connection, args=(conn,), daemon=True).start()


def _raw_connect(port: int, mode: bytes) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(mode)
    return s


def _raw_echo_events_per_s(port: int, n: int) -> float:
    """Stream ``n`` 100-byte events in 400 KB writes and read the echo back (a reader thread)."""
    chunk = b"e" * (EVENT_BYTES * 4096)
    total = n * EVENT_BYTES
    with _raw_connect(port, b"E") as s:
        buf = bytearray(1 << 20)

        def drain() -> None:
            got = 0
            while got < total:
                got += s.recv_into(buf)

        t0 = monotonic_s()
        reader = threading.Thread(target=drain)
        reader.start()
        sent = 0
        while sent < total:
            k = min(len(chunk), total - sent)
            s.sendall(chunk[:k])
            sent += k
        reader.join()
        return n / (monotonic_s() - t0)


def _raw_read_mb_per_s(port: int, total: int) -> float:
    with _raw_connect(port, b"R") as s:
        buf = bytearray(READ_BYTES)
        view = memoryview(buf)
        t0 = monotonic_s()
        done = 0
        while done < total:
            s.sendall(READ_BYTES.to_bytes(4, "big"))
            got = 0
            while got < READ_BYTES:
                got += s.recv_into(view[got:])
            data = bytes(buf)  # the client keeps the bytes, as a SegmentRead does
            done += len(data)
        return total / (monotonic_s() - t0) / 1e6


def _raw_round_trips_per_s(port: int, n: int) -> float:
    with _raw_connect(port, b"E") as s:
        t0 = monotonic_s()
        for _ in range(n):
            s.sendall(b"12345678")
            got = 0
            while got < 8:
                got += len(s.recv(8 - got))
        return n / (monotonic_s() - t0)


# ---------------------------------------------------------------------- the server
def _start(args: list[str]) -> tuple[subprocess.Popen[str], int]:
    p = subprocess.Popen([sys.executable, *args], cwd=_ROOT, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    line = p.stdout.readline().strip()
    if not line:
        p.kill()
        raise RuntimeError(f"{args} did not start")
    return p, int(line.rsplit(":", 1)[-1])


def _check(c: RemoteClient) -> None:
    """Appends land at the offsets returned, reads return the bytes appended (before timing)."""
    events = [i.to_bytes(4, "big") * (EVENT_BYTES // 4) for i in range(1_000)]
    c.create_segment("bench/check")
    offsets = [r.offset for r in c.append_many("bench/check", events)]
    if offsets != [i * EVENT_BYTES for i in range(len(events))]:
        raise BenchmarkError("append_many returned wrong offsets")
    if c.read("bench/check", 0, READ_BYTES).data != b"".join(events):
        raise BenchmarkError("a read returned other bytes than those appended")
    if c.get_info("bench/check").length != len(events) * EVENT_BYTES:
        raise BenchmarkError("get_info returned a wrong length")


def _measure(server_pid: int, port: int, raw_port: int, size: Size) -> list[Row]:
    n = sized(size, 10_000, 200_000, 1_000_000)
    n_async = sized(size, 1_000, 20_000, 100_000)
    read_total = sized(size, 2, 16, 64) << 20
    calls = sized(size, 200, 2_000, 10_000)
    event = b"a" * EVENT_BYTES
    rows: list[Row] = []
    with RemoteClient(("127.0.0.1", port), timeout_s=120) as c:
        _check(c)
        c.create_segment("bench/append")
        c.append_many("bench/append", [event] * 20_000)  # warm up
        cpu0, srv0, t0 = process_cpu_s(os.getpid()), process_cpu_s(server_pid), monotonic_s()
        c.append_many("bench/append", [event] * n)
        appends = n / (monotonic_s() - t0)
        client_us = (process_cpu_s(os.getpid()) - cpu0) / n * 1e6
        server_us = (process_cpu_s(server_pid) - srv0) / n * 1e6
        raw_events = _raw_echo_events_per_s(raw_port, n)
        rows.append(row("server append_many 100 B", appends, "appends/s", "raw echo", appends / raw_events))
        t0 = monotonic_s()
        futures = [c.append_async("bench/append", event) for _ in range(n_async)]
        for f in futures:
            f.result()
        per_future = n_async / (monotonic_s() - t0)
        ratio = per_future / raw_events
        rows.append(row("server append_async 100 B", per_future, "appends/s", "raw echo", ratio))
        rows.append(row("raw socket echo 100 B", raw_events, "events/s", "itself", 1.0))
        if server_us and client_us:  # CPU per append (Linux; whole clock ticks): rates on idle cores
            rows.append(row("append_many client CPU", client_us, "us/append", "itself", 1.0))
            ratio = server_us / client_us
            rows.append(row("append_many server CPU", server_us, "us/append", "client CPU", ratio))

        c.create_segment("bench/read")
        c.append_many("bench/read", [b"r" * READ_BYTES] * (read_total // READ_BYTES))
        t0 = monotonic_s()
        offset = 0
        while offset < read_total:
            offset += len(c.read("bench/read", offset, READ_BYTES).data)
        reads = read_total / (monotonic_s() - t0) / 1e6
        raw_reads = _raw_read_mb_per_s(raw_port, read_total)
        rows.append(row("server read 1 MiB", reads, "MB/s", "raw socket", reads / raw_reads))
        rows.append(row("raw socket read 1 MiB", raw_reads, "MB/s", "itself", 1.0))

        t0 = monotonic_s()
        for _ in range(calls):
            c.get_info("bench/read")
        rate = calls / (monotonic_s() - t0)
        raw_rate = _raw_round_trips_per_s(raw_port, calls)
        rows.append(row("server get_info round trip", rate, "calls/s", "raw 8 B ping-pong", rate / raw_rate))
    return rows


@contextmanager
def _servers() -> Iterator[tuple[int, int, int]]:
    """``ingestwm serve`` and the raw baseline server in their own processes: (server pid, port, raw port)."""
    server, port = _start(["-m", "bench.cli", "serve", "--port", "0"])
    try:
        raw, raw_port = _start(["-c", _RAW_SERVER])
    except BaseException:
        server.terminate()
        server.wait(30)
        raise
    try:
        yield server.pid, port, raw_port
    finally:
        for p in (server, raw):
            p.terminate()
            p.wait(30)


def run(size: Size = "full") -> list[Row]:
    """Start ``ingestwm serve`` and the raw baseline server, measure, stop them; return the rows."""
    with _servers() as (pid, port, raw_port):
        return _measure(pid, port, raw_port, size)


# ---------------------------------------------------------------- pytest-benchmark (bench/perf/conftest.py)
@contextmanager
def _served_client() -> Iterator[RemoteClient]:
    with _servers() as (_, port, _), RemoteClient(("127.0.0.1", port), timeout_s=120) as c:
        _check(c)
        yield c


def test_append_many_10k_events(benchmark: Any) -> None:
    with _served_client() as c:
        c.create_segment("bench/append")
        benchmark(c.append_many, "bench/append", [b"a" * EVENT_BYTES] * 10_000)


def test_append_async_1k_events(benchmark: Any) -> None:
    with _served_client() as c:
        c.create_segment("bench/append")

        def appends() -> None:
            for f in [c.append_async("bench/append", b"a" * EVENT_BYTES) for _ in range(1_000)]:
                f.result()

        benchmark(appends)


def test_read_1mib(benchmark: Any) -> None:
    with _served_client() as c:
        c.create_segment("bench/read")
        c.append("bench/read", b"r" * READ_BYTES)
        benchmark(c.read, "bench/read", 0, READ_BYTES)


def test_get_info_round_trip(benchmark: Any) -> None:
    with _served_client() as c:
        benchmark(c.get_info, "bench/check")


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m bench.perf.bench_server [--quick | --tiny]`` and print the table."""
    module_main(run, argv, __doc__, "fewer events and bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
