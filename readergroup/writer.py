"""``EventWriter``: routes events by key to stream segments, frames them, and appends them exactly once.

- Routing: a stable hash of the routing key into [0, 1) over the current key ranges
  (``routing.RoutingTable``); events of one key go to one segment, in order.
- Exactly once: each writer has an id; every append carries the writer id and the
  number of its last event (event numbers count up per segment, continuing from the
  store's record of the writer, so a restarted writer with the same id goes on where it
  stopped). The store acknowledges a resent append with ``duplicate=True`` and does not
  store it again; an append is resent byte for byte with the same number until it is
  acknowledged (after ``ConnectionError``/``TimeoutError``, up to ``retry_attempts``).
- Batching: ``max_batch_events`` events per segment are buffered before an append
  (default 1: every ``write_event`` appends at once, so an event's ingestion time is
  the clock's time at its write); ``flush()`` sends everything buffered, in appends of
  at most ``max_batch_events`` events and ``max_batch_bytes`` bytes (a single larger
  event alone); ``linger_ms`` (with a clock) flushes a segment whose oldest buffered
  event waited that long, checked at each write. ``write_encoded`` takes many events
  framed in bulk (``frame_batch.encode_events``) at once, as ``write_event`` would
  each in order.
- Scaling: when an append raises ``SegmentSealedError`` the writer asks the store
  whether its in-flight append landed (the writer's event number attribute), reloads
  the stream's active segments (one call, however many scalings happened meanwhile),
  moves the unwritten events of *every* segment no longer active to the segments now
  owning their keys, in their original order, and resends. Events of one routing key
  thus keep their order across any sequence of splits and merges.
- Producer watermarks (Pulsar's PIP): ``note_time(t)`` asserts that every later event
  of this writer has event time ``>= t``; ``mark_idle()`` takes the writer out of the
  active set. Each first flushes everything buffered, then sends a marker frame to
  every active segment (one found sealed passes it to every active segment overlapping
  its key range, once each), so no event written before a marker lands after it. An event
  written after ``mark_idle()`` first re-joins the writer at its last asserted time.
  See ``producer_watermarks``.
"""

from __future__ import annotations

import bisect
import itertools
import operator
import secrets
import threading
from dataclasses import dataclass, fields

import numpy as np

from segmentstore import Clock, SegmentSealedError, StreamSegment
from segmentstore.client import SegmentStoreClient
from segmentstore.limits import INT64_MAX

from .errors import InvalidEventError, NoSuccessorsError, WriterClosedError, WriterError
from .events import encode_event
from .frame_batch import EncodedEvents
from .producer_watermarks import BROADCAST, check_asserted_time, encode_idle_marker, encode_watermark_marker
from .routing import RoutingTable, key_hash

__all__ = [
    "WriterConfig",
    "EventWriter",
    "SegmentAppender",
    "new_writer_id",
    "check_writer_id",
    "split_by_segment",
]

_TRANSIENT = (ConnectionError, TimeoutError)
_MAX_WRITER_ID = INT64_MAX


@dataclass(frozen=True, slots=True)
class WriterConfig:
    """Writer settings: batch limits per segment, resends after transient errors, optional linger."""

    max_batch_events: int = 1
    max_batch_bytes: int = 1 << 20
    retry_attempts: int = 3
    linger_ms: int | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None and f.name == "linger_ms":
                continue
            low = 0 if f.name in ("retry_attempts", "linger_ms") else 1
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise InvalidEventError(f"WriterConfig.{f.name} must be an int >= {low}, got {v!r}")


def new_writer_id() -> int:
    """A random writer id in [1, 2^62]."""
    return secrets.randbits(62) + 1


def check_writer_id(writer_id: object) -> int:
    """Validate a writer id: an int in [1, 2^63)."""
    if isinstance(writer_id, bool) or not isinstance(writer_id, int) or not 0 < writer_id <= _MAX_WRITER_ID:
        raise InvalidEventError(f"writer_id must be an int in [1, 2^63), got {writer_id!r}")
    return writer_id


_Pending = tuple[float, bytes]  # (key hash, frame)
_FRAME = operator.itemgetter(1)


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


class _Batch:
    __slots__ = ("data", "events", "number")

    def __init__(self, events: list[_Pending], number: int) -> None:
        self.events = events
        self.number = number
        self.data = b"".join(map(_FRAME, events))


class SegmentAppender:
    """One segment's buffered events and its in-flight append, with exactly-once resends."""

    __slots__ = (
        "client",
        "first_ms",
        "inflight",
        "last_number",
        "pending",
        "pending_bytes",
        "segment",
        "writer_id",
    )

    def __init__(self, client: SegmentStoreClient, segment: str, writer_id: int) -> None:
        self.client = client
        self.segment = segment
        self.writer_id = writer_id
        self.last_number: int | None = None  # last acknowledged event number; None until asked
        self.inflight: _Batch | None = None
        self.pending: list[_Pending] = []
        self.pending_bytes = 0
        self.first_ms = 0

    def add(self, h: float, frame: bytes, now_ms: int = 0) -> None:
        if not self.pending:
            self.first_ms = now_ms
        self.pending.append((h, frame))
        self.pending_bytes += len(frame)

    def add_many(self, hashes: list[float], frames: list[bytes], now_ms: int = 0) -> None:
        """``add`` for each (hash, frame) in order. O(events)."""
        if not self.pending:
            self.first_ms = now_ms
        self.pending.extend(zip(hashes, frames, strict=True))
        self.pending_bytes += sum(map(len, frames))

    @property
    def unsent(self) -> int:
        return len(self.pending) + (len(self.inflight.events) if self.inflight else 0)

    def stored_number(self) -> int:
        """The writer's last event number the store holds for this segment (0 if none). One call."""
        return self.client.get_attributes(self.segment, [self.writer_id]).get(self.writer_id, 0)

    def flush(self, config: WriterConfig) -> None:
        """Send the in-flight batch, then the buffered events, until none is left; store errors propagate."""
        while self.inflight is not None or self.pending:
            if self.inflight is None:
                if self.last_number is None:
                    self.last_number = self.stored_number()
                most = min(len(self.pending), config.max_batch_events)
                if most == len(self.pending) and self.pending_bytes <= config.max_batch_bytes:
                    take, size = most, self.pending_bytes
                else:  # the longest prefix within max_batch_bytes (one event at least)
                    ends = list(
                        itertools.accumulate(map(len, map(_FRAME, itertools.islice(self.pending, most))))
                    )
                    take = max(1, bisect.bisect_right(ends, config.max_batch_bytes))
                    size = ends[take - 1]
                self.inflight = _Batch(self.pending[:take], self.last_number + take)
                del self.pending[:take]
                self.pending_bytes -= size
            batch = self.inflight
            for attempt in range(config.retry_attempts + 1):
                try:
                    self.client.append(
                        self.segment, batch.data, writer_id=self.writer_id, event_number=batch.number
                    )
                    break
                except _TRANSIENT as e:
                    if attempt == config.retry_attempts:
                        raise WriterError(
                            f"segment {self.segment!r}: append of {len(batch.events)} events "
                            f"(event number {batch.number}) failed {attempt + 1} times; kept for flush(): {e}"
                        ) from e
            self.last_number = batch.number
            self.inflight = None

    def take_unwritten(self) -> list[_Pending]:
        """After a seal: the events not stored here, in order (asks the store about the in-flight ones)."""
        out: list[_Pending] = []
        if self.inflight is not None and self.stored_number() < self.inflight.number:
            out.extend(self.inflight.events)
        out.extend(self.pending)
        self.inflight = None
        self.pending = []
        self.pending_bytes = 0
        return out


class EventWriter:
    """Writes events of a stream by routing key; thread-safe. ``close()`` flushes.

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
        self._table = RoutingTable(client.get_stream(stream).active_segments)
        self._appenders: dict[str, SegmentAppender] = {}
        self._segment_of: dict[str, StreamSegment] = {}  # the key range of each appender's segment
        self._lock = threading.RLock()
        self._closed = False
        self._asserted: int | None = None  # highest time given to note_time
        self._idle = False

    @property
    def stream(self) -> str:
        return self._stream

    def note_time(self, t: int) -> None:
        """Assert that every later event of this writer has event time ``>= t`` (a producer watermark).

        Joins the writer to the stream's active set (the first time) and flushes; one
        marker append per active segment. The readers' watermark from it is ``t - 1``.
        """
        t = check_asserted_time(t, self.writer_id)
        with self._lock:
            if self._closed:
                raise WriterClosedError(f"writer {self.writer_id} of stream {self._stream!r} is closed")
            self._asserted = t if self._asserted is None else max(self._asserted, t)
            self._idle = False
            self._broadcast(encode_watermark_marker(self.writer_id, t))

    def mark_idle(self) -> None:
        """Leave the active set, so the writer no longer holds the watermark back; flushes."""
        with self._lock:
            if self._closed:
                raise WriterClosedError(f"writer {self.writer_id} of stream {self._stream!r} is closed")
            self._idle = True
            self._broadcast(encode_idle_marker(self.writer_id))

    def write_event(
        self, routing_key: str, payload: bytes | bytearray | memoryview, event_time: int | None = None
    ) -> None:
        """Frame and route one event; appended now or once its segment's batch is full (``WriterConfig``)."""
        frame = encode_event(routing_key, payload, event_time)
        h = key_hash(routing_key)
        with self._lock:
            if self._closed:
                raise WriterClosedError(f"writer {self.writer_id} of stream {self._stream!r} is closed")
            if self._idle and self._asserted is not None:  # re-join at the last asserted time
                self._idle = False
                self._broadcast(encode_watermark_marker(self.writer_id, self._asserted))
            now = self._clock.now() if self._clock is not None else 0
            app = self._appender(self._table.segment_for_hash(h))
            app.add(h, frame, now)
            cfg = self._config
            if (
                len(app.pending) >= cfg.max_batch_events
                or app.pending_bytes >= cfg.max_batch_bytes
                or (cfg.linger_ms is not None and now - app.first_ms >= cfg.linger_ms)
            ):
                self._drain([app])

    def write_encoded(self, events: EncodedEvents) -> None:
        """Route and buffer events framed in bulk, as ``write_event`` for each in order; append full batches.

        One routing-table lookup per distinct key. A segment whose buffer reached
        ``WriterConfig``'s batch size (or ``linger_ms``) by the end of the call has all its
        buffered events appended then, in appends of at most the batch size: each key's
        events stay in order, exactly once. O(events), ~0.2 µs each.
        """
        if not len(events):
            return
        frames = events.frames()
        hashes = events.hashes().tolist()
        with self._lock:
            if self._closed:
                raise WriterClosedError(f"writer {self.writer_id} of stream {self._stream!r} is closed")
            if self._idle and self._asserted is not None:  # re-join at the last asserted time
                self._idle = False
                self._broadcast(encode_watermark_marker(self.writer_id, self._asserted))
            now = self._clock.now() if self._clock is not None else 0
            segments = [self._table.segment_for_hash(h) for h in events.key_hashes.tolist()]
            full = []
            for seg, picked in split_by_segment(segments, events.key_index):
                app = self._appender(seg)
                if picked is None:
                    app.add_many(hashes, frames, now)
                else:
                    app.add_many([hashes[i] for i in picked], [frames[i] for i in picked], now)
                cfg = self._config
                if (
                    len(app.pending) >= cfg.max_batch_events
                    or app.pending_bytes >= cfg.max_batch_bytes
                    or (cfg.linger_ms is not None and now - app.first_ms >= cfg.linger_ms)
                ):
                    full.append(app)
            self._drain(full)

    def flush(self) -> None:
        """Append every buffered event and wait for the acknowledgements."""
        with self._lock:
            self._drain([a for a in self._appenders.values() if a.unsent])

    def close(self) -> None:
        """Flush and close; idempotent. If the flush fails the writer stays open (retry ``close``)."""
        with self._lock:
            if not self._closed:
                self.flush()
                self._closed = True

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pending_events(self) -> int:
        """Events buffered or in flight (not yet acknowledged)."""
        with self._lock:
            return sum(a.unsent for a in self._appenders.values())

    @property
    def segments(self) -> tuple[StreamSegment, ...]:
        """The segments the writer currently routes to, by key order."""
        with self._lock:
            return self._table.segments

    # ------------------------------------------------------------------ internals
    def _appender(self, seg: StreamSegment) -> SegmentAppender:
        app = self._appenders.get(seg.name)
        if app is None:
            app = self._appenders[seg.name] = SegmentAppender(self._client, seg.name, self.writer_id)
            self._segment_of[seg.name] = seg
        return app

    def _broadcast(self, frame: bytes) -> None:
        """Flush everything buffered, then append a marker to every routed segment."""
        self._drain([a for a in self._appenders.values() if a.unsent])
        now = self._clock.now() if self._clock is not None else 0
        apps = [self._appender(seg) for seg in self._table.segments]
        for app in apps:
            app.add(BROADCAST, frame, now)
        self._drain(apps)

    def _drain(self, queue: list[SegmentAppender]) -> None:
        """Flush ``queue``; on a seal the events of every stale segment move on and join the queue."""
        while queue:
            app = queue.pop(0)
            if self._appenders.get(app.segment) is not app:
                continue  # swept by a reroute meanwhile: its events moved on
            try:
                app.flush(self._config)
            except SegmentSealedError:
                queue.extend(self._reroute(app))

    def _reroute(self, sealed: SegmentAppender) -> list[SegmentAppender]:
        """Reload the active segments; move every stale appender's unwritten events to them."""
        if not self._client.get_successors(sealed.segment):
            raise NoSuccessorsError(
                f"segment {sealed.segment!r} of stream {self._stream!r} is sealed without successors "
                f"(stream sealed?); {sealed.unsent} events were not written"
            )
        active = self._client.get_stream(self._stream).active_segments
        if not active:
            raise NoSuccessorsError(
                f"stream {self._stream!r} has no active segments (sealed?); "
                f"{sealed.unsent} events of segment {sealed.segment!r} were not written"
            )
        live = {s.name for s in active}
        stale = [a for a in self._appenders.values() if a.segment not in live]
        self._table = RoutingTable(active)
        touched: dict[str, SegmentAppender] = {}
        placed: set[tuple[int, str]] = set()  # (marker frame, segment): a marker once per segment
        for old in stale:
            events = old.take_unwritten()
            del self._appenders[old.segment]
            seg = self._segment_of.pop(old.segment)
            for h, frame in events:
                if h == BROADCAST:  # to every active segment holding keys of the stale one
                    targets = [s for s in active if s.key_low < seg.key_high and seg.key_low < s.key_high]
                else:
                    targets = [self._table.segment_for_hash(h)]
                for t in targets:
                    if h == BROADCAST:
                        if (id(frame), t.name) in placed:
                            continue
                        placed.add((id(frame), t.name))
                    nxt = self._appender(t)
                    nxt.add(h, frame, old.first_ms)
                    touched[nxt.segment] = nxt
        return list(touched.values())

    def _check(self) -> None:
        """Assert the routing table tiles [0, 1) and every buffered event routes to its appender."""
        with self._lock:
            self._table._check()
            routed = {s.name for s in self._table.segments}
            assert self._segment_of.keys() == self._appenders.keys()
            for name, app in self._appenders.items():
                assert app.segment == name
                assert app.pending_bytes == sum(len(f) for _, f in app.pending)
                if app.unsent:
                    assert name in routed, f"{name} holds events but is no longer routed to"
                for h, _ in app.pending:
                    assert h == BROADCAST or self._table.segment_for_hash(h).name == name
                if app.inflight is not None and app.last_number is not None:
                    assert app.inflight.number > app.last_number
