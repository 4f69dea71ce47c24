"""The append pipeline of ``RemoteClient``: many appends in flight, acknowledged in order.

Callers queue ``Chunk``s (one ``append_async`` call, or a slice of ``append_many``).
One sender thread coalesces consecutive chunks of a segment into ``append`` frames
(up to ``max_batch_events`` / ``max_batch_bytes``) and keeps up to ``window`` frames
in flight on one connection; the connection's reader thread delivers each frame's
per-item results. When the connection breaks, the sender reconnects and resends the
unacknowledged frames in order, keeping only chunks with a writer id and event number
(the store drops what it has already stored) and failing the others with
``ConnectionLostError``. A frame unanswered for ``timeout_s`` fails everything
pending with ``ReadTimeoutError``; so does a server unreachable for ``timeout_s``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ..clock import monotonic_s
from ..errors import (
    ConnectionLostError,
    NotSentError,
    ReadTimeoutError,
    SegmentStoreError,
    StoreClosedError,
)
from ..net.commands import decode_append_items
from ..net.protocol import pack
from .connection import Connection

__all__ = ["AppendPipeline", "Chunk"]

_log = logging.getLogger(__name__)


class Chunk:
    """Appends queued together (one ``append_async`` call, or a slice of ``append_many``)."""

    __slots__ = ("callback", "datas", "done", "eos", "evs", "name", "retriable", "wids")

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
    """One ``append`` request: chunks of one segment, their packed args and payload."""

    __slots__ = ("born", "chunks", "conn", "n", "packed", "payload", "sent_at", "sizes")

    def __init__(self, chunks: list[Chunk]) -> None:
        self.chunks = chunks
        self.conn: Connection | None = None
        self.sent_at = 0.0  # last transmission
        self.born = 0.0  # first transmission
        datas = chunks[0].datas if len(chunks) == 1 else [d for ch in chunks for d in ch.datas]
        self.n = len(datas)
        self.sizes = list(map(len, datas))
        args: dict[str, Any] = {"name": chunks[0].name, "sizes": self.sizes}
        for key, attr in (("eo", "eos"), ("wid", "wids"), ("ev", "evs")):
            if any(getattr(ch, attr) is not None for ch in chunks):
                args[key] = [x for ch in chunks for x in (getattr(ch, attr) or [None] * len(ch.datas))]
        self.packed = pack(args)
        self.payload = b"".join(datas)


class AppendPipeline:
    """A sender thread coalescing queued appends into frames over one connection, in order."""

    def __init__(
        self,
        connect: Callable[[], Connection],
        timeout_s: float,
        max_batch_events: int,
        max_batch_bytes: int,
        window: int,
        max_queued_events: int,
    ) -> None:
        self._connect = connect
        self.timeout_s = timeout_s
        self.max_batch_events = max_batch_events
        self.max_batch_bytes = max_batch_bytes
        self.window = window
        self.max_queued_events = max_queued_events
        self._cv = threading.Condition(threading.Lock())
        self._queue: list[Chunk] = []
        self._queued = 0
        self._outstanding = 0  # chunks submitted and not delivered
        self._inflight: deque[_Frame] = deque()
        self._conn: Connection | None = None
        self._broken = False
        self._stuck = False
        self._closing = False
        self._thread: threading.Thread | None = None
        self._tick = min(0.5, timeout_s / 4)

    def submit(self, chunk: Chunk) -> None:
        """Queue ``chunk``; waits (up to the timeout) while ``max_queued_events`` are queued."""
        with self._cv:
            if self._queued >= self.max_queued_events:
                deadline = monotonic_s() + self.timeout_s
                while self._queued >= self.max_queued_events and not self._closing:
                    if not self._cv.wait(max(0.0, deadline - monotonic_s())):
                        raise ReadTimeoutError(f"append to {chunk.name!r}: the append queue stayed full")
            if self._closing:
                raise StoreClosedError(f"append to {chunk.name!r}: the remote client is closed")
            self._queue.append(chunk)
            self._queued += len(chunk.datas)
            self._outstanding += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ingestwm-appends", daemon=True)
                self._thread.start()
            elif len(self._queue) == 1:
                self._cv.notify_all()

    def _deliver(self, pairs: list[tuple[Chunk, list[Any]]]) -> None:
        """Deliver results to chunks, then count them as done (one lock round for all)."""
        n = sum([ch.deliver(results) for ch, results in pairs])
        if n:
            with self._cv:
                self._outstanding -= n
                if self._outstanding == 0:
                    self._cv.notify_all()

    def flush(self, timeout_s: float) -> bool:
        deadline = monotonic_s() + timeout_s
        with self._cv:
            while self._outstanding:
                left = deadline - monotonic_s()
                if left <= 0:
                    return False
                self._cv.wait(min(left, self._tick))
        return True

    def close(self, timeout_s: float) -> None:
        self.flush(timeout_s)
        with self._cv:
            self._closing = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._fail_all(StoreClosedError("the remote client was closed before the append was acknowledged"))

    # ------------------------------------------------------------------ sender thread
    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._broken and not self._stuck:
                    if self._queue and not self._should_coalesce():
                        break
                    if self._closing and not self._inflight and not self._queue:
                        return
                    self._cv.wait(self._tick)
                    self._check_stuck()
                chunks, self._queue = self._queue, []
                self._queued = 0
                self._cv.notify_all()
            try:
                self._pump(chunks)
            except Exception as e:  # a bug: fail what is pending rather than hang
                _log.exception("append pipeline failed")
                self._fail_all(ConnectionLostError(f"append pipeline failed: {e!r}"), chunks)

    def _should_coalesce(self) -> bool:
        """(under the lock) Hold a small batch back while two frames are in flight (Nagle-like)."""
        return len(self._inflight) >= 2 and self._queued < self.max_batch_events // 4 and not self._closing

    def _pump(self, chunks: list[Chunk]) -> None:
        if self._stuck:
            self._fail_all(ReadTimeoutError("append: no acknowledgement from the server in time"))
        elif self._broken:
            self._recover()
        frames = self._frames(chunks)
        for idx, frame in enumerate(frames):
            with self._cv:
                while len(self._inflight) >= self.window and not self._broken and not self._stuck:
                    self._cv.wait(self._tick)
                    self._check_stuck()
                if self._stuck:  # hand the rest back; the next round fails everything
                    self._queue[:0] = [ch for f in frames[idx:] for ch in f.chunks]
                    self._queued += sum(f.n for f in frames[idx:])
                    return
                self._inflight.append(frame)
                broken = self._broken
            conn = self._conn
            if conn is not None and conn.pending == 0 and conn.idle_s() > conn.idle_timeout_s / 2:
                self._drop_conn()
                conn = None
            if broken or conn is None or not conn.alive:
                self._recover()
                continue
            try:
                self._send(conn, frame)
            except ConnectionLostError:
                self._recover()

    def _frames(self, chunks: list[Chunk]) -> list[_Frame]:
        out: list[_Frame] = []
        cur: list[Chunk] = []
        n = size = 0
        for ch in chunks:
            k, b = len(ch.datas), sum(map(len, ch.datas))
            full = n + k > self.max_batch_events or size + b > self.max_batch_bytes
            if cur and (ch.name != cur[0].name or full):
                out.append(_Frame(cur))
                cur, n, size = [], 0, 0
            cur.append(ch)
            n += k
            size += b
        if cur:
            out.append(_Frame(cur))
        return out

    def _send(self, conn: Connection, frame: _Frame) -> None:
        frame.conn = conn
        frame.sent_at = monotonic_s()
        frame.born = frame.born or frame.sent_at

        def on_reply(ok: bool, result: Any, payload: memoryview) -> None:
            self._on_reply(frame, conn, ok, result)

        conn.request("append", frame.packed, frame.payload, on_reply)

    def _on_reply(self, frame: _Frame, conn: Connection, ok: bool, result: Any) -> None:
        if not ok and isinstance(result, ConnectionLostError):
            with self._cv:
                if conn is self._conn:
                    self._broken = True
                    self._cv.notify_all()
            return
        with self._cv:
            if frame.conn is not conn or frame not in self._inflight:
                return
            self._inflight.remove(frame)
            self._cv.notify_all()
        items = decode_append_items(result, frame.sizes) if ok else None
        pairs = []
        pos = 0
        for ch in frame.chunks:
            k = len(ch.datas)
            pairs.append((ch, items[pos : pos + k] if items is not None else [result] * k))
            pos += k
        self._deliver(pairs)

    def _check_stuck(self) -> None:
        """(under the lock) Flag the pipeline when the oldest frame waits longer than the timeout."""
        first = self._inflight[0] if self._inflight else None
        if first is not None and first.sent_at and monotonic_s() - first.sent_at > self.timeout_s:
            self._stuck = True

    def _drop_conn(self) -> None:
        old, self._conn = self._conn, None
        if old is not None:
            old.close()
            old.join(5.0)

    def _recover(self) -> None:
        """Reconnect and resend every unacknowledged frame in order; give up after the timeout."""
        delay = 0.02
        while True:
            self._drop_conn()
            with self._cv:
                self._broken = False
                frames = list(self._inflight)
            lost = ConnectionLostError(
                "the connection broke while the append was in flight; it may or may not be stored "
                "(only appends with a writer id and event number are resent)"
            )
            keep: list[_Frame] = []
            for f in frames:
                if f.conn is None or all(ch.retriable for ch in f.chunks):
                    keep.append(f)
                    continue
                self._deliver([(ch, [lost] * len(ch.datas)) for ch in f.chunks if not ch.retriable])
                rest = [ch for ch in f.chunks if ch.retriable]
                if rest:
                    keep.append(_Frame(rest))
                    keep[-1].born = f.born
            with self._cv:
                self._inflight = deque(keep)
                self._cv.notify_all()
            if not keep:
                return
            born = [f.born for f in keep if f.born]
            give_up = (min(born) if born else monotonic_s()) + self.timeout_s
            if monotonic_s() >= give_up:
                self._fail_all(ConnectionLostError(f"appends not acknowledged within {self.timeout_s:g} s"))
                return
            try:
                conn = self._connect()
            except NotSentError as e:
                if monotonic_s() + delay >= give_up:
                    self._fail_all(e)
                    return
                time.sleep(delay)
                delay = min(2 * delay, 0.5)
                continue
            except SegmentStoreError as e:  # refused: bad token, bad version
                self._fail_all(e)
                return
            self._conn = conn
            try:
                for f in keep:
                    self._send(conn, f)
            except ConnectionLostError:
                continue
            with self._cv:
                if not self._broken:
                    return

    def _fail_all(self, exc: BaseException, extra: list[Chunk] | None = None) -> None:
        self._drop_conn()
        with self._cv:
            frames, self._inflight = list(self._inflight), deque()
            chunks, self._queue = self._queue, []
            self._queued = 0
            self._broken = self._stuck = False
            self._cv.notify_all()
        every = [c for f in frames for c in f.chunks] + chunks + (extra or [])
        self._deliver([(ch, [exc] * len(ch.datas)) for ch in every])
