"""The segment-store endpoint: Pravega's wire protocol over asyncio, on a thread of its own.

Each connection reads frames (``wire``), decodes them and runs their handler
(``wire_handlers``) in arrival order on the event loop, as ingestwm's own server does
with store calls (they are fast); a read waiting at the tail answers later without
holding up the connection. Replies carry request ids, so they may overtake each other.

Hardened like ingestwm's own server (``segmentstore.net.server``): the first command
must be a ``Hello`` of at most ``HELLO_BYTES``; until a delegation token is accepted
(or, without a server token, until the ``Hello``) a command may be at most
``UNAUTHENTICATED_BYTES``, after it Pravega's ``MAX_WIRECOMMAND_SIZE``; a connection
without a ``Hello`` within ``handshake_timeout_s``, with a frame arriving for longer
than ``frame_timeout_s`` or idle for ``idle_timeout_s`` is closed; at most
``max_connections`` are held; the bytes buffered over every connection are bounded by
``max_buffered_bytes`` (a connection mid-frame waits while the budget is spent). A
malformed, oversized or out-of-place command closes its connection with a warning
naming it; the others and the store are not affected. ``stop()`` closes every
connection, including any accepted while it stops.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..checks import checked
from ..clock import monotonic_s
from ..errors import InvalidArgumentError
from ..future_read import FutureRead
from ..store import SegmentStore
from . import wire_conditional as _conditional  # noqa: F401 (registers its handlers)
from . import wire_requests as req
from .auth import DelegationTokens
from .errors import WireFormatError
from .translate import PravegaStreams
from .wire import HEADER, MAX_WIRECOMMAND_SIZE, decode_request, encode
from .wire_handlers import HANDLERS, WriterState
from .wire_tables import TABLE_HANDLERS  # noqa: F401 (registers the table commands' handlers)

__all__ = ["WireLimits", "WireEndpoint", "HELLO_BYTES", "UNAUTHENTICATED_BYTES"]

_log = logging.getLogger(__name__)

HELLO_BYTES = 64
"""Largest payload before the ``Hello`` (it has 8 bytes)."""
_HELLO: int = req.Hello.TYPE_CODE  # type: ignore[attr-defined]
UNAUTHENTICATED_BYTES = 64 * 1024
"""Largest payload before a delegation token is accepted (set-ups, reads and info requests fit)."""


@dataclass(frozen=True, slots=True)
class WireLimits:
    """The segment-store endpoint's limits (``SegmentStoreServer`` passes its own)."""

    max_connections: int = 1024
    handshake_timeout_s: float = 5.0
    idle_timeout_s: float = 600.0
    frame_timeout_s: float = 60.0
    max_buffered_bytes: int = 64 * 1024 * 1024
    tail_wait_s: float = 5.0

    def __post_init__(self) -> None:
        for name in ("max_connections", "max_buffered_bytes"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidArgumentError(f"pravega wire endpoint: {name} must be an int >= 1, got {v!r}")
        if self.max_buffered_bytes < MAX_WIRECOMMAND_SIZE + HEADER.size:
            raise InvalidArgumentError(
                f"pravega wire endpoint: max_buffered_bytes must hold one whole command "
                f"({MAX_WIRECOMMAND_SIZE + HEADER.size} bytes), got {self.max_buffered_bytes}"
            )
        for name in ("handshake_timeout_s", "idle_timeout_s", "frame_timeout_s", "tail_wait_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise InvalidArgumentError(f"pravega wire endpoint: {name} must be a number > 0, got {v!r}")


class WireEndpoint:
    """Serves Pravega's wire protocol for ``store`` on ``host:port`` (0: a free one) from a thread.

    ``tokens`` (a server token's ``DelegationTokens``) makes every command that carries a
    delegation token check it. ``stop()`` closes the endpoint, not the store.
    """

    def __init__(
        self,
        store: SegmentStore,
        host: str,
        port: int,
        tokens: DelegationTokens | None = None,
        limits: WireLimits | None = None,
    ) -> None:
        self.store = store
        self.streams = PravegaStreams(store)
        self.host = host
        self.tokens = tokens
        self.limits = limits if limits is not None else WireLimits()
        self._port = port
        self.refused = 0  # connections refused over max_connections
        self.closed_bad = 0  # connections closed for a malformed or out-of-place command
        self._connections: set[_Connection] = set()
        self._held = 0
        self._starved: collections.deque[_Connection] = collections.deque()
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def port(self) -> int:
        return self._port

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    def start(self) -> int:
        """Bind and serve on a background thread; returns the port (bind errors raise here)."""
        if self._thread is not None:
            raise InvalidArgumentError("the Pravega wire endpoint is started already")
        self._thread = threading.Thread(target=self._run, name="ingestwm-pravega-wire", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error
        return self._port

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            self._server = loop.run_until_complete(
                loop.create_server(lambda: _Connection(self), self.host, self._port, reuse_address=True)
            )
            self._port = self._server.sockets[0].getsockname()[1]
        except BaseException as e:
            self._error = e
            self._ready.set()
            loop.close()
            return
        loop.call_later(self._tick_s, self._check_timeouts)
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            self._stopping = True
            for _ in range(2):  # then once more for the accepts the loop took while stopping
                for c in list(self._connections):
                    c.abort()
                loop.run_until_complete(asyncio.sleep(0))
            loop.close()

    @property
    def _tick_s(self) -> float:
        lim = self.limits
        return min(1.0, lim.handshake_timeout_s / 4, lim.frame_timeout_s / 4, lim.idle_timeout_s / 4)

    def _check_timeouts(self) -> None:
        now, lim = monotonic_s(), self.limits
        for c in list(self._connections):
            if not c.hello and now - c.opened > lim.handshake_timeout_s:
                c.close(f"no Hello within {lim.handshake_timeout_s:g} s")
            elif c.partial_since is not None and not c.paused and now - c.partial_since > lim.frame_timeout_s:
                c.close(f"a command took more than {lim.frame_timeout_s:g} s to arrive")
            elif not c.waiting and now - c.last_activity > lim.idle_timeout_s:
                c.close(f"idle for more than {lim.idle_timeout_s:g} s", quiet=True)
        assert self._loop is not None
        self._loop.call_later(self._tick_s, self._check_timeouts)

    def _account(self, c: _Connection) -> None:
        """Track ``c``'s buffered bytes; past ``max_buffered_bytes`` a connection mid-frame waits for room."""
        size = 0 if c.closed else len(c.buf)
        delta, c.held = size - c.held, size
        self._held += delta
        if self._held > self.limits.max_buffered_bytes and size and not c.starved and not c.closed:
            c.starved = True
            c.pause()
            self._starved.append(c)
        elif delta < 0:
            while self._starved and self._held <= self.limits.max_buffered_bytes:
                w = self._starved.popleft()
                w.starved = False
                w.resume()

    @checked
    def _check(self) -> None:
        """Assert the endpoint's accounting (on its loop; for tests): buffered bytes, connections, waits."""
        loop = self._loop
        if loop is None or loop.is_closed():
            assert not self._connections, "connections outlive the endpoint"
            return

        def check() -> None:
            assert self._held == sum(c.held for c in self._connections), "buffered bytes miscounted"
            assert len(self._connections) <= self.limits.max_connections
            for c in self._connections:
                assert not c.closed, f"{c.peer}: closed yet held"
                assert c.held == len(c.buf), f"{c.peer}: held {c.held} of {len(c.buf)} buffered bytes"
                assert c.hello or not c.writers, f"{c.peer}: writers before the Hello"
                assert all(not f.done() or f in c.waiting for f in c.waiting)
            assert all(c.starved for c in self._starved)

        asyncio.run_coroutine_threadsafe(_call(check), loop).result(10)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop serving and close every connection (the store stays open). Idempotent."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return

        def shutdown() -> None:
            self._stopping = True
            if self._server is not None:
                self._server.close()
            loop.stop()

        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(shutdown)
        thread.join(timeout_s)


class _Connection(asyncio.Protocol):
    """One client connection of the wire endpoint (``wire_handlers.Connection``)."""

    def __init__(self, endpoint: WireEndpoint) -> None:
        self.endpoint = endpoint
        self.store = endpoint.store
        self.streams = endpoint.streams
        self.tokens = endpoint.tokens
        self.tail_wait_s = endpoint.limits.tail_wait_s
        self.writers: dict[int, WriterState] = {}
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.buf = bytearray()
        self.held = 0
        self.hello = False
        self.limit = HELLO_BYTES
        self.closed = self.paused = self.starved = False
        self.opened = self.last_activity = monotonic_s()
        self.partial_since: float | None = None
        self.waiting: dict[FutureRead, asyncio.TimerHandle] = {}

    # ------------------------------------------------------------------ transport callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=4 * 1024 * 1024)  # a read's reply is up to 2 MiB
        self.peer = str(transport.get_extra_info("peername"))
        ep = self.endpoint
        if ep._stopping:
            self.abort()
            return
        if len(ep._connections) >= ep.limits.max_connections:
            ep.refused += 1
            self.close(f"the endpoint holds max_connections={ep.limits.max_connections} already", quiet=True)
            return
        ep._connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.endpoint._connections.discard(self)
        self.endpoint._account(self)
        self._drop_waiting()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.buf += data
        self.last_activity = monotonic_s()
        self._process()
        self.endpoint._account(self)

    def pause_writing(self) -> None:
        self.paused = True
        self.pause()

    def resume_writing(self) -> None:
        self.paused = False
        self.resume()
        self._process()
        self.endpoint._account(self)

    def pause(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.transport is not None and not self.closed and not self.paused and not self.starved:
            self.transport.resume_reading()
            if self.partial_since is not None:
                self.partial_since = monotonic_s()  # the wait was the server's, not the peer's

    # ------------------------------------------------------------------ frames
    def _process(self) -> None:
        buf, pos = self.buf, 0
        try:
            while not self.closed and not self.paused and len(buf) - pos >= HEADER.size:
                code, n = HEADER.unpack_from(buf, pos)
                if not 0 <= n <= self.limit:
                    raise WireFormatError(
                        f"a command of type {code} declares {n} payload bytes; at most {self.limit} "
                        + ("are taken before the Hello" if not self.hello else "are taken here now")
                    )
                if not self.hello and code != _HELLO:
                    raise WireFormatError(
                        f"the first command must be a Hello (type {_HELLO}), got type {code}"
                    )
                end = pos + HEADER.size + n
                if len(buf) < end:
                    break
                with memoryview(buf) as view, view[pos + HEADER.size : end] as payload:
                    cmd = decode_request(code, payload)
                pos = end
                self._dispatch(cmd)
        except WireFormatError as e:
            self.endpoint.closed_bad += 1
            self.close(str(e))
        except Exception as e:  # a bug must close this connection, never the endpoint
            _log.exception("pravega wire endpoint: a command from %s failed", self.peer)
            self.close(f"internal error: {e!r}")
        if pos:
            del buf[:pos]
        self.partial_since = (self.partial_since or monotonic_s()) if buf and not self.closed else None

    def _dispatch(self, cmd: Any) -> None:
        if not self.hello:
            self.hello = True
            self.limit = UNAUTHENTICATED_BYTES if self.tokens is not None else MAX_WIRECOMMAND_SIZE
        HANDLERS[type(cmd)](self, cmd)

    # ------------------------------------------------------------------ wire_handlers.Connection
    def send(self, reply: Any) -> None:
        if self.closed or self.transport is None:
            return
        try:
            frame = encode(reply)
        except WireFormatError as e:
            self.close(f"a reply cannot be encoded: {e}")
            return
        self.transport.write(frame)

    def close(self, why: str, quiet: bool = False) -> None:
        if self.closed:
            return
        (_log.info if quiet else _log.warning)("pravega wire endpoint: closing %s: %s", self.peer, why)
        self.closed = True
        self._drop_waiting()
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        self.closed = True
        self._drop_waiting()
        if self.transport is not None:
            self.transport.abort()

    def authenticated(self) -> None:
        self.limit = MAX_WIRECOMMAND_SIZE

    def wait(self, fut: FutureRead, seconds: float, done: Callable[[FutureRead], None]) -> None:
        loop = self.endpoint._loop
        assert loop is not None
        timer = loop.call_later(seconds, _expire, fut)
        self.waiting[fut] = timer

        def completed(f: Any) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the endpoint stopped
                loop.call_soon_threadsafe(self._read_done, f, done)

        fut.add_done_callback(completed)

    def _read_done(self, fut: FutureRead, done: Callable[[FutureRead], None]) -> None:
        timer = self.waiting.pop(fut, None)
        if timer is None or self.closed:
            return
        timer.cancel()
        self.last_activity = monotonic_s()
        done(fut)

    def _drop_waiting(self) -> None:
        waiting, self.waiting = self.waiting, {}
        for fut, timer in waiting.items():
            timer.cancel()
            _expire(fut)


async def _call(fn: Callable[[], None]) -> None:
    fn()


def _expire(fut: FutureRead) -> None:
    if not fut.done():
        fut.wait(0)
