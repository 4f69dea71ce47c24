"""How an append settles, and the slow work it leaves: acknowledged, resent, cut, rerouted, failed.

The half of ``AppendEngine`` (``appender``) that takes over once a block is handed to the
client: the reply settles it (its futures complete, the segment's next block starts), or
keeps it for a resend after a transient error, cuts it to the store's size limit
(``AppendTooLargeError``), hands a sealed segment to the writer's ``on_sealed``, or fails
it and the blocks queued behind it. The slow part (resends, rerouting after a seal,
learning the writer's last event number in a new segment) is ``service``, run by the
caller's thread or by a worker thread started when needed that ends when idle. The rules
are in ``appender``'s module docstring.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from segmentstore import AppendResult, AppendTooLargeError, SegmentSealedError
from segmentstore.client import SegmentStoreClient
from segmentstore.clock import monotonic_s
from segmentstore.errors import NotSentError, ReadTimeoutError, UnreachableError, retriable

from ..config import WriterConfig
from ..errors import WriterError
from .write_future import Block, Callback, SegmentAppender, Settled, WriteFuture

__all__ = ["AppendSettling"]

WORKER_IDLE_S = 2.0
"""A worker or sender thread with nothing to do this long (seconds) ends."""
io_thread = threading.local()
"""``io_thread.io``: this thread settles appends (client I/O, sender); it must not wait for them."""


class AppendSettling:
    """``AppendEngine``'s settling and slow work (a mixin: its methods run on the engine).

    The engine's state and the block methods these use are declared here, defined there.
    """

    client: SegmentStoreClient
    writer_id: int
    config: WriterConfig
    on_sealed: Callable[[list[SegmentAppender]], list[Settled]] | None
    lock: threading.RLock
    appenders: dict[str, SegmentAppender]
    unacked: int
    sending: int
    paused: int
    work: bool
    error: BaseException | None
    _servicing: bool
    _worker: threading.Thread | None
    _closed: bool
    _max_bytes: int

    if TYPE_CHECKING:

        def _start(self, app: SegmentAppender) -> Block | None: ...
        def _notify(self) -> None: ...
        def _wait(self, timeout: float | None) -> None: ...
        def send(self, app: SegmentAppender, b: Block | None) -> None: ...
        def retire(self, old: Block) -> None: ...
        def run_callbacks(self, cbs: Iterable[Settled]) -> None: ...
        def add_callback(self, b: Block, i: int, fut: WriteFuture, fn: Callback) -> bool: ...
        def wait_futures(self, futs: list[WriteFuture], timeout: float | None) -> None: ...
        def expedite(self, b: Block) -> None: ...

    def _on_reply(self, app: SegmentAppender, b: Block, f: concurrent.futures.Future[AppendResult]) -> None:
        io, io_thread.io = getattr(io_thread, "io", False), True
        try:
            self.send(app, self._settle_future(app, b, f, True))
        finally:
            io_thread.io = io

    def _settle_future(
        self,
        app: SegmentAppender,
        b: Block,
        f: concurrent.futures.Future[AppendResult],
        foreign: bool,
    ) -> Block | None:
        exc = f.exception()
        return self._settle(app, b, None if exc is not None else f.result(), exc, foreign)

    def _settle(
        self,
        app: SegmentAppender,
        b: Block,
        result: AppendResult | None,
        exc: BaseException | None,
        foreign: bool,
    ) -> Block | None:
        """Settle the append of ``b``: acknowledge, keep for a resend or reroute, or fail; the next block."""
        nxt: Block | None = None
        cbs: list[Settled] = []
        with self.lock:
            self.sending -= 1
            if app.inflight is not b:  # dropped meanwhile (an abort): its futures are settled already
                self._notify()
                return None
            if exc is None:
                app.inflight = None
                app.acked = b.number or 0
                cbs = self._complete(b, result, None)
                if app.blocks and not self.paused:
                    nxt = self._start(app)
            elif isinstance(exc, SegmentSealedError) and self.on_sealed is not None:
                app.trouble = exc
                self.work = True
            elif (
                retriable(exc, idempotent=True)
                # the client's own deadline passed: it resent across reconnects meanwhile
                and not isinstance(exc, (ReadTimeoutError, UnreachableError))
                and b.attempts < self.config.retry_attempts
            ):
                b.attempts += 1
                app.trouble = exc
                self.work = True
            elif isinstance(exc, AppendTooLargeError) and len(b.frames) > 1 and 0 < exc.limit < b.nbytes:
                app.inflight = None  # not stored: its events go again in appends the store takes
                self._learn_limit(exc.limit, app, b)
                if not self.paused:
                    nxt = self._start(app)
            elif not retriable(exc, idempotent=True) and not (b.attempts and isinstance(exc, NotSentError)):
                # a definite answer: this block is not stored (a resend not sent, as after the
                # client's close, leaves the earlier sends' outcome unknown: below)
                app.inflight = None
                cbs = self._complete(b, None, exc)
                if self.error is None:
                    self.error = exc
                if app.blocks and not self.paused:
                    nxt = self._start(app)  # the next block is judged on its own
            else:
                err = self._error(b, exc)
                cbs = self.fail_appender(app, err, self._unsent(app, err))
            self._notify()
            if self.work and foreign:
                self._wake()
        if cbs:
            self.run_callbacks(cbs)
        return nxt

    def _learn_limit(self, limit: int, app: SegmentAppender, refused: Block) -> None:
        """(lock held) The store takes appends of at most ``limit`` bytes: blocks are cut to it from now on.

        ``refused`` (unsent now) goes first in ``app``'s queue again, cut; every queued block
        over the limit is cut too. An event larger than ``limit`` is a block of its own (refused
        alone). The futures follow their events. O(queued events).
        """
        self._max_bytes = min(self._max_bytes, limit)
        app.blocks.appendleft(refused)
        for a in self.appenders.values():
            if any(q.nbytes > self._max_bytes and len(q.frames) > 1 for q in a.blocks):
                a.blocks = deque(p for q in a.blocks for p in self._cut(q))

    def _cut(self, b: Block) -> list[Block]:
        """(lock held) ``b`` (unsent) as blocks of at most ``_max_bytes`` each; ``[b]`` if it fits."""
        if b.nbytes <= self._max_bytes or len(b.frames) == 1:
            return [b]
        parts: list[Block] = []
        moving: list[tuple[Block, int] | None] = []
        for frame in b.frames:
            cur = parts[-1] if parts else None
            if cur is None or cur.nbytes + len(frame) > self._max_bytes:
                cur = Block(self, b.segment, b.first_ms)
                cur.closed = True
                parts.append(cur)
            moving.append((cur, len(cur.frames)))
            cur.frames.append(frame)
            cur.nbytes += len(frame)
            self.unacked += len(frame)
        parts[-1].closed = b.closed
        b.moving, b.moved_to = moving, parts
        b.number = None
        self.retire(b)
        return parts

    def _error(self, b: Block, exc: BaseException) -> BaseException:
        """The error of a block that failed for good: ``exc`` if never sent (not stored), else one
        saying its events may or may not be stored."""
        if isinstance(exc, NotSentError) and not b.attempts:
            return exc
        if retriable(exc, idempotent=True) or b.attempts:
            err = WriterError(
                f"segment {b.segment!r}: append of {len(b.frames)} events (event number {b.number}) "
                f"failed {b.attempts + 1} times; they may or may not be stored: {exc}"
            )
            err.__cause__ = exc
            return err
        return exc

    def _unsent(self, app: SegmentAppender, err: BaseException) -> BaseException | None:
        """(lock held) The error of the blocks queued behind ``app``'s failed one: never sent, not stored."""
        events = sum(len(q.frames) for q in app.blocks)
        if not events:
            return None
        unsent = WriterError(
            f"segment {app.segment!r}: {events} events queued behind a failed append were not sent; "
            f"they are not stored ({err})"
        )
        unsent.__cause__ = err
        return unsent

    def _complete(self, b: Block, result: AppendResult | None, error: BaseException | None) -> list[Settled]:
        """(lock held) Settle ``b``; returns its callbacks to run outside the lock."""
        b.done = True
        b.result = result
        b.error = error
        b.data = None
        self.unacked -= b.nbytes
        cbs, b.callbacks = b.callbacks or [], None
        return cbs

    def fail_appender(
        self, app: SegmentAppender, exc: BaseException, queued: BaseException | None = None
    ) -> list[Settled]:
        """(lock held) Fail the block in flight and every queued block of ``app``; returns the callbacks.

        ``queued``: the queued blocks' error where it differs (they were never sent).
        """
        cbs: list[Settled] = []
        for b in app.all_blocks():
            cbs += self._complete(b, None, exc if queued is None or b is app.inflight else queued)
        app.inflight = None
        app.trouble = None
        app.blocks.clear()
        if self.error is None:
            self.error = exc
        self._notify()
        return cbs

    def settle_stored(self, app: SegmentAppender) -> list[Settled]:
        """(lock held) The block in flight turned out stored (asked after a seal): acknowledge it."""
        b = app.inflight
        assert b is not None
        app.inflight = None
        app.trouble = None
        app.acked = b.number or 0
        return self._complete(b, None, None)

    # ------------------------------------------------------------------ slow work
    def kick(self, extra: Iterable[tuple[SegmentAppender, Block]] = ()) -> None:
        """Send every block that may go now. No lock held. O(segments)."""
        with self.lock:
            sends = list(extra)
            for app in list(self.appenders.values()):
                b = self._start(app)
                if b is not None:
                    sends.append((app, b))
        for app, b in sends:
            self.send(app, b)

    def service(self) -> None:
        """Resend blocks after transient errors and hand seals to ``on_sealed``; one thread at a time.

        On a thread that settles appends (a callback) it only wakes the writer's thread.
        """
        with self.lock:
            if getattr(io_thread, "io", False):  # it may wait for acknowledgements this thread delivers
                self.work = True
                self._wake()
                return
            if self._servicing:
                return
            self._servicing = True
        try:
            while True:
                resend: list[tuple[SegmentAppender, Block]] = []
                cbs: list[Settled] = []
                with self.lock:
                    if not self.work:
                        break
                    self.work = False
                    if self.on_sealed is not None and any(
                        isinstance(a.trouble, SegmentSealedError) for a in self.appenders.values()
                    ):
                        cbs += self._reroute(self.on_sealed)
                    for app in self.appenders.values():
                        if app.trouble is not None and app.inflight is not None:
                            app.trouble = None
                            self.sending += 1
                            resend.append((app, app.inflight))
                    unknown = [a for a in self.appenders.values() if a.assigned is None and a.blocks]
                for app in unknown:
                    cbs += self._learn_number(app)
                self.run_callbacks(cbs)
                self.kick(resend)
        finally:
            with self.lock:
                self._servicing = False
                if self.work:
                    self._wake()

    def _learn_number(self, app: SegmentAppender) -> list[Settled]:
        """Ask the store for the writer's last event number in ``app``'s segment (one call, no lock held)."""
        try:
            n = self.client.get_attributes(app.segment, [self.writer_id]).get(self.writer_id, 0)
        except Exception as e:  # the events cannot be numbered: they fail (not stored)
            err: BaseException = e
            if retriable(e, idempotent=True):
                err = WriterError(
                    f"segment {app.segment!r}: the writer's last event number is unknown ({e}); "
                    "its events were not sent, so they are not stored"
                )
                err.__cause__ = e
            with self.lock:
                return self.fail_appender(app, err) if app.assigned is None else []
        with self.lock:
            if app.assigned is None:
                app.assigned = app.acked = n
            return []

    def _reroute(self, hook: Callable[[list[SegmentAppender]], list[Settled]]) -> list[Settled]:
        """(lock held) Pause, wait until no append is in flight, hand the sealed appenders to ``hook``."""
        self.paused += 1
        try:
            while self.sending:  # every append settled: the fate of each is known
                self._wait(0.25)
            sealed = [a for a in self.appenders.values() if isinstance(a.trouble, SegmentSealedError)]
            try:
                return hook(sealed)
            except Exception as e:  # could not reroute (the store went away): the events fail
                err: BaseException = e
                if retriable(e, idempotent=True):
                    err = WriterError(f"writer {self.writer_id}: rerouting after a seal failed: {e}")
                    err.__cause__ = e
                cbs: list[Settled] = []
                for a in sealed:
                    if a.trouble is not None:
                        cbs += self.fail_appender(a, err)
                return cbs
        finally:
            self.paused -= 1
            self._notify()

    def _wake(self) -> None:
        """(lock held) Wake the worker thread, starting it if it is not running."""
        self._notify()
        if (self._worker is None or not self._worker.is_alive()) and not self._closed:
            self._worker = threading.Thread(
                target=self._run_worker, name=f"ingestwm-writer-{self.writer_id}", daemon=True
            )
            self._worker.start()

    def _run_worker(self) -> None:
        idle_since = monotonic_s()
        linger = self.config.linger_ms
        tick = 0.25 if linger is None else max(0.001, min(0.25, linger / 1000.0))
        while True:
            with self.lock:
                if self._closed:
                    self._worker = None
                    return
                apps = self.appenders.values()
                held = linger is not None and any(a.blocks and a.inflight is None for a in apps)
                if not self.work:
                    if not held and monotonic_s() - idle_since > WORKER_IDLE_S:
                        self._worker = None
                        return
                    self._wait(tick)
                    if not self.work and not held:
                        continue
                idle_since = monotonic_s()
            self.service()
            if held:
                self.kick()  # blocks whose linger ran out
