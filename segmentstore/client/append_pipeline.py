"""The append pipeline of ``RemoteClient``: many appends in flight, acknowledged in order.

Callers queue ``Chunk``s (one ``append_async`` call, or a slice of ``append_many``).
One sender thread coalesces consecutive chunks of a segment into ``append`` frames
(up to ``max_batch_events`` / ``max_batch_bytes``) and keeps up to ``window`` frames
in flight on one connection; the connection's reader thread delivers each frame's
per-item results. When the connection breaks, the sender reconnects and resends the
unacknowledged frames in order, keeping only chunks with a writer id and event number
(the store drops what it has already stored) and failing the others with
``ConnectionLostError`` (their outcome is unknown).

Deadlines (``timeout_s``), each measured once, never restarted by a retry:

- a frame not acknowledged ``timeout_s`` after it was first sent, and
- a server that acknowledged no append for ``timeout_s`` while appends were pending
  (unreachable, refusing connections, accepting them and never answering; counted from
  the last acknowledgement, the moment an append was queued while none was pending, or
  the last such failure),

fail everything pending: what was sent with ``ReadTimeoutError`` (it may or may not be
stored), what was never sent with ``UnreachableError`` (a ``NotSentError``: not stored).
So an append's future is settled at most ``timeout_s`` after it was queued (plus the
sender's tick) when the server is gone.

``close`` is final: it waits (up to its timeout) for the appends pending, then fails
the rest -- in flight: ``ConnectionLostError`` (outcome unknown), never sent:
``ClientClosedError`` (not stored) --, ends any handshake in progress, refuses new
connections and appends, and joins the sender and reader threads. Nothing is sent after
it returns.

Ownership: a chunk is in exactly one of the queue, a frame of ``_inflight``, or
delivered; whoever takes it out of the queue or ``_inflight`` under the lock delivers it.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from ..checks import checked
from ..clock import monotonic_s
from ..errors import (
    ClientClosedError,
    ConnectionLostError,
    NotSentError,
    ReadTimeoutError,
    SegmentStoreError,
    UnreachableError,
)
from ..net.commands import decode_append_items
from ..net.protocol import pack
from .connection import Connecting, Connection, ConnectionFactory, join_all

__all__ = ["AppendPipeline", "Chunk"]

_log = logging.getLogger(__name__)

_COALESCE_BYTES = 16 * 1024
"""Queued appends of fewer bytes (and few events) wait while two frames are in flight."""


class Chunk:
    """Appends queued together (one ``append_async`` call, or a slice of ``append_many``)."""

    __slots__ = ("callback", "datas", "done", "eos", "evs", "name", "nbytes", "retriable", "wids")

    def __init__(
        self,
        name: Any,
        datas: list[bytes],
        eos: list[Any] | None,
        wids: list[Any] | None,
        evs: list[Any] | None,
        retriable: bool,
        callback: Callable[[list[Any]], None],
    ) -> None:
        self.name = name
        self.datas = datas
        self.nbytes = sum(map(len, datas))
        self.eos = eos
        self.wids = wids
        self.evs = evs
        self.retriable = retriable
        self.callback = callback
        self.done = False

    def deliver(self, results: list[Any]) -> int:
        """Hand the results to the callback, once; returns 1 if this delivered them."""
        if self.done:
            return 0
        self.done = True
        try:
            self.callback(results)
        except Exception:  # a caller's callback must not break the pipeline
            _log.exception("append callback failed")
        return 1


class _Frame:
    """One ``append`` request: chunks of one segment, their packed args and payload (``build``)."""

    __slots__ = ("born", "chunks", "conn", "n", "packed", "payload", "sizes")

    def __init__(self, chunks: list[Chunk]) -> None:
        self.chunks = chunks
        self.conn: Connection | None = None  # the connection it was last sent on
        self.born = 0.0  # its first send (0: never sent)
        self.n = sum(len(ch.datas) for ch in chunks)
        self.packed = b""
        self.payload = b""
        self.sizes: list[int] = []

    @property
    def name(self) -> Any:
        return self.chunks[0].name

    def build(self) -> _Frame:
        """Pack the args and join the payload (outside the lock). O(bytes)."""
        chunks = self.chunks
        datas = chunks[0].datas if len(chunks) == 1 else [d for ch in chunks for d in ch.datas]
        self.sizes = list(map(len, datas))
        args: dict[str, Any] = {"name": chunks[0].name, "sizes": self.sizes}
        for key, attr in (("eo", "eos"), ("wid", "wids"), ("ev", "evs")):
            if any(getattr(ch, attr) is not None for ch in chunks):
                args[key] = [x for ch in chunks for x in (getattr(ch, attr) or [None] * len(ch.datas))]
        self.packed = pack(args)
        self.payload = b"".join(datas)
        return self


class AppendPipeline:
    """A sender thread coalescing queued appends into frames over one connection, in order."""

    def __init__(
        self,
        connect: ConnectionFactory,
        timeout_s: float,
        max_batch_events: int,
        max_batch_bytes: int,
        window: int,
        max_queued_events: int,
        address: str = "the segment store",
    ) -> None:
        self._connect = connect
        self.timeout_s = timeout_s
        self.max_batch_events = max_batch_events
        self.max_batch_bytes = max_batch_bytes
        self.window = window
        self.max_queued_events = max_queued_events
        self.address = address
        self._cv = threading.Condition(threading.Lock())
        self._queue: deque[Chunk] = deque()
        self._queued = 0  # events in the queue
        self._queued_bytes = 0  # their bytes
        self._outstanding = 0  # chunks submitted and not delivered
        self._inflight: deque[_Frame] = deque()  # framed, in order: sent, or being sent
        self._conn: Connection | None = None
        self._dropped: list[Connection] = []  # closed; reader threads joined at close
        self._broken = False  # reconnect and resend before anything else
        self._closing = False
        self._progress = 0.0  # the last acknowledgement, or when appends became pending
        self._why = ""  # the last failure to connect (for the errors)
        self._delay = 0.02  # the next pause between connection attempts
        self._thread: threading.Thread | None = None
        self._connecting = Connecting()
        self._tick = min(0.5, timeout_s / 4)

    # ------------------------------------------------------------------ callers
    def submit(self, chunk: Chunk) -> None:
        """Queue ``chunk``; waits (up to the timeout) while ``max_queued_events`` are queued."""
        with self._cv:
            if self._queued >= self.max_queued_events and not self._closing:
                deadline = monotonic_s() + self.timeout_s
                while self._queued >= self.max_queued_events and not self._closing:
                    if not self._cv.wait(max(0.0, deadline - monotonic_s())):
                        raise UnreachableError(
                            f"append to {chunk.name!r}: the append queue stayed full for timeout_s="
                            f"{self.timeout_s:g} s ({self.address} took no more appends); it was not "
                            "sent, so it is not stored"
                        )
            if self._closing:
                raise ClientClosedError(f"append to {chunk.name!r}: the remote client is closed; not sent")
            if not self._outstanding:
                self._progress = monotonic_s()  # the server's time to answer starts now
            self._queue.append(chunk)
            self._queued += len(chunk.datas)
            self._queued_bytes += chunk.nbytes
            self._outstanding += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ingestwm-appends", daemon=True)
                self._thread.start()
            elif len(self._queue) == 1:
                self._cv.notify_all()

    def flush(self, timeout_s: float) -> bool:
        """Wait until every submitted append is settled; ``False`` after ``timeout_s``."""
        deadline = monotonic_s() + timeout_s
        with self._cv:
            while self._outstanding:
                left = deadline - monotonic_s()
                if left <= 0:
                    return False
                self._cv.wait(min(left, self._tick))
        return True

    def close(self, timeout_s: float) -> None:
        """Flush (up to ``timeout_s``), then fail what is left and stop for good. Idempotent."""
        deadline = monotonic_s() + timeout_s
        self.flush(timeout_s)
        with self._cv:
            if self._closing:
                return
            self._closing = True
            frames, self._inflight = list(self._inflight), deque()
            chunks, self._queue = list(self._queue), deque()
            self._queued = self._queued_bytes = 0
            conn, self._conn = self._conn, None
            conns, self._dropped = self._dropped, []
            thread = self._thread
            self._cv.notify_all()
        self._connecting.cancel()  # a handshake in progress ends; no new connection
        if conn is not None:
            conns.append(conn)
            conn.close()  # a send in progress fails; nothing is sent after this
        self._fail(
            frames,
            chunks,
            lambda name: ConnectionLostError(
                f"append to {name!r}: the remote client was closed while the append was in flight; "
                "it may or may not be stored"
            ),
            lambda name: ClientClosedError(
                f"append to {name!r}: the remote client was closed before the append was sent; "
                "it is not stored"
            ),
        )
        end = max(deadline, monotonic_s() + 0.5)  # the threads end at once: nothing blocks them now
        if thread is not None and thread is not threading.current_thread():
            thread.join(max(0.0, end - monotonic_s()))
        join_all(conns, end)

    # ------------------------------------------------------------------ delivering
    def _deliver(self, pairs: list[tuple[Chunk, list[Any]]]) -> None:
        """Deliver results to chunks, then count them as done (one lock round for all)."""
        n = sum([ch.deliver(results) for ch, results in pairs])
        if n:
            with self._cv:
                self._outstanding -= n
                if self._outstanding == 0:
                    self._cv.notify_all()

    def _fail(
        self,
        frames: list[_Frame],
        chunks: list[Chunk],
        sent_error: Callable[[Any], BaseException],
        unsent_error: Callable[[Any], BaseException],
    ) -> None:
        """Fail frames taken out of ``_inflight`` and chunks taken out of the queue: those sent with
        ``sent_error(segment)`` (outcome unknown), the others with ``unsent_error(segment)``."""
        errors: dict[tuple[bool, Any], BaseException] = {}
        pairs = []
        for sent, chs in [(f.born > 0, f.chunks) for f in frames] + [(False, chunks)]:
            for ch in chs:
                key = (sent, ch.name)
                if key not in errors:
                    errors[key] = (sent_error if sent else unsent_error)(ch.name)
                pairs.append((ch, [errors[key]] * len(ch.datas)))
        self._deliver(pairs)

    # ------------------------------------------------------------------ sender thread
    def _run(self) -> None:
        while True:
            why = None
            frame = None
            with self._cv:
                while True:
                    if self._closing:
                        return
                    why = self._expired(monotonic_s())
                    if why is not None or self._broken:
                        break
                    if self._queue and len(self._inflight) < self.window and not self._should_coalesce():
                        frame = self._take_frame()
                        break
                    self._cv.wait(self._tick)
            try:
                if why is not None:
                    self._expire(why)
                elif frame is None:
                    self._recover()
                elif not self._send(frame.build()):
                    with self._cv:
                        self._broken = True  # (re)connect, then resend it with the others
            except Exception as e:  # a bug: fail what is pending rather than hang
                _log.exception("append pipeline failed")
                self._expire(f"the append pipeline failed: {e!r}")

    def _expired(self, now: float) -> str | None:
        """(under the lock) Why everything pending fails now, if a deadline passed."""
        if not self._outstanding:
            return None
        t = self.timeout_s
        first = self._inflight[0] if self._inflight else None
        if first is not None and first.born and now - first.born > t:
            return f"not acknowledged within timeout_s={t:g} s of its first send to {self.address}"
        if now - self._progress > t:
            why = f" (last: {self._why})" if self._why else ""
            return f"{self.address} acknowledged no append for timeout_s={t:g} s{why}"
        return None

    def _deadline(self) -> float:
        """(under the lock) When ``_expired`` will say so, at the latest."""
        d = self._progress + self.timeout_s
        if self._inflight and self._inflight[0].born:
            d = min(d, self._inflight[0].born + self.timeout_s)
        return d

    def _should_coalesce(self) -> bool:
        """(under the lock) Hold a small batch back while two frames are in flight (Nagle-like).

        Small in events and in bytes: a writer's block is one append of many events (one per
        segment in flight), which held back behind two others waited a round trip more for
        nothing -- with four segments, half of them waited (issue #35).
        """
        return (
            len(self._inflight) >= 2
            and self._queued < self.max_batch_events // 4
            and self._queued_bytes < _COALESCE_BYTES
        )

    def _take_frame(self) -> _Frame:
        """(under the lock) The next frame: consecutive queued chunks of one segment, up to the limits."""
        q = self._queue
        first = q.popleft()
        chunks = [first]
        n, size = len(first.datas), first.nbytes
        while q:
            ch = q[0]
            k = len(ch.datas)
            if (
                ch.name != first.name
                or n + k > self.max_batch_events
                or size + ch.nbytes > self.max_batch_bytes
            ):
                break
            chunks.append(q.popleft())
            n += k
            size += ch.nbytes
        self._queued -= n
        self._queued_bytes -= size
        frame = _Frame(chunks)
        self._inflight.append(frame)
        self._cv.notify_all()  # room in the queue
        return frame

    def _send(self, frame: _Frame) -> bool:
        """Send ``frame`` (in ``_inflight``) on the current connection; ``False`` if there is none."""
        now = monotonic_s()
        with self._cv:
            conn = self._conn
            if self._closing or conn is None or self._broken:
                return False
            idle = conn.pending == 0 and conn.idle_s() > conn.idle_timeout_s / 2
            if idle and (not self._inflight or frame is self._inflight[0]):
                return False  # the server is about to close it (nothing pending on it): a new one
            first = not frame.born
            frame.conn = conn
            frame.born = frame.born or now

        def on_reply(ok: bool, result: Any, payload: memoryview) -> None:
            self._on_reply(frame, conn, ok, result)

        try:
            conn.request("append", frame.packed, frame.payload, on_reply, now + self.timeout_s)
        except (ConnectionLostError, ReadTimeoutError) as e:
            with self._cv:
                if first and isinstance(e, NotSentError):
                    frame.born = 0.0
                if conn is self._conn:
                    self._broken = True
            return False
        return True

    def _on_reply(self, frame: _Frame, conn: Connection, ok: bool, result: Any) -> None:
        if not ok and isinstance(result, ConnectionLostError):
            with self._cv:
                if conn is self._conn:
                    self._broken = True
                    self._cv.notify_all()
            return
        with self._cv:
            if frame.conn is not conn or frame not in self._inflight:
                return  # failed or answered already
            self._inflight.remove(frame)
            self._progress = monotonic_s()
            self._cv.notify_all()
        items = decode_append_items(result, frame.sizes) if ok else None
        pairs = []
        pos = 0
        for ch in frame.chunks:
            k = len(ch.datas)
            pairs.append((ch, items[pos : pos + k] if items is not None else [result] * k))
            pos += k
        self._deliver(pairs)

    def _drop_conn(self) -> None:
        """(sender thread) Close the current connection; its late replies are ignored."""
        with self._cv:
            old, self._conn = self._conn, None
            if old is not None:
                self._dropped = [c for c in self._dropped if not c.join(0)]
                self._dropped.append(old)
        if old is not None:
            old.close()

    def _expire(self, why: str) -> None:
        """(sender thread) A deadline passed: fail everything pending, sent or not."""
        with self._cv:
            frames, self._inflight = list(self._inflight), deque()
            chunks, self._queue = list(self._queue), deque()
            self._queued = self._queued_bytes = 0
            self._broken = False
            self._why = ""
            # appends queued from now on get their own timeout_s (else, queued without a pause,
            # each would fail at once and the pipeline would never try the server again)
            self._progress = monotonic_s()
            self._cv.notify_all()
        self._drop_conn()
        self._fail(
            frames,
            chunks,
            lambda name: ReadTimeoutError(f"append to {name!r}: {why}; it may or may not be stored"),
            lambda name: UnreachableError(f"append to {name!r}: {why}; it was not sent, so it is not stored"),
        )

    def _recover(self) -> None:
        """(sender thread) Reconnect and resend every unacknowledged frame in order.

        One attempt per call; the sender loop calls again (checking the deadlines and
        ``close`` first) until the frames are resent or a deadline fails them.
        """
        self._drop_conn()
        lost: list[Chunk] = []
        with self._cv:
            if self._closing:
                return
            self._broken = False
            keep: deque[_Frame] = deque()
            for f in self._inflight:
                if not f.born or all(ch.retriable for ch in f.chunks):
                    keep.append(f)
                    continue
                lost += [ch for ch in f.chunks if not ch.retriable]
                rest = [ch for ch in f.chunks if ch.retriable]
                if rest:
                    nf = _Frame(rest).build()
                    nf.born = f.born
                    keep.append(nf)
            self._inflight = keep
            deadline = self._deadline()
        if lost:
            self._fail(
                [],
                lost,
                ConnectionLostError,
                lambda name: ConnectionLostError(
                    f"append to {name!r}: the connection to {self.address} broke while the append "
                    "was in flight; it may or may not be stored (only appends with a writer id and "
                    "event number are resent)"
                ),
            )
        if not keep:
            return  # connected when the next frame goes
        try:
            conn = self._connecting.open(self._connect, deadline, "append")
        except ClientClosedError:
            return
        except NotSentError as e:
            with self._cv:
                self._why = str(e)
                self._broken = True
                self._cv.wait(max(0.0, min(self._delay, deadline - monotonic_s())))
                self._delay = min(2 * self._delay, 0.5)
            return
        except SegmentStoreError as e:  # refused: bad token, bad version; a definite answer
            refused: BaseException = e
            with self._cv:
                frames, self._inflight = list(self._inflight), deque()
                chunks, self._queue = list(self._queue), deque()
                self._queued = self._queued_bytes = 0
            self._fail(frames, chunks, lambda name: refused, lambda name: refused)
            return
        with self._cv:
            if self._closing:
                self._dropped.append(conn)
                conn.close()
                return
            self._conn = conn
            self._delay = 0.02
            frames = list(self._inflight)
        for f in frames:
            if not self._send(f):
                with self._cv:
                    self._broken = True
                return

    @checked
    def _check(self) -> None:
        """Assert the accounting: queued events, chunks outstanding, frames in order of their sends."""
        with self._cv:
            assert self._queued == sum(len(ch.datas) for ch in self._queue), self._queued
            assert self._queued_bytes == sum(ch.nbytes for ch in self._queue), self._queued_bytes
            chunks = len(self._queue) + sum(len(f.chunks) for f in self._inflight)
            assert chunks <= self._outstanding, (chunks, self._outstanding)
            assert not any(ch.done for ch in self._queue)
            assert len(self._inflight) <= self.window + 1
            if self._closing:
                assert not self._queue and not self._inflight and self._conn is None
