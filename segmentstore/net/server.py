"""The segment store server: the wire protocol (``segmentstore.net.protocol``) over a ``SegmentStore``.

One asyncio event loop on a background thread serves every connection; store calls are fast
and run inline on it (the numba kernels are made ready before the first connection, so no
request compiles one: ``core.warmup``), so appends on a connection execute and are acknowledged
in arrival order. A read with ``wait_ms`` registers a future read and answers when it completes
(data, a tail watermark increase, seal) or when its timer fires (a zero-length read), never
holding up the connection's other requests. Dispatch is table-driven: ``commands.COMMANDS``
names every command and ``handlers.handlers()`` maps each to its handler (most call the
``EmbeddedClient`` method of the same name).

A misbehaving connection (malformed or oversized frame, unknown command, bad version or
token, too many waiting reads, idle too long) gets a fatal error frame and is closed;
the others and the stored data are not affected.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hmac
import ipaddress
import logging
import signal
import ssl
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..client.embedded import EmbeddedClient
from ..clock import monotonic_s
from ..core.warmup import KernelWarmup, warm_kernels
from ..errors import AuthenticationError, InvalidArgumentError, ProtocolError, SegmentStoreError
from ..future_read import FutureRead
from ..pravega.serving import announce, for_server, start_beside, stop_beside
from ..store import SegmentStore
from ..wait_any import ReadyFuture
from .commands import COMMANDS, decode_args, encode_read
from .handlers import Handler, handlers
from .protocol import (
    DEFAULT_MAX_BUFFERED_BYTES,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_FRAME_BYTES,
    HELLO_MAX_FRAME_BYTES,
    MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    REPLY,
    REQUEST,
    FrameReader,
    encode_frame,
    error_header,
    unpack,
)
from .serve_config import ServeConfig

__all__ = ["SegmentStoreServer", "serve"]

_log = logging.getLogger(__name__)
_SMALL = 64 * 1024  # output parts below this are coalesced into one write
_Waiting = FutureRead | ReadyFuture  # a request answered when it completes (or on its timer)
_Encode = Callable[[Any], tuple[Any, bytes]]  # its completed result -> (reply result, payload)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class SegmentStoreServer:
    """Serves ``store`` on ``host:port`` (port 0 picks a free one) from a background thread.

    Binding to a non-loopback address requires ``token``; clients must present it in
    their hello. ``ssl_context`` (a server-side ``ssl.SSLContext``) turns on TLS. ``pravega_port``
    serves Pravega's controller and segment store too (``segmentstore.pravega.serving``).
    ``stop()`` closes the server and its connections, not the store.
    """

    def __init__(
        self,
        store: SegmentStore,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_in_flight: int = 1024,
        idle_timeout_s: float = 600.0,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        handshake_timeout_s: float = 5.0,
        frame_timeout_s: float = 60.0,
        max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES,
        pravega_port: int | None = None,
        pravega_segment_port: int = 0,
    ) -> None:
        if not isinstance(host, str) or not host:
            raise InvalidArgumentError(f"server host must be a non-empty str, got {host!r}")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise InvalidArgumentError(f"server port must be an int in [0, 65535], got {port!r}")
        if token is not None and (not isinstance(token, str) or not token):
            raise InvalidArgumentError("server token must be a non-empty str or None")
        if token is None and not _is_loopback(host):
            raise InvalidArgumentError(
                f"binding to the non-loopback address {host!r} requires a token (--token or INGESTWM_TOKEN)"
            )
        for what, v, lo in (
            ("max_frame_bytes", max_frame_bytes, 65536),
            ("max_in_flight", max_in_flight, 1),
            ("max_connections", max_connections, 1),
            ("max_buffered_bytes", max_buffered_bytes, 65536),
        ):
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise InvalidArgumentError(f"server {what} must be an int >= {lo}, got {v!r}")
        for what, t in (
            ("idle_timeout_s", idle_timeout_s),
            ("handshake_timeout_s", handshake_timeout_s),
            ("frame_timeout_s", frame_timeout_s),
        ):
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not t > 0:
                raise InvalidArgumentError(f"server {what} must be a number > 0, got {t!r}")
        self.store = store
        self.host = host
        self.token = token
        self.ssl_context = ssl_context
        self.max_frame_bytes = max_frame_bytes
        self.max_in_flight = max_in_flight
        self.idle_timeout_s = float(idle_timeout_s)
        self.max_connections = max_connections
        self.handshake_timeout_s = float(handshake_timeout_s)
        self.frame_timeout_s = float(frame_timeout_s)
        self.refused = self.accepted = 0  # connections refused over max_connections; accepted since start
        self.max_buffered_bytes = max_buffered_bytes
        self._held = 0  # receive-buffer bytes of every connection
        self._starved: collections.deque[_Connection] = collections.deque()  # paused for memory
        # set (in the loop's thread) once stop() began: a connection accepted from then on is
        # aborted at once, never served (it would outlive the loop: a live socket nobody answers)
        self._stopping = False
        self.client = EmbeddedClient(store)
        self.max_append_bytes = store.config.max_append_bytes
        self._port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[_Connection] = set()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.handlers: dict[str, Handler] = handlers()
        self.kernels: KernelWarmup | None = None  # start() makes them ready
        self.pravega = for_server(self, pravega_port, pravega_segment_port)

    @property
    def port(self) -> int:
        """The bound port (after ``start()``)."""
        return self._port

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self._port

    @property
    def connection_count(self) -> int:
        """Open connections right now."""
        return len(self._connections)

    def start(self) -> int:
        """Make the numba kernels ready, then bind and serve on a background thread; returns the port.

        The kernels are loaded (or, on a first start, compiled) here, before the first
        connection, never on the event loop under a request (``core.warmup``); ``kernels``
        says how long it took.
        """
        if self._thread is not None:
            raise InvalidArgumentError("the server is started already")
        self.kernels = warm_kernels()
        self._thread = threading.Thread(target=self._run, name="ingestwm-server", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error
        start_beside(self.pravega, self.stop)
        return self._port

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            self._server = loop.run_until_complete(
                loop.create_server(
                    lambda: _Connection(self),
                    self.host,
                    self._port,
                    ssl=self.ssl_context,
                    reuse_address=True,
                )
            )
            self._port = self._server.sockets[0].getsockname()[1]
        except BaseException as e:  # bind errors go to start()'s caller
            self._error = e
            self._ready.set()
            loop.close()
            return
        loop.call_later(self._tick_s, self._idle_check)
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            self._stopping = True
            for c in list(self._connections):
                c.abort()
            # accepts the loop had taken from the listening socket finish here; connection_made
            # aborts each (the flag), and the transports' close callbacks run
            loop.run_until_complete(asyncio.sleep(0))
            for c in list(self._connections):
                c.abort()
            loop.run_until_complete(asyncio.sleep(0))
            loop.close()

    @property
    def _tick_s(self) -> float:
        return min(1.0, self.idle_timeout_s / 4, self.handshake_timeout_s / 4, self.frame_timeout_s / 4)

    def _idle_check(self) -> None:
        now = monotonic_s()
        for c in list(self._connections):
            if not c.hello and now - c.opened > self.handshake_timeout_s:
                c.fatal(0, _closing(f"no hello within {self.handshake_timeout_s:g} s", "handshake"))
            elif not (c.paused or c.starved) and now > (c.partial_since or now) + self.frame_timeout_s:
                c.fatal(0, _closing(f"a frame took more than {self.frame_timeout_s:g} s to arrive", "slow"))
            elif not c.waiting and now - c.last_activity > self.idle_timeout_s:
                c.fatal(0, _closing(f"connection idle for more than {self.idle_timeout_s:g} s", "idle"))
        assert self._loop is not None
        self._loop.call_later(self._tick_s, self._idle_check)

    def _account(self, c: _Connection) -> None:
        """Track ``c``'s receive buffer; past ``max_buffered_bytes``, a connection mid-frame waits.

        Memory then follows what was received, summed over every connection: a peer
        that declares a large frame and trickles it holds its bytes, not the server's;
        the kernel keeps the rest. Freed memory lets the waiting ones read again.
        """
        cap = 0 if c.closed else c.reader.capacity
        delta, c.held = cap - c.held, cap
        self._held += delta
        if self._held > self.max_buffered_bytes and c.reader.buffered and not c.starved and not c.closed:
            c.starved = True
            if c.transport is not None:
                c.transport.pause_reading()
            self._starved.append(c)
        elif delta < 0:
            while self._starved and self._held <= self.max_buffered_bytes:
                w = self._starved.popleft()
                w.starved = False
                if not w.closed and not w.paused and w.transport is not None:
                    w.partial_since = monotonic_s()
                    w.transport.resume_reading()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop serving and close every connection (the store stays open). Idempotent."""
        stop_beside(self.pravega)
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return

        def shutdown() -> None:
            self._stopping = True
            if self._server is not None:
                self._server.close()
            loop.stop()

        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(shutdown)
        thread.join(timeout_s)

    def __enter__(self) -> SegmentStoreServer:
        if self._thread is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _closing(message: str, reason: str) -> ProtocolError:
    err = ProtocolError(message)
    err.reason = reason  # type: ignore[attr-defined]
    return err


class _Connection(asyncio.BufferedProtocol):
    """One client connection: frame parsing, dispatch, ordered replies, waiting reads."""

    def __init__(self, server: SegmentStoreServer) -> None:
        self.server = server
        self.store = server.store
        self.client = server.client
        self.max_append_bytes = server.max_append_bytes
        self.reader = FrameReader(HELLO_MAX_FRAME_BYTES, size=4096)  # until the hello: a small frame
        self.transport: asyncio.Transport | None = None
        self.hello = False
        self.client_version = 0  # the protocol version its hello said
        self.closed = False
        self.paused = False
        self.max_reply = server.max_frame_bytes
        self.waiting: dict[_Waiting, tuple[int, asyncio.TimerHandle, _Encode]] = {}
        self.last_activity = self.opened = monotonic_s()
        self.partial_since: float | None = None  # when the frame still arriving began
        self.held = 0  # receive-buffer bytes counted in the server's total
        self.starved = False  # reading paused: the server's buffer budget is spent
        self._out: list[bytes | memoryview] = []
        self._out_n = 0

    # ------------------------------------------------------------------ transport callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=4 * 1024 * 1024)
        server = self.server
        if server._stopping:  # accepted while the server stops: reset, so the client retries elsewhere
            self.abort()
            return
        if len(server._connections) >= server.max_connections:
            server.refused += 1
            self.fatal(0, _closing(f"the server has max_connections={server.max_connections} open", "busy"))
            return
        server._connections.add(self)
        server.accepted += 1
        server._account(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server._connections.discard(self)
        self.server._account(self)
        self._drop_waiting()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.reader.writable(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self.reader.commit(nbytes)
        self.last_activity = now = monotonic_s()
        self._process()
        if not self.reader.buffered:
            self.partial_since = None
        elif self.partial_since is None:
            self.partial_since = now
        self.server._account(self)

    def eof_received(self) -> bool | None:
        self._flush()
        return None  # close

    def pause_writing(self) -> None:
        self.paused = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.paused = False
        if self.partial_since is not None:
            self.partial_since = monotonic_s()  # the wait was the server's, not the peer's
        if self.transport is not None and not self.closed:
            if not self.starved:
                self.transport.resume_reading()
            self._process()
            self.server._account(self)

    # ------------------------------------------------------------------ frames
    def _process(self) -> None:
        if self.closed:
            return
        try:
            for header, payload in self.reader.frames():
                self._dispatch(header, payload)
                if self.closed or self.paused:
                    break
        except ProtocolError as e:
            self.fatal(0, e)
        except Exception as e:  # a bug must not take the server down
            _log.exception("segment store server: connection failed")
            self.fatal(0, e)
        self._flush()

    def _dispatch(self, hview: memoryview, payload: memoryview) -> None:
        header = unpack(hview)
        if type(header) is not list or len(header) != 4 or header[0] != REQUEST:
            raise ProtocolError(
                f"a request header must be [0, request_id, command, args], got {header!r:.80}"
            )
        _, rid, name, args = header
        if type(rid) is not int or not 0 < rid < 2**64:
            raise ProtocolError(f"request id must be an int in [1, 2^64), got {rid!r:.40}")
        if not self.hello:
            if name != "hello":
                raise ProtocolError(f"the first request must be hello, got {name!r:.40}")
            self._hello(rid, args, payload)
            return
        handler = self.server.handlers.get(name) if type(name) is str else None
        if handler is None:
            raise ProtocolError(
                f"unknown command {name!r:.60} (this server speaks protocol version {PROTOCOL_VERSION}, "
                f"the client said {self.client_version})"
            )
        handler(self, rid, args, payload)

    def _hello(self, rid: int, args: Any, payload: memoryview) -> None:
        """Take a client of any protocol version from ``MIN_PROTOCOL_VERSION`` up; answer with this
        server's (the client sends only the commands of the lower of the two)."""
        kw = decode_args(COMMANDS["hello"], args, payload)
        version = kw["version"]
        if type(version) is not int or version < MIN_PROTOCOL_VERSION:
            err = ProtocolError(
                f"hello: protocol version must be an int >= {MIN_PROTOCOL_VERSION}, got {version!r:.20} "
                f"(this server speaks version {PROTOCOL_VERSION} to clients of any version from "
                f"{MIN_PROTOCOL_VERSION})"
            )
            err.server_version = PROTOCOL_VERSION  # type: ignore[attr-defined]
            raise err
        self.client_version = version
        token = self.server.token
        if token is not None:
            got = kw.get("token")
            if not isinstance(got, str) or not hmac.compare_digest(got.encode(), token.encode()):
                self.fatal(rid, AuthenticationError("wrong or missing token"))
                return
        mf = kw.get("max_frame_bytes")
        if type(mf) is int and mf >= 65536:
            self.max_reply = min(self.max_reply, mf)
        self.hello = True
        self.reader.max_frame_bytes = self.server.max_frame_bytes
        s = self.server
        self.reply(
            rid,
            {
                "version": PROTOCOL_VERSION,
                "server": "ingestwm",
                "max_frame_bytes": s.max_frame_bytes,
                "max_in_flight": s.max_in_flight,
                "idle_timeout_s": s.idle_timeout_s,
            },
        )

    # ------------------------------------------------------------------ output
    def reply(self, rid: int, result: Any, payload: bytes = b"") -> None:
        """Queue a reply frame (an error frame if the result cannot be encoded)."""
        try:
            parts = encode_frame([REPLY, rid, result], payload)
        except TypeError as e:
            parts = encode_frame(error_header(rid, SegmentStoreError(f"cannot encode the result: {e}")))
        self._emit(parts)

    def error(self, rid: int, exc: BaseException) -> None:
        self._emit(encode_frame(error_header(rid, exc)))

    def fatal(self, rid: int, exc: BaseException) -> None:
        """Send a fatal error frame and close the connection."""
        if self.closed:
            return
        self._emit(encode_frame(error_header(rid, exc, fatal=True)))
        self._flush()
        self.closed = True
        self._drop_waiting()
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        self.closed = True
        self._drop_waiting()
        if self.transport is not None:
            self.transport.abort()

    def _emit(self, parts: list[bytes | memoryview]) -> None:
        if self.closed:
            return
        for p in parts:
            if len(p) >= _SMALL:
                self._flush()
                assert self.transport is not None
                self.transport.write(p)
            else:
                self._out.append(p)
                self._out_n += len(p)
        if self._out_n >= _SMALL:
            self._flush()

    def _flush(self) -> None:
        if self._out and self.transport is not None and not self.transport.is_closing():
            self.transport.write(self._out[0] if len(self._out) == 1 else b"".join(self._out))
        self._out.clear()
        self._out_n = 0

    # ------------------------------------------------------------------ waiting reads
    def wait_read(self, rid: int, fut: _Waiting, wait_ms: int, encode: _Encode = encode_read) -> None:
        """Reply to ``rid`` once ``fut`` completes (``encode`` makes the reply), or after ``wait_ms``."""
        if len(self.waiting) >= self.server.max_in_flight:
            fut.wait(0)
            raise ProtocolError(f"more than max_in_flight={self.server.max_in_flight} requests in flight")
        loop = self.server._loop
        assert loop is not None
        timer = loop.call_later(wait_ms / 1000.0, _expire, fut)
        self.waiting[fut] = (rid, timer, encode)

        def done(f: Any) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the server stopped
                loop.call_soon_threadsafe(self._read_done, f)

        fut.add_done_callback(done)

    def _read_done(self, fut: _Waiting) -> None:
        entry = self.waiting.pop(fut, None)
        if entry is None or self.closed:
            return
        rid, timer, encode = entry
        timer.cancel()
        exc = fut.exception()
        if exc is not None:
            self.error(rid, exc)
        else:
            self.reply(rid, *encode(fut.result()))
        self._flush()

    def _drop_waiting(self) -> None:
        waiting, self.waiting = self.waiting, {}
        for fut, (_, timer, _) in waiting.items():
            timer.cancel()
            _expire(fut)


def _expire(fut: _Waiting) -> None:
    if not fut.done():
        fut.wait(0)


# ---------------------------------------------------------------------- serve (CLI)
def serve(
    data_dir: str | Path | None,
    config: ServeConfig | None = None,
    token: str | None = None,
    certfile: str | None = None,
    keyfile: str | None = None,
    echo: Callable[[str], None] = print,
) -> None:
    """Run ``ingestwm serve`` until SIGINT/SIGTERM; then stop and close the store (log synced)."""
    config = config if config is not None else ServeConfig()
    ctx = None
    if certfile is not None:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(certfile, keyfile)
    lim = config.server
    store = SegmentStore(config=config.store, data_dir=data_dir)
    try:
        server = SegmentStoreServer(
            store,
            lim.host,
            lim.port,
            token=token,
            ssl_context=ctx,
            max_frame_bytes=lim.max_frame_bytes,
            max_in_flight=lim.max_in_flight,
            idle_timeout_s=lim.idle_timeout_s,
            max_connections=lim.max_connections,
            handshake_timeout_s=lim.handshake_timeout_s,
            **lim.pravega_ports(),
        )
        stop = threading.Event()
        old = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            print(  # stderr: the first line on stdout stays "listening on", which scripts wait for
                "loading the numba kernels (a first start after installation compiles them: 10-40 s)",
                file=sys.stderr,
                flush=True,
            )
            bound = server.start()
            c = config.store
            echo(f"listening on {lim.host}:{bound}")
            announce(server.pravega, echo)
            assert server.kernels is not None
            echo(server.kernels.describe())
            if store.read_only is not None:
                echo(f"READ-ONLY: {store.read_only}; reads are served, writes refused")
            echo(
                f"settings: max_watermark_lag_ms={c.max_watermark_lag_ms} polling_period_ms="
                f"{c.polling_period_ms} transaction_lease_ms={c.transaction_lease_ms} "
                f"max_connections={lim.max_connections} sync={c.sync}"
            )
            while not stop.wait(0.5):
                pass
        finally:
            server.stop()
            for s, h in old.items():
                signal.signal(s, h)
    finally:
        store.close()  # syncs the log
    echo("stopped")
