"""Write futures: the acknowledgement of one written event, and the block of events it waits on.

A ``WriteFuture`` is what ``EventWriter.write_event`` (and ``Transaction.write_event``)
returns: ``result(timeout)`` gives the event's ``EventAck`` (segment, offset, ingestion
time) or raises why it failed, ``add_done_callback(fn)`` calls back once it is settled,
and ``await`` works in asyncio. A future points at its event in a ``Block`` (the events of
one segment appended together, ``appender``); after a seal the writer moves unwritten
events to other blocks and the future follows them. Creating one costs ~0.1 µs: the
future holds no lock, no event and no result of its own; the block settles all its
events' futures at once.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Protocol

from segmentstore import AppendResult

__all__ = ["EventAck", "WriteFuture", "Block", "BlockEngine", "Callback", "SegmentAppender", "Settled"]

Callback = Callable[["WriteFuture"], object]
Settled = tuple[int, "WriteFuture", Callback]
"""A callback to run: (event index in its block, future, function)."""


class BlockEngine(Protocol):
    """What a block's futures ask of the machinery that sends it (``appender.AppendEngine``)."""

    def add_callback(self, b: Block, i: int, fut: WriteFuture, fn: Callback) -> bool: ...

    def run_callbacks(self, cbs: list[Settled]) -> None: ...

    def wait_futures(self, futs: list[WriteFuture], timeout: float | None) -> None: ...

    def expedite(self, b: Block) -> None: ...


@dataclass(frozen=True, slots=True)
class EventAck:
    """An acknowledged event: its segment, offset and ingestion time.

    ``offset`` and ``ingestion_time`` are ``None`` when the store held the event already (a
    resend acknowledged as a duplicate, or found stored after a seal): it is stored once.
    """

    segment: str
    offset: int | None
    ingestion_time: int | None


class Block:
    """Events of one segment appended together; settled once (acknowledged or failed) or moved on."""

    __slots__ = (
        "attempts",
        "callbacks",
        "closed",
        "data",
        "done",
        "ends",
        "engine",
        "error",
        "first_ms",
        "frames",
        "moved",
        "moved_to",
        "moving",
        "nbytes",
        "number",
        "result",
        "segment",
    )

    def __init__(self, engine: BlockEngine, segment: str, first_ms: int) -> None:
        self.engine = engine
        self.segment = segment
        self.frames: list[bytes] = []
        self.nbytes = 0
        self.closed = False  # no more events join it; sendable even in sync or linger mode
        self.first_ms = first_ms
        self.number: int | None = None  # the event number of its last event, once sent
        self.data: bytes | None = None
        self.attempts = 0
        self.done = False
        self.result: AppendResult | None = None
        self.error: BaseException | None = None
        self.callbacks: list[Settled] | None = None
        self.moved: list[tuple[Block, int] | None] | None = None  # after a seal: where each event went
        self.moving: list[tuple[Block, int] | None] | None = None  # ``moved`` being built (published whole)
        self.moved_to: list[Block] = []
        self.ends: list[int] | None = None

    def ack(self, i: int) -> EventAck:
        """The acknowledgement of event ``i`` (once the block is acknowledged). O(events) once."""
        r = self.result
        if r is None or r.duplicate:
            return EventAck(self.segment, None, None)
        if self.ends is None:
            self.ends = list(itertools.accumulate(map(len, self.frames)))
        start = self.ends[i - 1] if i else 0
        return EventAck(self.segment, r.offset + start, r.timestamp)


class WriteFuture:
    """The acknowledgement of one written event: ``result()``, ``add_done_callback``, ``await``.

    ``result(timeout)`` returns the ``EventAck`` once the store acknowledged the event, or
    raises why it failed; waiting on an event held back (``sync`` mode, linger) sends its
    block now. Callbacks run on the thread that settles the block (the client's I/O thread
    for ``RemoteClient``): keep them short. Not cancellable.
    """

    __slots__ = ("_block", "_i")

    def __init__(self, block: Block, i: int) -> None:
        self._block = block
        self._i = i

    def _where(self) -> tuple[Block, int]:
        b, i = self._block, self._i
        while b.moved is not None:
            to = b.moved[i]
            assert to is not None
            b, i = to
        return b, i

    def done(self) -> bool:
        """Whether the event was acknowledged or failed. O(1)."""
        return self._where()[0].done

    def result(self, timeout: float | None = None) -> EventAck:
        """Wait (up to ``timeout`` s) for the acknowledgement; raises the event's error or TimeoutError."""
        b, i = self._wait(timeout)
        if b.error is not None:
            raise b.error
        return b.ack(i)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Wait like ``result`` and return the event's error, ``None`` if it was acknowledged."""
        return self._wait(timeout)[0].error

    def add_done_callback(self, fn: Callback) -> None:
        """Call ``fn(self)`` once the event is settled (at once if it is already)."""
        b, i = self._where()
        if not b.engine.add_callback(b, i, self, fn):
            b.engine.run_callbacks([(i, self, fn)])

    def _wait(self, timeout: float | None) -> tuple[Block, int]:
        b, i = self._where()
        if not b.done:
            b.engine.wait_futures([self], timeout)
            b, i = self._where()
            if not b.done:
                raise TimeoutError(f"event {i} of a block of {b.segment!r}: not settled in {timeout}s")
        return b, i

    def __await__(self) -> Generator[Any, None, EventAck]:
        import asyncio

        loop = asyncio.get_running_loop()
        out: asyncio.Future[EventAck] = loop.create_future()

        def copy(f: WriteFuture) -> None:
            if out.cancelled():
                return
            err = f.exception(0)
            if err is not None:
                out.set_exception(err)
            else:
                out.set_result(f.result(0))

        self.add_done_callback(lambda f: loop.call_soon_threadsafe(copy, f))
        b, _ = self._where()
        b.engine.expedite(b)
        return (yield from out.__await__())

    def __repr__(self) -> str:
        b, i = self._where()
        state = "pending" if not b.done else ("failed" if b.error is not None else "acknowledged")
        return f"<WriteFuture {state} segment={b.segment!r} index={i}>"


class SegmentAppender:
    """One segment's queued blocks (oldest first; the last may be open) and its append in flight."""

    __slots__ = ("acked", "assigned", "blocks", "inflight", "segment", "trouble")

    def __init__(self, segment: str, stored_number: int | None) -> None:
        self.segment = segment
        self.blocks: deque[Block] = deque()
        self.inflight: Block | None = None
        # the highest event number given to a block (never reused): the store's record of the
        # writer at first; ``None`` until it was asked (by ``service``, on a thread that may wait)
        self.assigned = stored_number
        self.acked = stored_number or 0  # the number of the last acknowledged block
        self.trouble: BaseException | None = None  # why the block in flight failed; waits for service

    @property
    def unsent(self) -> int:
        """Events queued or in flight. O(blocks)."""
        return sum(len(b.frames) for b in self.blocks) + (len(self.inflight.frames) if self.inflight else 0)

    def all_blocks(self) -> list[Block]:
        return ([self.inflight] if self.inflight is not None else []) + list(self.blocks)
