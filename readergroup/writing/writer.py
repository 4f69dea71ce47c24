"""``EventWriter``: routes events by key to stream segments and appends them exactly once, asynchronously.

- Asynchronous by default: ``write_event`` returns a ``WriteFuture`` at once; per segment
  one append is in flight and the events written meanwhile aggregate into the next block
  (``appender``). ``flush()`` waits for everything written so far and raises the first
  failure since the last flush; ``close()`` flushes. ``WriterConfig(sync=True)`` is the
  writer of before: blocks of ``max_batch_events`` go out when full, and the write that
  fills one waits for its acknowledgement. An event is readable once its future is done
  (embedded too: a sender thread appends there). Thread-safe: concurrent ``write_event``
  callers keep each their own order. ``max_bytes_in_flight`` bounds the bytes not yet
  acknowledged (``write_event`` waits up to ``max_block_ms``, or raises at 0).
- Routing: a stable hash of the routing key into [0, 1) over the current key ranges
  (``routing.RoutingTable``); events of one key go to one segment, in order.
- Exactly once: each writer has an id; every append carries the writer id and the
  number of its last event (event numbers count up per segment, continuing from the
  store's record of the writer, so a restarted writer with the same id goes on where it
  stopped). The store acknowledges a resent append with ``duplicate=True`` and does not
  store it again; a block is resent byte for byte with the same number until it is
  acknowledged (``RemoteClient`` resends across reconnects by itself; after
  ``ConnectionError``/``TimeoutError`` the writer resends ``retry_attempts`` more times).
- Scaling: when an append raises ``SegmentSealedError`` the writer stops starting appends,
  waits until none is in flight, asks the store whether a stale segment's last append
  landed (the writer's event number attribute), reloads the stream's active segments (one
  call, however many scalings happened meanwhile), moves the unwritten events of *every*
  segment no longer active to the segments now owning their keys, in their original
  order, and goes on. Events of one routing key thus keep their order across any
  sequence of splits and merges; their futures follow them.
- Producer watermarks (Pulsar's PIP): ``note_time(t)`` asserts that every later event
  of this writer has event time ``>= t``; ``mark_idle()`` takes the writer out of the
  active set. Each holds back other writes, waits until everything written before is
  acknowledged, then appends a marker frame to every active segment and waits for it
  (one found sealed passes it to every active segment overlapping its key range, once
  each), so no event written before a marker lands after it. An event written after
  ``mark_idle()`` first re-joins the writer at its last asserted time. See
  ``producer_watermarks``.
- Fork: in a forked child (multiprocessing, Spark's workers) the writer is a new writer
  at its first use there, with a new random id, as the parent may go on writing (one id
  in two processes would make the store drop one's events as duplicates); the events
  unsettled at the fork are the parent's, their futures fail in the child. A writer
  given its ``writer_id`` refuses to write in a forked child (``WriterError``).
- Bulk: ``write_encoded`` queues many events framed at once (``frame_batch.encode_events``,
  the Spark sink's path), as ``write_event`` each but without a future per event.
"""

from __future__ import annotations

import secrets
import threading

import numpy as np

from segmentstore import FRAMING_INGESTWM, Clock, StreamInfo, StreamSegment
from segmentstore.checks import checked
from segmentstore.client import SegmentStoreClient
from segmentstore.limits import INT64_MAX

from ..config import WriterConfig
from ..errors import InvalidEventError, NoSuccessorsError, StreamFramingError, WriterClosedError, WriterError
from ..format.events import HEADER_SIZE, KIND_EVENT
from ..format.frame_batch import EncodedEvents
from ..format.keyed_framing import KeyedFramer
from ..format.producer_watermarks import (
    BROADCAST,
    check_asserted_time,
    encode_idle_marker,
    encode_watermark_marker,
)
from ..format.routing import RoutingTable, key_hash
from .appender import AppendEngine
from .write_future import Block, EventAck, SegmentAppender, Settled, WriteFuture

__all__ = [
    "WriterConfig",
    "EventWriter",
    "EventAck",
    "WriteFuture",
    "SegmentAppender",
    "new_writer_id",
    "check_writer_id",
    "split_by_segment",
    "check_ingestwm_framing",
]

_MAX_WRITER_ID = INT64_MAX


def new_writer_id() -> int:
    """A random writer id in [1, 2^62]."""
    return secrets.randbits(62) + 1


def check_writer_id(writer_id: object) -> int:
    """Validate a writer id: an int in [1, 2^63)."""
    if isinstance(writer_id, bool) or not isinstance(writer_id, int) or not 0 < writer_id <= _MAX_WRITER_ID:
        raise InvalidEventError(f"writer_id must be an int in [1, 2^63), got {writer_id!r}")
    return writer_id


def split_by_segment(
    segments: list[StreamSegment], key_index: np.ndarray
) -> list[tuple[StreamSegment, list[int] | None]]:
    """Event positions per segment, in order, given each distinct key's segment and each event's key.

    ``None`` stands for every event (one segment only). O(events) in numpy, plus one
    Python int per event when the events go to several segments.
    """
    ids: dict[str, int] = {}
    first: list[StreamSegment] = []
    for seg in segments:
        if seg.name not in ids:
            ids[seg.name] = len(ids)
            first.append(seg)
    if len(first) == 1:
        return [(first[0], None)]
    of_key = np.array([ids[seg.name] for seg in segments], np.int64)
    of_event = of_key[key_index]
    return [(seg, np.flatnonzero(of_event == j).tolist()) for j, seg in enumerate(first)]


def frame_hash(frame: bytes) -> float:
    """The routing point of a framed event (its key's hash), ``BROADCAST`` for a marker. O(key)."""
    if frame[4] != KIND_EVENT:
        return BROADCAST
    n = int.from_bytes(frame[HEADER_SIZE - 2 : HEADER_SIZE], "little")
    return key_hash(frame[HEADER_SIZE : HEADER_SIZE + n].decode())


class EventWriter:
    """Writes events of a stream by routing key, asynchronously; thread-safe. ``close()`` flushes.

    ``writer_id`` identifies the writer to the store for deduplication (random if
    ``None``; give the same id to a restarted writer). ``clock`` is needed only for
    ``config.linger_ms``.
    """

    def __init__(
        self,
        client: SegmentStoreClient,
        stream: str,
        writer_id: int | None = None,
        clock: Clock | None = None,
        config: WriterConfig | None = None,
    ) -> None:
        self._config = config if config is not None else WriterConfig()
        if not isinstance(self._config, WriterConfig):
            raise InvalidEventError(f"config must be a WriterConfig, got {config!r}")
        if self._config.linger_ms is not None and clock is None:
            raise InvalidEventError("WriterConfig.linger_ms needs a clock")
        self._client = client
        self._stream = stream
        self._clock = clock
        self.writer_id = new_writer_id() if writer_id is None else check_writer_id(writer_id)
        self._given_id = writer_id is not None
        self._table = RoutingTable(check_ingestwm_framing(client.get_stream(stream)).active_segments)
        self._engine = AppendEngine(client, self.writer_id, self._config, clock, self._reroute, self._fork_id)
        self._framer = KeyedFramer()
        self._sync = self._config.sync
        self._segment_of: dict[str, StreamSegment] = {}  # the key range of each appender's segment
        self._limit = self._config.max_bytes_in_flight
        self._closed = False
        self._asserted: int | None = None  # highest time given to note_time
        self._idle = False
        self._barrier: int | None = None  # the thread broadcasting a marker; other writes wait
        self._refused: str | None = None  # why this process may not write (a forked child, a given id)

    @property
    def stream(self) -> str:
        return self._stream

    @property
    def config(self) -> WriterConfig:
        return self._config

    def note_time(self, t: int) -> None:
        """Assert that every later event of this writer has event time ``>= t`` (a producer watermark).

        Joins the writer to the stream's active set (the first time); waits for everything
        written before, then for one marker append per active segment (two round trips).
        The readers' watermark from it is ``t - 1``.
        """
        t = check_asserted_time(t, self.writer_id)
        self._engine.check_fork()
        with self._engine.lock:
            self._check_open()
            self._asserted = t if self._asserted is None else max(self._asserted, t)
            self._idle = False
        self._broadcast(encode_watermark_marker(self.writer_id, t))

    def mark_idle(self) -> None:
        """Leave the active set, so the writer no longer holds the watermark back; waits like note_time."""
        self._engine.check_fork()
        with self._engine.lock:
            self._check_open()
            self._idle = True
        self._broadcast(encode_idle_marker(self.writer_id))

    def write_event(
        self, routing_key: str, payload: bytes | bytearray | memoryview, event_time: int | None = None
    ) -> WriteFuture:
        """Frame and route one event; returns its future at once (``sync``: see ``WriterConfig``).

        Appended when its segment has no append in flight, else with the next block. Blocks
        (or raises ``WriterBufferFullError``) at ``max_bytes_in_flight``. ~1 µs: an event of a
        key seen before is framed from the key's cached bytes and hash (``KeyedFramer``), and
        an open writer with room takes the lock once, without ``_enter``'s loop.
        """
        frame, h = self._framer.frame(routing_key, payload, event_time)
        eng = self._engine
        eng.check_fork()
        lock = eng.lock
        lock.acquire()
        # anything but an open writer with room, no marker or reroute under way, not idle: _enter
        if (
            self._closed
            or self._idle
            or self._barrier is not None
            or (eng.unacked and eng.unacked + len(frame) > self._limit)
        ):
            lock.release()
            self._enter(len(frame))
        try:
            seg = self._table.segment_for_hash(h)
            app = eng.appenders.get(seg.name) or self._appender(seg)
            fut, send = eng.add(app, frame)
        finally:
            lock.release()
        if send is None and not eng.work and not self._sync:
            return fut  # nothing to send or do now (the common case in a loop)
        return eng.dispatch(app, send, fut, self._sync)

    def _enter(self, n: int) -> None:
        """Wait until ``n`` more bytes may be queued, and return holding the engine's lock.

        Raises if the writer is closed; re-joins first (its watermark marker broadcast) if
        the writer was idle; waits for room at ``max_bytes_in_flight`` (or raises, as
        configured). The caller queues its events, then releases the lock.
        """
        eng = self._engine
        while True:
            eng.lock.acquire()
            try:
                if not self._admitted():
                    eng.lock.release()
                    continue
                rejoin = self._idle and self._asserted is not None
                if not rejoin and not (eng.unacked and eng.unacked + n > self._limit):
                    return  # (the lock stays held)
                if rejoin:  # re-join at the last asserted time before the events
                    self._idle = False
                    assert self._asserted is not None
                    marker = encode_watermark_marker(self.writer_id, self._asserted)
            except BaseException:
                eng.lock.release()
                raise
            eng.lock.release()
            if rejoin:
                self._broadcast(marker)
            else:
                eng.make_room(n)

    def _admitted(self) -> bool:
        """(lock held) Raise if closed; ``False`` (after waiting a slice) while another thread
        holds the barrier of a marker or a reroute, so the caller tries again."""
        if self._closed:
            self._check_open()
        if self._barrier is not None and self._barrier != threading.get_ident():
            self._engine._wait(0.25)
            return False
        return True

    def write_encoded(self, events: EncodedEvents) -> None:
        """Route and queue events framed in bulk (``frame_batch.encode_events``), as ``write_event`` each.

        No futures: a failure is raised by the next ``flush`` (``sync``: by this call, which
        waits for the blocks it filled). One routing-table lookup per distinct key; the
        events of each segment go into its blocks at once. O(events), ~0.1 µs each.
        """
        if not len(events):
            return
        frames = events.frames()
        eng = self._engine
        eng.check_fork()
        filled: list[Block] = []
        sends = []
        self._enter(len(events.data))
        try:
            segments = [self._table.segment_for_hash(h) for h in events.key_hashes.tolist()]
            for seg, picked in split_by_segment(segments, events.key_index):
                app = eng.appenders.get(seg.name) or self._appender(seg)
                mine = frames if picked is None else [frames[i] for i in picked]
                blocks, send = eng.add_many(app, mine)
                filled += blocks
                if send is not None:
                    sends.append((app, send))
        finally:
            eng.lock.release()
        eng.dispatch_many(sends, filled, self._config.sync)

    def flush(self) -> None:
        """Append every buffered event, wait for the acknowledgements; raise the first failure since."""
        self._engine.check_fork()
        self._engine.flush()

    def close(self) -> None:
        """Flush and close; idempotent. A failed flush still closes the writer, then raises."""
        self._engine.check_fork()
        with self._engine.lock:
            if self._closed:
                return
        try:
            self.flush()
        finally:
            with self._engine.lock:
                self._closed = True
                self._engine._notify()
            self._engine.close()

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pending_events(self) -> int:
        """Events buffered or in flight (not yet acknowledged). O(blocks)."""
        self._engine.check_fork()
        with self._engine.lock:
            return sum(a.unsent for a in self._engine.appenders.values())

    @property
    def bytes_in_flight(self) -> int:
        """Bytes of the events written and not yet acknowledged or failed (bounded by max_bytes_in_flight)."""
        return self._engine.unacked

    @property
    def segments(self) -> tuple[StreamSegment, ...]:
        """The segments the writer currently routes to, by key order."""
        self._engine.check_fork()
        with self._engine.lock:
            return self._table.segments

    # ------------------------------------------------------------------ internals
    def _check_open(self) -> None:
        if self._refused is not None:
            raise WriterError(self._refused)
        if self._closed:
            raise WriterClosedError(f"writer {self.writer_id} of stream {self._stream!r} is closed")

    def _fork_id(self) -> int:
        """(in a forked child, once) The writer's id here: a new one, as the parent may go on writing.

        One writer id in two processes would make the store drop the events of one as
        duplicates of the other's. A given id names one writer: this process may not write.
        """
        self._segment_of.clear()
        self._barrier = None
        if self._given_id:
            self._refused = (
                f"writer {self.writer_id} of stream {self._stream!r} was made in another process, which "
                "this one forked from: with the id given to it, it writes there only (two processes "
                "writing with one writer id drop each other's events as duplicates); make a writer here"
            )
            self._closed = True
            return self.writer_id
        self.writer_id = new_writer_id()
        return self.writer_id

    def _appender(self, seg: StreamSegment) -> SegmentAppender:
        """(lock held) The appender of ``seg`` (a new one learns the writer's last number before sending)."""
        app = self._engine.appender(seg.name)
        self._segment_of[seg.name] = seg
        return app

    def _broadcast(self, frame: bytes) -> None:
        """Wait until everything written is settled, then append a marker to every routed segment and wait."""
        eng = self._engine
        me = threading.get_ident()
        with eng.lock:
            while self._barrier is not None and self._barrier != me:
                eng._wait(0.25)
            self._check_open()
            owner = self._barrier is None
            self._barrier = me
        try:
            eng.flush(raise_errors=False)  # earlier failures stay for flush(); the marker goes on
            with eng.lock:
                blocks = [eng.add_closed(self._appender(seg), frame) for seg in self._table.segments]
            eng.kick()
            eng.wait_settled(blocks)
            eng.raise_failure(blocks)
        finally:
            if owner:
                with eng.lock:
                    self._barrier = None
                    eng._notify()

    def _reroute(self, sealed: list[SegmentAppender]) -> list[Settled]:
        """(lock held, nothing in flight) Reload the active segments; move every stale appender's events.

        Asks the store first (successors, active segments, the writer's number in each stale
        segment with an append of unknown fate), then changes the state: a failed call leaves
        it as it was.
        """
        eng, client = self._engine, self._client
        ended = [a for a in sealed if not client.get_successors(a.segment)]
        active = client.get_stream(self._stream).active_segments if len(ended) < len(sealed) else ()
        live = {s.name for s in active}
        stale = [a for a in eng.appenders.values() if a.segment not in live] if active else []
        # asked even after SegmentSealedError: an earlier send of the block may have landed
        stored = {a.segment: self._stored_number(a) for a in stale if a.inflight is not None}
        cbs: list[Settled] = []
        for app in sealed:
            if app in ended or not active:
                why = "is sealed without successors" if app in ended else "has no active segment left"
                err = NoSuccessorsError(
                    f"segment {app.segment!r} of stream {self._stream!r} {why} (stream sealed?); "
                    f"{app.unsent} events were not written"
                )
                cbs += eng.fail_appender(app, err)
        if not stale:
            return cbs
        self._table = RoutingTable(active)
        placed: set[tuple[int, str]] = set()  # (marker frame, segment): a marker once per segment
        touched: set[str] = set()
        for old in stale:
            blocks = list(old.blocks)
            b = old.inflight
            if b is not None:
                if stored[old.segment] < (b.number or 0):
                    blocks.insert(0, b)
                else:
                    cbs += eng.settle_stored(old)
            del eng.appenders[old.segment]
            seg = self._segment_of.pop(old.segment)
            for blk in blocks:
                self._move_block(blk, seg, active, placed, touched)
        for name in touched:  # moved events go out now (sync mode too), as a flush's reroute did
            eng.close_open(eng.appenders[name])
        return cbs

    def _stored_number(self, app: SegmentAppender) -> int:
        """The writer's last event number the store holds for the segment (0 if none). One call."""
        return self._client.get_attributes(app.segment, [self.writer_id]).get(self.writer_id, 0)

    def _move_block(
        self,
        blk: Block,
        seg: StreamSegment,
        active: tuple[StreamSegment, ...],
        placed: set[tuple[int, str]],
        touched: set[str],
    ) -> None:
        """(lock held) Move ``blk``'s events to the segments owning their keys; markers once to each."""
        eng = self._engine
        for i, frame in enumerate(blk.frames):
            h = frame_hash(frame)
            if h == BROADCAST:  # to every active segment holding keys of the stale one
                targets = [s for s in active if s.key_low < seg.key_high and seg.key_low < s.key_high]
            else:
                targets = [self._table.segment_for_hash(h)]
            for t in targets:
                if h == BROADCAST:
                    if (id(frame), t.name) in placed:
                        continue
                    placed.add((id(frame), t.name))
                eng.move(blk, i, frame, self._appender(t))
                touched.add(t.name)
        eng.retire(blk)

    @checked
    def _check(self) -> None:
        """Assert the table tiles [0, 1), the engine's accounting; queued events route to their appender."""
        with self._engine.lock:
            self._table._check()
            self._engine._check()
            routed = {s.name for s in self._table.segments}
            assert self._segment_of.keys() == self._engine.appenders.keys()
            for name, app in self._engine.appenders.items():
                assert app.segment == name
                if app.unsent:
                    assert name in routed, f"{name} holds events but is no longer routed to"
                for b in app.all_blocks():
                    for f in b.frames:
                        h = frame_hash(f)
                        assert h == BROADCAST or self._table.segment_for_hash(h).name == name


def check_ingestwm_framing(info: StreamInfo) -> StreamInfo:
    """``info`` if its stream holds ingestwm's framing; else a ``StreamFramingError`` naming it."""
    if info.framing != FRAMING_INGESTWM:
        raise StreamFramingError(
            f"stream {info.name!r} holds {info.framing}-framed events (it was created through the "
            f"{info.framing} controller): write it with a {info.framing} client, not ingestwm's writers"
        )
    return info
