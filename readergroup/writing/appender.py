"""Asynchronous appends of event frames: blocks per segment, one append in flight per segment, futures.

How Pravega's segment output stream works, and Kafka's producer: a write puts its frame
into the open *block* of its segment and returns a ``WriteFuture`` at once. A segment
with no append in flight sends its oldest block right away (``client.append_async``);
events written while that append is in flight aggregate into the next block, which goes
out when the acknowledgement arrives. Blocks thus grow with the round trip and the
write rate, without a fixed linger (``WriterConfig.linger_ms`` optionally holds a block
for larger ones). An acknowledgement completes the futures of its block's events.

- Exactly once: a block carries the writer id and the number of its last event (numbers
  count up per segment from the store's record of the writer and are never reused). A
  block is resent byte for byte with the same number after a transient error (up to
  ``retry_attempts``); the store acknowledges one it holds already as a duplicate. With
  one block in flight per segment, nothing of a segment is sent while an earlier block
  of it is unresolved, so a resend never races a later append and per-segment order holds.
- Errors reach the futures (and ``flush``): a block the store refuses (a definite answer,
  ``Retry.NEVER``: not stored) fails its events only, and the next block is sent; a block
  whose resends are exhausted (outcome unknown) fails its events and every later block
  queued for that segment (never sent). The first such error is raised by the next
  ``flush``. Event numbers are not reused, so a block whose outcome was unknown can never
  make a later one look like a duplicate. A ``ReadTimeoutError`` or ``UnreachableError``
  is not resent: the client's deadline passed (it resent across reconnects meanwhile), so a
  server gone fails a block within the client's ``timeout_s``, and ``flush``,
  ``commit`` and ``result()`` end. A block never sent fails with the client's
  ``NotSentError`` (not stored); one sent fails with a ``WriterError`` saying its events
  may or may not be stored.
- Back-pressure: ``max_bytes_in_flight`` bounds the bytes written and not yet settled;
  a write beyond it waits up to ``max_block_ms`` (0: raises ``WriterBufferFullError``).
- Threads: sends happen outside the lock. ``RemoteClient`` keeps appends in flight by
  itself and completes them on its I/O thread, which only settles blocks and starts the
  next ones. A client whose appends complete in the call (``EmbeddedClient``) gets a
  sender thread of the writer, so that events aggregate while it appends (measured:
  ~3x the rate of appending in the caller's thread, ``bench.perf.bench_writer``); in ``sync``
  mode it is called in the caller's thread. Slow work (resends, learning the writer's
  last event number in a new segment, a seal handed to the writer's ``on_sealed``) runs
  in a thread that may block: the caller's, or a worker thread started when needed that
  ends when idle. Callbacks must not wait for acknowledgements (``WriterError``).
"""

from __future__ import annotations

import bisect
import concurrent.futures
import functools
import itertools
import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable

from segmentstore import AppendResult, AppendTooLargeError, Clock, SegmentSealedError
from segmentstore.checks import checked
from segmentstore.client import SegmentStoreClient
from segmentstore.clock import monotonic_s
from segmentstore.errors import NotSentError, ReadTimeoutError, UnreachableError, retriable

from ..config import WriterConfig
from ..errors import WriterBufferFullError, WriterError
from .write_future import Block, Callback, SegmentAppender, Settled, WriteFuture

__all__ = ["WriterConfig", "SegmentAppender", "AppendEngine"]

_log = logging.getLogger(__name__)
_WORKER_IDLE_S = 2.0
_local = threading.local()  # ``io``: this thread settles appends (client I/O, sender): it must not wait
_forks = 0  # forks this process descends from (counted in each child): engines made before one are stale


def _count_fork() -> None:
    global _forks
    _forks += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_count_fork)


class AppendEngine:
    """The appends of one writer (or transaction) over its segments; thread-safe. See the module docstring.

    ``on_sealed(appenders)`` (the ``EventWriter``'s reroute) is called with the lock held,
    no block in flight and no block starting, for the appenders whose append found their
    segment sealed, and returns the callbacks of the blocks it settled; if it raises, those
    appenders' events fail with its error. Without it a seal fails the events like any
    other store error.
    """

    def __init__(
        self,
        client: SegmentStoreClient,
        writer_id: int,
        config: WriterConfig,
        clock: Clock | None = None,
        on_sealed: Callable[[list[SegmentAppender]], list[Settled]] | None = None,
        on_fork: Callable[[], int] | None = None,
    ) -> None:
        self.client = client
        self.writer_id = writer_id
        self.config = config
        self.clock = clock
        self.on_sealed = on_sealed
        self.on_fork = on_fork
        self._fork = _forks
        self.lock = threading.RLock()
        self.cv = threading.Condition(self.lock)
        self._waiting = 0  # threads in ``_wait``: only then do settles notify
        self.appenders: dict[str, SegmentAppender] = {}
        self.unacked = 0  # bytes of the events in unsettled blocks
        self.sending = 0  # appends handed to the client and not settled
        self.paused = 0  # > 0: no block starts (a reroute is in progress)
        self.work = False  # resends or seals wait for ``service``
        self.error: BaseException | None = None  # the first failure since the last flush
        self._servicing = False
        self._worker: threading.Thread | None = None
        self._closed = False
        self._max_events = config.max_batch_events
        self._max_bytes = config.max_batch_bytes
        self._eager = not config.sync and config.linger_ms is None
        # a client whose appends complete in the call (embedded): called directly, and in async
        # mode from a sender thread of the writer, so that events aggregate meanwhile
        self._direct = type(client).append_async is SegmentStoreClient.append_async
        self._threaded = self._direct and not config.sync
        self._queue: deque[tuple[SegmentAppender, Block]] = deque()  # blocks for the sender thread
        self._queue_cv = threading.Condition(threading.Lock())
        self._sender: threading.Thread | None = None

    def _wait(self, timeout: float | None) -> None:
        """(lock held) Wait for a settle, a move or a state change, up to ``timeout`` s."""
        self._waiting += 1
        try:
            self.cv.wait(timeout)
        finally:
            self._waiting -= 1

    def _notify(self) -> None:
        """(lock held) Wake the waiting threads, if any. O(1) without waiters."""
        if self._waiting:
            self.cv.notify_all()

    # ------------------------------------------------------------------ fork
    def check_fork(self) -> None:
        """In a forked child, at the first call: ``after_fork`` with the id ``on_fork`` gives. O(1)."""
        if self._fork != _forks:
            self.after_fork(self.writer_id if self.on_fork is None else self.on_fork())

    def after_fork(self, writer_id: int) -> None:
        """In a forked child: forget the parent's appends, go on as a new writer ``writer_id``.

        The blocks not settled at the fork are the parent's (it sends them, with its writer
        id): here their futures fail, as their outcome is known only there. The locks are
        new (a parent thread may have held them at the fork) and no thread is inherited.
        """
        self._fork = _forks
        self.lock = threading.RLock()
        self.cv = threading.Condition(self.lock)
        self._queue_cv = threading.Condition(threading.Lock())
        self._waiting = 0
        gone = WriterError(
            f"writer {self.writer_id}: the event was written in process {os.getppid()} before this "
            "process forked from it; that process sends it, its outcome is not known here"
        )
        cbs: list[Settled] = []
        for app in self.appenders.values():
            for b in app.all_blocks():
                cbs += self._complete(b, None, gone)
        self.writer_id = writer_id
        self.appenders = {}
        self.unacked = self.sending = self.paused = 0
        self.work = self._servicing = False
        self.error = None
        self._worker = self._sender = None
        self._queue = deque()
        self.run_callbacks(cbs)

    # ------------------------------------------------------------------ appenders and blocks
    def appender(self, segment: str, stored_number: int | None = None) -> SegmentAppender:
        """(lock held) The segment's appender; a new one learns the writer's last number before it sends."""
        app = self.appenders.get(segment)
        if app is None:
            app = self.appenders[segment] = SegmentAppender(segment, stored_number)
        return app

    def _now(self) -> int:
        return self.clock.now() if self.clock is not None and self.config.linger_ms is not None else 0

    def _open_block(self, app: SegmentAppender, n: int) -> Block:
        blocks = app.blocks
        b = blocks[-1] if blocks else None
        if b is None or b.closed or (b.frames and b.nbytes + n > self._max_bytes):
            if b is not None:
                b.closed = True
            b = Block(self, app.segment, self._now())
            blocks.append(b)
            if self.config.linger_ms is not None:
                self._wake()  # the worker sends it when the linger is over
        return b

    def add(self, app: SegmentAppender, frame: bytes) -> tuple[WriteFuture, Block | None]:
        """(lock held) Queue ``frame``; returns its future and the block to send now (outside the lock)."""
        n = len(frame)
        b = self._open_block(app, n)
        fut = WriteFuture(b, len(b.frames))
        b.frames.append(frame)
        b.nbytes += n
        self.unacked += n
        if len(b.frames) >= self._max_events or b.nbytes >= self._max_bytes:
            b.closed = True
        if app.inflight is None and not self.paused and app.trouble is None:
            return fut, self._start(app)
        return fut, None

    def add_many(self, app: SegmentAppender, frames: list[bytes]) -> tuple[list[Block], Block | None]:
        """(lock held) Queue ``frames`` in order, as ``add`` each but without futures.

        Returns the blocks they went into and the block to send now (outside the lock). Blocks
        fill as with ``add`` (at most ``max_batch_events`` events, ``max_batch_bytes`` bytes).
        O(frames), no Python loop per frame: the lengths are summed in C and cut with bisect.
        """
        touched: list[Block] = []
        i, count = 0, len(frames)
        while i < count:
            b = self._open_block(app, len(frames[i]))
            room = max(1, self._max_events - len(b.frames))
            ends = list(itertools.accumulate(map(len, frames[i : i + room])))
            take = max(1, bisect.bisect_right(ends, self._max_bytes - b.nbytes))  # a big frame alone
            b.frames.extend(frames[i : i + take])
            b.nbytes += ends[take - 1]
            self.unacked += ends[take - 1]
            if len(b.frames) >= self._max_events or b.nbytes >= self._max_bytes:
                b.closed = True
            if not touched or touched[-1] is not b:
                touched.append(b)
            i += take
        if touched and app.inflight is None and not self.paused and app.trouble is None:
            return touched, self._start(app)
        return touched, None

    def add_closed(self, app: SegmentAppender, frame: bytes) -> Block:
        """(lock held) Queue ``frame`` (a marker) in a block that goes out even in sync mode; returns it."""
        b = self._open_block(app, len(frame))
        b.frames.append(frame)
        b.nbytes += len(frame)
        self.unacked += len(frame)
        b.closed = True
        return b

    def _start(self, app: SegmentAppender) -> Block | None:
        """(lock held) Make the oldest block the one in flight if it may go now; the caller sends it."""
        if not app.blocks or app.inflight is not None or app.trouble is not None or self.paused:
            return None
        if app.assigned is None:  # ``service`` asks the store first
            self.work = True
            return None
        b = app.blocks[0]
        if not (b.closed or self._eager):
            linger = self.config.linger_ms
            # held while 0 <= age < linger; a clock stepped back (age < 0) ends the wait (docs/design.md §1)
            if linger is None or 0 <= self._now() - b.first_ms < linger:
                return None
        app.blocks.popleft()
        b.closed = True
        app.assigned += len(b.frames)
        b.number = app.assigned
        b.data = b"".join(b.frames)
        app.inflight = b
        self.sending += 1
        return b

    # ------------------------------------------------------------------ sending and settling
    def dispatch(self, app: SegmentAppender, b: Block | None, fut: WriteFuture, sync: bool) -> WriteFuture:
        """After a write added ``fut`` (no lock held): send the block it opened, do pending work and,
        in ``sync`` mode, wait for the block it closed (raising its failure). Returns ``fut``."""
        if b is not None:
            self.send(app, b)
        if self.work:
            self.service()
        if sync:
            closed = fut._where()[0]
            if closed.closed and (not closed.done or closed.error is not None):  # the write closed it
                self.wait_settled([closed])
                self.raise_failure([closed])
        return fut

    def dispatch_many(
        self, sends: list[tuple[SegmentAppender, Block]], filled: list[Block], sync: bool
    ) -> None:
        """``dispatch`` after a bulk write (no lock held): send the blocks it opened, do pending
        work and, in ``sync`` mode, wait for the blocks it filled and closed (raising a failure)."""
        for app, b in sends:
            self.send(app, b)
        if self.work:
            self.service()
        if sync:
            closed = [b for b in filled if b.closed]
            self.wait_settled(closed)
            self.raise_failure(closed)

    def send(self, app: SegmentAppender, b: Block | None) -> None:
        """Hand ``b`` (and the blocks its acknowledgements start) to the client. No lock held."""
        if self._threaded and threading.current_thread() is not self._sender:
            if b is not None:
                self._enqueue(app, b)
            return
        client, wid = self.client, self.writer_id
        while b is not None:
            data = b.data or b""
            if self._direct:  # appends complete in the call: no futures on the way
                try:
                    r = client.append(app.segment, data, writer_id=wid, event_number=b.number)
                except Exception as e:
                    b = self._settle(app, b, None, e, self._threaded)
                else:
                    b = self._settle(app, b, r, None, self._threaded)
                continue
            try:
                f = client.append_async(app.segment, data, writer_id=wid, event_number=b.number)
            except Exception as e:  # a client that raises instead of failing the future
                b = self._settle(app, b, None, e, False)
                continue
            if not f.done():
                f.add_done_callback(functools.partial(self._on_reply, app, b))
                return
            b = self._settle_future(app, b, f, False)

    def _enqueue(self, app: SegmentAppender, b: Block) -> None:
        """Hand ``b`` to the sender thread (started if it is not running)."""
        with self._queue_cv:
            self._queue.append((app, b))
            if len(self._queue) > 1 and self._sender is not None:
                return  # the sender takes it after the ones before
            if self._sender is None or not self._sender.is_alive():  # (not alive: in a forked child)
                self._sender = threading.Thread(
                    target=self._run_sender, name=f"ingestwm-sender-{self.writer_id}", daemon=True
                )
                self._sender.start()
            else:
                self._queue_cv.notify()

    def _run_sender(self) -> None:
        """The sender thread: appends the queued blocks (and those their acknowledgements start)."""
        _local.io = True
        while True:
            with self._queue_cv:
                if not self._queue and not self._closed:
                    self._queue_cv.wait(_WORKER_IDLE_S)
                if not self._queue:
                    self._sender = None
                    return
                app, b = self._queue.popleft()
            self.send(app, b)

    def _on_reply(self, app: SegmentAppender, b: Block, f: concurrent.futures.Future[AppendResult]) -> None:
        io, _local.io = getattr(_local, "io", False), True
        try:
            self.send(app, self._settle_future(app, b, f, True))
        finally:
            _local.io = io

    def _settle_future(
        self, app: SegmentAppender, b: Block, f: concurrent.futures.Future[AppendResult], foreign: bool
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

    def move(self, old: Block, i: int, frame: bytes, to: SegmentAppender) -> None:
        """(lock held) Event ``i`` of the unsent ``old`` goes to ``to`` (after a seal); its future follows."""
        nb = self._open_block(to, len(frame))
        nb.frames.append(frame)
        nb.nbytes += len(frame)
        if len(nb.frames) >= self._max_events or nb.nbytes >= self._max_bytes:
            nb.closed = True
        self.unacked += len(frame)
        if old.moving is None:
            old.moving = [None] * len(old.frames)
        if old.moving[i] is None:
            old.moving[i] = (nb, len(nb.frames) - 1)
        if nb not in old.moved_to:
            old.moved_to.append(nb)

    def close_open(self, app: SegmentAppender) -> None:
        """(lock held) No more events join ``app``'s last block: it may go even in sync or linger mode."""
        if app.blocks:
            app.blocks[-1].closed = True

    def retire(self, old: Block) -> None:
        """(lock held) ``old``'s events were all moved: it is no longer counted; callbacks follow them."""
        self.unacked -= old.nbytes
        old.data = None
        old.moved = old.moving if old.moving is not None else []  # [] : only markers placed already
        old.moving = None
        for i, fut, fn in old.callbacks or []:
            to = old.moved[i] if i < len(old.moved) else None
            if to is not None:
                nb, j = to
                nb.callbacks = [*(nb.callbacks or []), (j, fut, fn)]
        old.callbacks = None
        self._notify()

    def add_callback(self, b: Block, i: int, fut: WriteFuture, fn: Callback) -> bool:
        """Register ``fn`` on ``b``; ``False`` if ``b`` is settled already (call it now)."""
        self.check_fork()
        with self.lock:
            while b.moved is not None and b.moved:
                to = b.moved[i]
                assert to is not None
                b, i = to
            if b.done:
                return False
            b.callbacks = [*(b.callbacks or []), (i, fut, fn)]
            return True

    @staticmethod
    def run_callbacks(cbs: Iterable[Settled]) -> None:
        for _, fut, fn in cbs:
            try:
                fn(fut)
            except Exception:  # a caller's callback must not break the writer
                _log.exception("write future callback failed")

    # ------------------------------------------------------------------ waiting
    def _unsettled(self, blocks: Iterable[Block]) -> list[Block]:
        """(lock held) The blocks of ``blocks`` (or those their events moved to) not settled yet."""
        out: list[Block] = []
        todo = list(blocks)
        while todo:
            b = todo.pop()
            if b.moved is not None:
                todo.extend(b.moved_to)
            elif not b.done:
                out.append(b)
        return out

    def expedite(self, b: Block) -> None:
        """Someone waits for ``b``: close it (sync mode, linger) and send what may go. No lock held."""
        if not b.done and not b.closed:
            with self.lock:
                b.closed = True
            self.kick()

    def wait_futures(self, futs: list[WriteFuture], timeout: float | None) -> None:
        self.check_fork()
        blocks = [f._where()[0] for f in futs]
        for b in blocks:
            self.expedite(b)
        self.wait_settled(blocks, timeout)

    def wait_settled(self, blocks: Iterable[Block], timeout: float | None = None) -> bool:
        """Wait until every block is settled (resending, rerouting meanwhile); ``False`` on timeout."""
        deadline = None if timeout is None else monotonic_s() + timeout
        pending = list(blocks)
        while True:
            with self.lock:
                pending = self._unsettled(pending)
                if not pending:
                    return True
                if getattr(_local, "io", False):
                    raise WriterError(
                        f"writer {self.writer_id}: waiting for acknowledgements in a write future's "
                        "callback (or on the client's I/O thread) would never end"
                    )
                left = None if deadline is None else deadline - monotonic_s()
                if left is not None and left <= 0:
                    return False
                serve = self.work and not self._servicing
                if not serve:
                    self._wait(0.25 if left is None else min(left, 0.25))
                    continue
            self.service()

    def flush(self, raise_errors: bool = True) -> None:
        """Send every queued block, wait until all are settled; raise the first failure since the last."""
        with self.lock:
            targets = [b for app in self.appenders.values() for b in app.all_blocks()]
            for b in targets:
                b.closed = True
        self.kick()
        self.wait_settled(targets)
        if raise_errors:
            with self.lock:
                err, self.error = self.error, None
            if err is not None:
                raise err

    def raise_failure(self, blocks: Iterable[Block]) -> None:
        """Raise the error of the first failed block of the settled ``blocks`` (it is then reported)."""
        with self.lock:
            todo = list(blocks)
            while todo:
                b = todo.pop(0)
                if b.moved is not None:
                    todo[:0] = b.moved_to
                elif b.error is not None:
                    if self.error is b.error:
                        self.error = None
                    raise b.error

    def make_room(self, n: int) -> None:
        """Wait until ``n`` more bytes fit under ``max_bytes_in_flight`` (or nothing is unsettled)."""
        cfg = self.config
        deadline = monotonic_s() + cfg.max_block_ms / 1000.0
        with self.lock:
            for app in self.appenders.values():
                for b in app.blocks:
                    b.closed = True
        self.kick()
        while True:
            with self.lock:
                if not self.unacked or self.unacked + n <= cfg.max_bytes_in_flight:
                    return
                left = deadline - monotonic_s()
                if left <= 0 or getattr(_local, "io", False):  # a callback cannot wait for acknowledgements
                    raise WriterBufferFullError(
                        f"writer {self.writer_id}: {self.unacked} bytes are not acknowledged yet and "
                        f"{n} more exceed max_bytes_in_flight ({cfg.max_bytes_in_flight}) "
                        f"after {cfg.max_block_ms} ms (max_block_ms)"
                    )
                serve = self.work and not self._servicing
                if not serve:
                    self._wait(min(left, 0.25))
                    continue
            self.service()

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
            if getattr(_local, "io", False):  # it may wait for acknowledgements this thread delivers
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
                    if not held and monotonic_s() - idle_since > _WORKER_IDLE_S:
                        self._worker = None
                        return
                    self._wait(tick)
                    if not self.work and not held:
                        continue
                idle_since = monotonic_s()
            self.service()
            if held:
                self.kick()  # blocks whose linger ran out

    def close(self) -> None:
        """No more worker or sender thread (a flush came first): both have ended when it returns,
        unless one is busy in a client call, which ends within the client's timeout. Idempotent."""
        with self.lock:
            self._closed = True
            worker = self._worker
            self.cv.notify_all()
        with self._queue_cv:
            sender = self._sender
            self._queue_cv.notify_all()
        for t in (worker, sender):
            if t is not None and t is not threading.current_thread():
                t.join(5.0)

    @checked
    def _check(self) -> None:
        """Assert the accounting: unsettled bytes, appends in flight, event numbers, block states."""
        with self.lock:
            total = 0
            sending = 0
            for name, app in self.appenders.items():
                assert app.segment == name
                assert app.assigned is None or app.acked <= app.assigned, (name, app.acked, app.assigned)
                assert app.assigned is not None or app.inflight is None, name
                b = app.inflight
                if b is not None:
                    assert b.number == app.assigned and not b.done and b.moved is None, name
                    total += b.nbytes
                    sending += app.trouble is None
                else:
                    assert app.trouble is None, name
                for k, q in enumerate(app.blocks):
                    assert q.frames and not q.done and q.moved is None and q.number is None, name
                    assert q.nbytes == sum(map(len, q.frames)), name
                    assert q.nbytes <= self._max_bytes or len(q.frames) == 1, name
                    assert len(q.frames) <= self._max_events, name
                    assert q.closed or k == len(app.blocks) - 1, f"{name}: an open block before the last"
                    total += q.nbytes
            assert total == self.unacked, (total, self.unacked)
            assert self.sending >= sending and self.paused >= 0
