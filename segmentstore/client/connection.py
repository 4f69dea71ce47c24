"""Client side of one protocol connection, and a pool of them (used by ``RemoteClient``).

A ``Connection`` does the hello handshake, then one reader thread receives frames
(``recv_into`` one reusable buffer) and hands each reply to the callback registered
under its request id. Any number of threads may send on it (pipelining); when it
breaks, every outstanding callback gets a ``ConnectionLostError`` -- a ``NotSentError``
when the server is known not to have executed the request (connect failure, idle close).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import socket
import ssl
import threading
from collections.abc import Callable
from typing import Any

from ..clock import monotonic_s
from ..errors import ConnectionLostError, NotSentError, ProtocolError, ReadTimeoutError, SegmentStoreError
from ..net.protocol import (
    DEFAULT_MAX_FRAME_BYTES,
    ERROR,
    PROTOCOL_VERSION,
    REPLY,
    REQUEST,
    FrameReader,
    decode_error,
    encode_frame,
    encode_request,
    unpack,
)

__all__ = ["Connection", "ConnectionPool", "ReplyCallback"]

ReplyCallback = Callable[[bool, Any, memoryview], None]
"""``callback(ok, result_or_exception, payload)``; ``payload`` is valid only during the call."""

_SMALL = 64 * 1024
_log = logging.getLogger(__name__)


class Connection:
    """One connection to a segment store server, shared by any number of threads."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        connect_timeout_s: float = 5.0,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        self.address = f"{host}:{port}"
        self.max_frame_bytes = max_frame_bytes
        try:
            sock = socket.create_connection((host, port), timeout=connect_timeout_s)
        except OSError as e:
            raise NotSentError(f"cannot connect to the segment store at {self.address}: {e}") from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if ssl_context is not None:
                sock = ssl_context.wrap_socket(sock, server_hostname=server_hostname or host)
            reader = FrameReader(max_frame_bytes, size=256 * 1024)
            self._sock = sock
            self.info = self._handshake(reader, token)
        except BaseException as e:
            sock.close()
            if isinstance(e, SegmentStoreError):
                raise
            if isinstance(e, (OSError, ssl.SSLError)):
                raise NotSentError(f"handshake with {self.address} failed: {e}") from None
            raise
        sock.settimeout(None)
        self.max_in_flight: int = int(self.info.get("max_in_flight", 1024))
        self.idle_timeout_s: float = float(self.info.get("idle_timeout_s", 600.0))
        self._ids = itertools.count(2)  # 1 was the hello
        self._pending: dict[int, ReplyCallback] = {}
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self.max_in_flight)
        self._closed = False
        self._reason: BaseException | None = None
        self._not_executed = False
        self.last_used = monotonic_s()
        self._thread = threading.Thread(
            target=self._read_loop, args=(reader,), name=f"ingestwm-conn-{self.address}", daemon=True
        )
        self._thread.start()

    def _handshake(self, reader: FrameReader, token: str | None) -> dict[str, Any]:
        args = {
            "version": PROTOCOL_VERSION,
            "token": token,
            "client": "ingestwm",
            "max_frame_bytes": self.max_frame_bytes,
        }
        self._sock.sendall(b"".join(encode_frame([REQUEST, 1, "hello", args])))
        while True:
            n = self._sock.recv_into(reader.writable())
            if n == 0:
                raise NotSentError(f"{self.address} closed the connection during the hello")
            reader.commit(n)
            for h, _ in reader.frames():
                header = unpack(h)
                if type(header) is list and len(header) == 6 and header[0] == ERROR:
                    raise decode_error(header[2], header[3], header[4])
                if (
                    type(header) is list
                    and len(header) == 3
                    and header[0] == REPLY
                    and header[1] == 1
                    and isinstance(header[2], dict)
                ):
                    return header[2]
                raise ProtocolError(f"{self.address}: bad hello reply {header!r:.80}")

    # ------------------------------------------------------------------ state
    @property
    def alive(self) -> bool:
        return not self._closed

    @property
    def pending(self) -> int:
        """Requests sent and not answered yet."""
        return len(self._pending)

    def idle_s(self) -> float:
        """Seconds since the last request was sent."""
        return monotonic_s() - self.last_used

    # ------------------------------------------------------------------ requests
    def request(
        self,
        command: str,
        packed_args: bytes,
        payload: bytes | memoryview,
        callback: ReplyCallback,
        deadline: float | None = None,
    ) -> int:
        """Send one request (``packed_args``: ``protocol.pack(args)``); ``callback`` gets its reply.

        Raises ``NotSentError`` if the connection is closed already. Thread-safe.
        """
        timeout = -1.0 if deadline is None else max(0.0, deadline - monotonic_s())
        if not self._slots.acquire(timeout=timeout):
            raise ReadTimeoutError(
                f"{command}: {self.max_in_flight} requests in flight to {self.address} did not finish in time"
            )
        rid = next(self._ids)
        parts = encode_request(rid, command, packed_args, payload)

        def done(ok: bool, result: Any, p: memoryview) -> None:
            self._slots.release()
            callback(ok, result, p)

        with self._lock:
            if self._closed:
                self._slots.release()
                raise self._lost(command, not_sent=True)
            self._pending[rid] = done
        self.last_used = monotonic_s()
        try:
            with self._send_lock:
                if sum(len(p) for p in parts) < _SMALL:
                    self._sock.sendall(b"".join(parts))
                else:
                    for p in parts:
                        self._sock.sendall(p)
        except OSError as e:
            self._shutdown(ConnectionLostError(f"sending to {self.address} failed: {e}"))
        return rid

    def call(
        self,
        command: str,
        packed_args: bytes,
        payload: bytes | memoryview,
        deadline: float,
        copy_payload: bool = False,
    ) -> tuple[Any, bytes]:
        """Send a request and wait for its reply until ``deadline``; re-raises an error reply."""
        box: list[Any] = []
        lock = threading.Lock()
        lock.acquire()

        def done(ok: bool, result: Any, p: memoryview) -> None:
            box.extend((ok, result, bytes(p) if copy_payload else b""))
            lock.release()

        rid = self.request(command, packed_args, payload, done, deadline)
        if not lock.acquire(timeout=max(0.0, deadline - monotonic_s())):
            with self._lock:
                cb = self._pending.pop(rid, None)
            if cb is not None:
                self._slots.release()
                raise ReadTimeoutError(f"{command}: no reply from {self.address} in time")
            lock.acquire()  # the reply is being delivered right now
        ok, result, data = box
        if not ok:
            raise result
        return result, data

    # ------------------------------------------------------------------ reader thread
    def _read_loop(self, reader: FrameReader) -> None:
        reason: BaseException
        try:
            while True:
                n = self._sock.recv_into(reader.writable())
                if n == 0:
                    reason = ConnectionLostError(f"{self.address} closed the connection")
                    break
                reader.commit(n)
                for h, p in reader.frames():
                    self._on_frame(unpack(h), p)
        except (OSError, ValueError) as e:
            reason = ConnectionLostError(f"connection to {self.address} broke: {e}")
        except SegmentStoreError as e:
            reason = ConnectionLostError(f"connection to {self.address} failed: {e}")
        except Exception as e:  # a bug in a callback: fail the connection, not silently
            _log.exception("segment store connection: reader failed")
            reason = ConnectionLostError(f"connection to {self.address} failed: {e!r}")
        self._shutdown(reason)

    def _on_frame(self, header: Any, payload: memoryview) -> None:
        if type(header) is not list or len(header) < 3 or header[0] not in (REPLY, ERROR):
            raise ProtocolError(f"malformed reply header {header!r:.80}")
        rid = header[1]
        if header[0] == REPLY:
            ok, result = True, header[2]
        else:
            if len(header) != 6:
                raise ProtocolError(f"malformed error header {header!r:.80}")
            ok, result = False, decode_error(header[2], header[3], header[4])
            if header[5] or rid == 0:  # fatal: the server closes the connection
                self._reason = result
                if getattr(result, "reason", None) == "idle":
                    self._not_executed = True
            if rid == 0:
                return
        with self._lock:
            cb = self._pending.pop(rid, None)
        if cb is not None:
            cb(ok, result, payload)

    def _lost(self, command: str, not_sent: bool = False) -> ConnectionLostError:
        why = f": {self._reason}" if self._reason is not None else ""
        cls = NotSentError if not_sent or self._not_executed else ConnectionLostError
        return cls(f"{command}: the connection to {self.address} is closed{why}")

    def _shutdown(self, reason: BaseException) -> None:
        with self._lock:
            if self._reason is None:
                self._reason = reason
            self._closed = True
            pending, self._pending = self._pending, {}
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        for cb in pending.values():
            cb(False, self._lost("request"), memoryview(b""))

    def close(self) -> None:
        """Close the connection; outstanding requests fail with ``ConnectionLostError``."""
        self._shutdown(ConnectionLostError("the client closed the connection"))
        self._sock.close()

    def join(self, timeout_s: float | None = None) -> None:
        """Wait for the reader thread to finish delivering replies (after ``close``)."""
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)


class ConnectionPool:
    """Up to ``size`` connections, made lazily, replaced when broken or idle too long."""

    def __init__(self, factory: Callable[[], Connection], size: int) -> None:
        self._factory = factory
        self._size = size
        self._conns: list[Connection] = []
        self._lock = threading.Lock()
        self._closed = False

    def get(self) -> Connection:
        """A live connection, the least busy one; raises ``NotSentError`` if none can be made."""
        with self._lock:
            if self._closed:
                raise NotSentError("the client is closed")
            keep = []
            for c in self._conns:
                if c.alive and not (c.pending == 0 and c.idle_s() > c.idle_timeout_s / 2):
                    keep.append(c)
                else:
                    c.close()
            self._conns = keep
            best = min(keep, key=lambda c: c.pending, default=None)
            if best is None or (best.pending and len(keep) < self._size):
                best = self._factory()
                self._conns.append(best)
            return best

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns, self._conns = self._conns, []
        for c in conns:
            c.close()
