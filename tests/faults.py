"""Fault injection for the tests: a TCP proxy that cuts every connection it carries, or black-holes
them (every byte swallowed, the connections kept open), on demand; a server that accepts
connections and never answers; and a remote client whose first reply of chosen calls is lost."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

from segmentstore import SegmentStore
from segmentstore.client import RemoteClient
from segmentstore.errors import SegmentStoreError
from segmentstore.net.protocol import PROTOCOL_VERSION, REPLY, encode_frame
from segmentstore.net.server import SegmentStoreServer

__all__ = ["CuttingProxy", "SilentServer", "replies_lost_once"]


class CuttingProxy:
    """A TCP proxy to ``port`` that can cut every connection at once, or black-hole them (a fault
    injector): after ``black_hole()`` it forwards nothing either way, keeps every connection open
    and accepts new ones without connecting them upstream (a partition that TCP does not see)."""

    def __init__(self, port: int) -> None:
        self.upstream = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.socks: list[socket.socket] = []
        self.lock = threading.Lock()
        self.cuts = 0
        self.holed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def black_hole(self) -> None:
        """From now on swallow every byte; connections stay open, new ones are accepted."""
        self.holed = True

    def _accept(self) -> None:
        while True:
            try:
                a, _ = self.listener.accept()
            except OSError:
                return
            if self.holed:
                with self.lock:
                    self.socks.append(a)
                threading.Thread(target=_swallow, args=(a,), daemon=True).start()
                continue
            try:
                b = socket.create_connection(("127.0.0.1", self.upstream))
            except OSError:
                a.close()
                continue
            with self.lock:
                self.socks += [a, b]
            for src, dst in ((a, b), (b, a)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(1 << 16):
                if not self.holed:
                    dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Drop every connection now, mid-flight."""
        with self.lock:
            socks, self.socks = self.socks, []
            self.cuts += 1
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self.listener.close()
        self.cut()


def _swallow(sock: socket.socket) -> None:
    """Read and drop everything ``sock`` receives until it closes."""
    with contextlib.suppress(OSError):
        while sock.recv(1 << 16):
            pass


class SilentServer:
    """A server that accepts connections, reads what they send and never answers (not even the
    hello): a process hung, or a port taken by something else. With ``hello``, it answers the
    hello, then nothing (a server stuck after accepting). Without ``reads`` it reads nothing
    after the hello either, so a client's sends block once the socket buffers are full.
    ``close()`` drops it all."""

    def __init__(self, port: int = 0, hello: bool = False, reads: bool = True) -> None:
        self.hello = hello
        self.reads = reads
        self.listener = socket.create_server(("127.0.0.1", port))
        self.port = self.listener.getsockname()[1]
        self.socks: list[socket.socket] = []
        self.received = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.socks.append(conn)
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            if self.hello:
                data = sock.recv(1 << 16)
                with self.lock:
                    self.received += len(data)
                info = {"version": PROTOCOL_VERSION, "max_in_flight": 64}
                sock.sendall(b"".join(encode_frame([REPLY, 1, info])))
            while self.reads and (data := sock.recv(1 << 16)):
                with self.lock:
                    self.received += len(data)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept()
        self.listener.close()
        with self.lock:
            socks, self.socks = self.socks, []
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


@contextlib.contextmanager
def replies_lost_once(
    store: SegmentStore, target: object, *methods: str
) -> Iterator[tuple[RemoteClient, CuttingProxy, dict[str, list[Any]]]]:
    """A client of ``store`` served through a ``CuttingProxy`` that cuts every connection right
    after the first call of each of ``target``'s ``methods`` applied, so that its reply is lost.

    Yields the client, the proxy and, per method, the results of the calls that reached
    ``target`` (the server calls ``store`` or its controller: pass the one to watch).
    """
    applied: dict[str, list[Any]] = {m: [] for m in methods}
    proxy: CuttingProxy | None = None

    def cutting(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            applied[name].append(result)
            if len(applied[name]) == 1 and proxy is not None:
                proxy.cut()  # the first reply never reaches the client
            return result

        return call

    originals = {m: getattr(target, m) for m in methods}
    with SegmentStoreServer(store) as srv:
        proxy = CuttingProxy(srv.port)
        for m, fn in originals.items():
            setattr(target, m, cutting(m, fn))
        try:
            with RemoteClient(("127.0.0.1", proxy.port), timeout_s=10) as client:
                yield client, proxy, applied
        finally:
            proxy.close()
            for m, fn in originals.items():
                setattr(target, m, fn)


@contextlib.contextmanager
def writes_cut_after_first(log_owner: Any) -> Iterator[None]:
    """Within the block, ``log_owner._write`` (a system log's append of one record) writes its first
    record and then fails as a store refusing writes would: a crash between two records of one
    operation, such as the parts of a snapshot. Restored after."""
    write = log_owner._write
    calls = [0]

    def once(rec: dict[str, Any]) -> None:
        calls[0] += 1
        if calls[0] > 1:
            raise SegmentStoreError("refused (the test's crash between two records)")
        write(rec)

    log_owner._write = once
    try:
        yield
    finally:
        log_owner._write = write
