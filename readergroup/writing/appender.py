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

Here: the engine's state, its blocks, sending, waiting and flushing; how a sent block
settles (and the slow work: resends, reroutes, the worker thread) is ``append_settling``.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable

from segmentstore import Clock
from segmentstore.checks import checked
from segmentstore.client import SegmentStoreClient
from segmentstore.clock import monotonic_s

from ..config import WriterConfig
from ..errors import WriterBufferFullError, WriterError
from .append_settling import WORKER_IDLE_S, AppendSettling, io_thread
from .write_future import Block, Callback, SegmentAppender, Settled, WriteFuture

__all__ = ["WriterConfig", "SegmentAppender", "AppendEngine"]

_log = logging.getLogger(__name__)
_forks = 0  # forks this process descends from (counted in each child): engines made before one are stale


def _count_fork() -> None:
    global _forks
    _forks += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_count_fork)


class AppendEngine(AppendSettling):
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
        """(lock held) Queue ``frame``; its future and the block to send now (outside the lock). O(1)."""
        n = len(frame)
        blocks = app.blocks
        b = blocks[-1] if blocks else None
        if b is None or b.closed or (b.frames and b.nbytes + n > self._max_bytes):
            b = self._open_block(app, n)
        frames = b.frames
        fut = WriteFuture(b, len(frames))
        frames.append(frame)
        b.nbytes += n
        self.unacked += n
        if len(frames) >= self._max_events or b.nbytes >= self._max_bytes:
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
        io_thread.io = True
        while True:
            with self._queue_cv:
                if not self._queue and not self._closed:
                    self._queue_cv.wait(WORKER_IDLE_S)
                if not self._queue:
                    self._sender = None
                    return
                app, b = self._queue.popleft()
            self.send(app, b)

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
                if getattr(io_thread, "io", False):
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
                if left <= 0 or getattr(
                    io_thread, "io", False
                ):  # a callback cannot wait for acknowledgements
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
