"""Client side of one protocol connection, and a pool of them (used by ``RemoteClient``).

A ``Connection`` does the hello handshake, then one reader thread receives frames
(``recv_into`` one reusable buffer) and hands each reply to the callback registered
under its request id. Any number of threads may send on it (pipelining); when it
breaks, every outstanding callback gets a ``ConnectionLostError`` -- a ``NotSentError``
when the server is known not to have executed the request (connect failure, a refusal
at the server's ``max_connections``, idle close).

The hello says this client's protocol version and learns the server's
(``server_version``); a request for a command the server's version lacks fails before
it is sent (``UnsupportedCommandError``). A version-1 server refuses any other version
in the hello: the connection is then made again saying 1 (``net.protocol``, Versioning).

Nothing blocks without bound: the connect and the hello take at most ``connect_timeout_s``,
a send at most ``io_timeout_s`` (then the connection breaks); ``on_socket`` hands the
socket of a handshake in progress to its owner, who may shut it down to end the wait
(a client being closed).

How a send is bounded costs round trips (issue #35): a Python socket with a timeout polls
before every ``send`` and ``recv``, and each such call gives up the GIL once more, which a
thread busy writing events keeps for up to the switch interval (5 ms) each time -- three
more waits per append's round trip, so the writer's blocks hit their size limit and the
rate fell. A plain TCP connection is therefore a blocking socket whose kernel send timeout
(``SO_SNDTIMEO``) bounds each ``send``; a request's header and payload go in one
``sendmsg`` (``_send_all``: its deadline checked after a partial send); the reader thread
blocks in ``recv_into`` until data comes or ``close`` shuts the socket down. Over TLS the
socket keeps its Python timeout (a TLS write cannot resume after the kernel's timeout).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import re
import socket
import ssl
import struct
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ..checks import checked
from ..clock import monotonic_s
from ..errors import (
    ClientClosedError,
    ConnectionLostError,
    NotSentError,
    ProtocolError,
    ReadTimeoutError,
    SegmentStoreError,
    UnsupportedCommandError,
)
from ..net.commands import COMMANDS, VERSIONS, commands_of
from ..net.protocol import (
    DEFAULT_MAX_FRAME_BYTES,
    ERROR,
    MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    REPLY,
    REQUEST,
    FrameReader,
    decode_error,
    encode_frame,
    encode_request,
    unpack,
)

__all__ = ["Connection", "ConnectionPool", "ConnectionFactory", "Connecting", "ReplyCallback"]

ReplyCallback = Callable[[bool, Any, memoryview], None]
"""``callback(ok, result_or_exception, payload)``; ``payload`` is valid only during the call."""

_SMALL = 64 * 1024
_log = logging.getLogger(__name__)


class Connection:
    """One connection to a segment store server, shared by any number of threads.

    The hello says ``version`` (this client's ``PROTOCOL_VERSION`` unless given: a test speaks
    as an older client); ``server_version`` is the server's answer.
    """

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
        io_timeout_s: float | None = None,
        on_socket: Callable[[socket.socket | None], None] | None = None,
        version: int | None = None,
    ) -> None:
        self.address = f"{host}:{port}"
        self.max_frame_bytes = max_frame_bytes
        said = PROTOCOL_VERSION if version is None else version
        deadline = monotonic_s() + connect_timeout_s
        info: dict[str, Any] | None = None
        while info is None:
            sock, reader = self._open(host, port, ssl_context, server_hostname, deadline, on_socket)
            try:
                info = self._handshake(sock, reader, token, said)
            except ProtocolError as e:  # a version-1 server refuses newer clients: say its version
                older = _refused_for(e)
                if older is None or not MIN_PROTOCOL_VERSION <= older < said:
                    raise
                said = older
            finally:
                if info is None:
                    sock.close()
                if on_socket is not None:
                    on_socket(None)
        self._sock = sock
        self.info = info
        self.server_version: int = info["version"]
        """The protocol version the server said in its hello."""
        self.version = min(said, self.server_version)
        """The version this connection speaks: the lower of the client's and the server's."""
        self._lacks = frozenset(COMMANDS).difference(commands_of(self.server_version))
        self._io_timeout_s = io_timeout_s
        self._plain = ssl_context is None and io_timeout_s is not None and hasattr(socket, "SO_SNDTIMEO")
        if self._plain:
            assert io_timeout_s is not None
            sock.settimeout(None)  # blocking: no poll before each send and recv (module docstring)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(io_timeout_s))
        else:
            sock.settimeout(io_timeout_s)  # bounds a send; the reader thread reads on after a timeout
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

    def _open(
        self,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None,
        server_hostname: str | None,
        deadline: float,
        on_socket: Callable[[socket.socket | None], None] | None,
    ) -> tuple[socket.socket, FrameReader]:
        """A connected socket (TLS wrapped if asked), within the time left to ``deadline``."""
        left = deadline - monotonic_s()
        if not left > 0:
            raise NotSentError(f"cannot connect to the segment store at {self.address}: no time left")
        try:
            sock = socket.create_connection((host, port), timeout=left)
        except OSError as e:
            raise NotSentError(f"cannot connect to the segment store at {self.address}: {e}") from None
        try:
            if on_socket is not None:
                on_socket(sock)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if ssl_context is not None:
                sock = ssl_context.wrap_socket(sock, server_hostname=server_hostname or host)
                if on_socket is not None:
                    on_socket(sock)
        except BaseException as e:
            sock.close()
            if on_socket is not None:
                on_socket(None)
            if isinstance(e, (OSError, ssl.SSLError)) and not isinstance(e, SegmentStoreError):
                raise NotSentError(f"handshake with {self.address} failed: {e}") from None
            raise
        return sock, FrameReader(self.max_frame_bytes, size=256 * 1024)

    def _handshake(
        self, sock: socket.socket, reader: FrameReader, token: str | None, version: int
    ) -> dict[str, Any]:
        """Send the hello saying ``version``; the server's reply (its ``version`` checked)."""
        try:
            return self._hello(sock, reader, token, version)
        except SegmentStoreError:  # the server's answer (AuthenticationError is an OSError too)
            raise
        except (OSError, ssl.SSLError) as e:
            raise NotSentError(f"handshake with {self.address} failed: {e}") from None

    def _hello(
        self, sock: socket.socket, reader: FrameReader, token: str | None, version: int
    ) -> dict[str, Any]:
        args = {
            "version": version,
            "token": token,
            "client": "ingestwm",
            "max_frame_bytes": self.max_frame_bytes,
        }
        sock.sendall(b"".join(encode_frame([REQUEST, 1, "hello", args])))
        while True:
            n = sock.recv_into(reader.writable())
            if n == 0:
                raise NotSentError(f"{self.address} closed the connection during the hello")
            reader.commit(n)
            for h, _ in reader.frames():
                header = unpack(h)
                if type(header) is list and len(header) == 6 and header[0] == ERROR:
                    err = decode_error(header[2], header[3], header[4])
                    if getattr(err, "reason", None) == "busy":  # refused before any request: try again
                        raise NotSentError(f"{self.address} refused the connection: {err}")
                    raise err
                if (
                    type(header) is list
                    and len(header) == 3
                    and header[0] == REPLY
                    and header[1] == 1
                    and isinstance(header[2], dict)
                ):
                    info: dict[str, Any] = header[2]
                    v = info.get("version")
                    if type(v) is not int or v < MIN_PROTOCOL_VERSION:
                        raise ProtocolError(
                            f"{self.address}: the hello reply's protocol version must be an int >= "
                            f"{MIN_PROTOCOL_VERSION}, got {v!r:.20}"
                        )
                    return info
                raise ProtocolError(f"{self.address}: bad hello reply {header!r:.80}")

    def supports(self, command: str) -> bool:
        """Whether the server's protocol version has ``command`` (``commands.VERSIONS``)."""
        return command not in self._lacks

    def _unsupported(self, command: str) -> UnsupportedCommandError:
        since = COMMANDS[command].since
        return UnsupportedCommandError(
            f"{command}: the segment store at {self.address} speaks protocol version "
            f"{self.server_version}, {command} needs version {since} (ingestwm {VERSIONS[since - 1].release} "
            "or later): upgrade the server; not sent",
            command,
            self.server_version,
            since,
        )

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

        Raises ``NotSentError`` if the connection is closed already, ``UnsupportedCommandError``
        (nothing sent) if the server's protocol version lacks ``command``. Thread-safe.
        """
        if command in self._lacks:
            raise self._unsupported(command)
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
                if self._plain:
                    self._send_all(parts)
                elif sum(len(p) for p in parts) < _SMALL:
                    self._sock.sendall(b"".join(parts))
                else:
                    for p in parts:
                        self._sock.sendall(p)
        except OSError as e:
            self._shutdown(ConnectionLostError(f"sending to {self.address} failed: {e}"))
        return rid

    def _send_all(self, parts: list[bytes | memoryview]) -> None:
        """(send lock held, plain socket) Send ``parts`` in one ``sendmsg`` if the kernel takes them;
        raises ``TimeoutError`` if they are not all sent ``io_timeout_s`` after the start."""
        sock = self._sock
        assert self._io_timeout_s is not None
        deadline = monotonic_s() + self._io_timeout_s
        total = sum(map(len, parts))
        sent = sock.sendmsg(parts)  # blocks at most SO_SNDTIMEO (then EAGAIN, or part sent)
        if sent == total:
            return
        rest = memoryview(b"".join(parts))[sent:]
        try:
            while len(rest):
                left = deadline - monotonic_s()
                if left <= 0:
                    raise TimeoutError(f"{len(rest)} of {total} bytes not sent in {self._io_timeout_s:g} s")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(left))
                rest = rest[sock.send(rest) :]
        finally:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(self._io_timeout_s))

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
                try:
                    n = self._sock.recv_into(reader.writable())
                except TimeoutError:  # nothing to read for io_timeout_s: read on, unless closed
                    if self._closed:
                        reason = ConnectionLostError(f"the connection to {self.address} was closed")
                        break
                    continue
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

    def join(self, timeout_s: float | None = None) -> bool:
        """Wait for the reader thread to finish delivering replies (after ``close``); whether it ended."""
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
        return not self._thread.is_alive()


_REFUSED = re.compile(r"unsupported protocol version .*; this server speaks (\d+)")


def _refused_for(error: ProtocolError) -> int | None:
    """The version a version-1 server's refusal of the hello names (it takes no other), else None."""
    m = _REFUSED.fullmatch(str(error))
    return int(m.group(1)) if m else None


def _timeval(seconds: float) -> bytes:
    """A ``struct timeval`` for ``SO_SNDTIMEO``: at least 1 ms (0 would mean no timeout)."""
    us = max(1000, int(seconds * 1_000_000))
    return struct.pack("ll", us // 1_000_000, us % 1_000_000)


ConnectionFactory = Callable[[float, Callable[[socket.socket | None], None]], Connection]
"""``factory(connect_timeout_s, on_socket)``: a new connection (see ``Connection``)."""


class Connecting:
    """The handshakes in progress of one owner (a pool, the append pipeline); ``cancel`` ends them.

    ``open(factory, deadline)`` makes a connection, its connect and hello taking no longer
    than the time left to ``deadline`` (and the factory's own bound); after ``cancel`` it
    refuses (``ClientClosedError``) and a handshake in progress ends at once. O(1).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._socks: set[socket.socket] = set()
        self._cancelled = False

    def open(self, factory: ConnectionFactory, deadline: float, what: str) -> Connection:
        mine: list[socket.socket] = []

        def on_socket(sock: socket.socket | None) -> None:
            with self._lock:
                self._socks.difference_update(mine)
                mine.clear()
                if sock is None:
                    return
                if self._cancelled:
                    raise ClientClosedError(f"{what}: the client is closed")
                mine.append(sock)
                self._socks.add(sock)

        if self._cancelled:
            raise ClientClosedError(f"{what}: the client is closed")
        conn = factory(deadline - monotonic_s(), on_socket)
        if self._cancelled:  # closed while the hello was answered: not used
            conn.close()
            conn.join(1.0)
            raise ClientClosedError(f"{what}: the client is closed")
        return conn

    def cancel(self) -> None:
        """Refuse new connections; end the handshakes in progress (their sockets shut down)."""
        with self._lock:
            self._cancelled = True
            socks = list(self._socks)
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @checked
    def _check(self) -> None:
        """Assert only open handshakes are tracked: none is left once they ended."""
        with self._lock:
            assert all(s.fileno() >= 0 or self._cancelled for s in self._socks), self._socks


def join_all(conns: Iterator[Connection] | list[Connection], deadline: float) -> None:
    """Wait (up to ``deadline``, at least a moment each) for the reader threads of closed connections."""
    for c in conns:
        c.join(max(0.05, deadline - monotonic_s()))


class ConnectionPool:
    """Up to ``size`` connections, made lazily, replaced when broken or idle too long.

    ``close`` is final: no connection is made after it, the handshakes in progress end, and
    the reader thread of every connection the pool made is joined.
    """

    def __init__(self, factory: ConnectionFactory, size: int) -> None:
        self._factory = factory
        self._size = size
        self._conns: list[Connection] = []
        self._dropped: list[Connection] = []  # closed, their reader threads perhaps still ending
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # a connection made (or not)
        self._connecting = Connecting()
        self._making = 0  # connections being made (outside the lock)

    def get(self, deadline: float) -> Connection:
        """A live connection, the least busy one; raises ``NotSentError`` if none can be made by
        ``deadline`` (``ClientClosedError`` once the pool is closed)."""
        with self._cond:
            while True:
                if self._connecting.cancelled:
                    raise ClientClosedError("the client is closed")
                keep = []
                for c in self._conns:
                    if c.alive and not (c.pending == 0 and c.idle_s() > c.idle_timeout_s / 2):
                        keep.append(c)
                    else:
                        c.close()
                        self._dropped.append(c)
                self._conns = keep
                self._dropped = [c for c in self._dropped if not c.join(0)]
                best = min(keep, key=lambda c: c.pending, default=None)
                room = len(keep) + self._making < self._size
                if best is not None and not (best.pending and room):
                    return best
                if best is not None or room:
                    break
                left = deadline - monotonic_s()  # ``size`` being made already: wait for one
                if left <= 0:
                    raise NotSentError("connect: no connection to the segment store was made in time")
                self._cond.wait(left)
            self._making += 1
        try:  # the handshake runs outside the lock: other calls (and close) go on meanwhile
            made = self._connecting.open(self._factory, deadline, "connect")
        except NotSentError:
            if best is not None:
                return best
            raise
        finally:
            with self._cond:
                self._making -= 1
                self._cond.notify_all()
        with self._lock:
            if self._connecting.cancelled:
                made.close()
                self._dropped.append(made)
                raise ClientClosedError("the client is closed")
            self._conns.append(made)
        return made

    def close(self, timeout_s: float = 1.0) -> None:
        """Close every connection; wait up to ``timeout_s`` for their reader threads. Idempotent."""
        deadline = monotonic_s() + timeout_s
        with self._lock:
            self._connecting.cancel()
            conns, self._conns = self._conns, []
            dropped, self._dropped = self._dropped, []
            self._cond.notify_all()
        for c in conns:
            c.close()
        join_all(conns + dropped, deadline)
