"""Many plain appends in one call (``append_each``): each its own operation, answered one by one.

A writer that has data for many segments at once (a simulated writer's tick: one append per
segment with events) pays per ``append`` for the call, the checks and the lock. ``append_each``
takes ``(segment, data)`` pairs and applies them in order under one hold of the container's
lock, each exactly as ``SegmentContainer.append`` without options would: its own stamp
(sequence number and timestamp, the clock read per append), its own ``Append`` in the durable
log, its own index entry, the waiting reads it completes. So a durable log, a recovery and
every read see the same store as after a loop of ``append`` calls. A payload may be a
contiguous ``memoryview`` (of a scratch buffer, say): its bytes are copied into the segment
during the call and the view is not kept, so the caller may reuse the buffer afterwards.

Answers come in request order (as ``read_many``'s): an ``AppendResult``, or for an append to
a segment that does not exist or is sealed the ``SegmentNotFoundError`` or
``SegmentSealedError`` that ``append`` would raise; the other appends stand. Bad input (not a
sequence of pairs, a name that is not a str, a payload that is not bytes-like or is empty or
above ``StoreConfig.max_append_bytes``) refuses the whole call before anything is applied,
naming the pair. An error of the store itself (closed, read-only, its clock or its durable
log failing) ends the call there, as it would end a loop: the appends before it stand.

Waiting reads an append completes are answered with what they would have read right after
it (taken under the lock), but their futures are completed after the last append, once the
lock is released (a loop of ``append`` completes each after its own append). Other threads
wait for the whole call (one lock hold), as they would for one ``append_batch`` of its bytes.

What it saves is the per-call work: ~1.25x faster than a loop of ``append`` for 1,000 small
appends (``bench_store``). The memory each append touches is the same (its segment's buffer
and watermark index), and where those are cold (a simulated tick over thousands of segments)
that, not the calls, is most of an append's cost.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from operator import add, attrgetter, call
from typing import cast

from ..errors import AppendTooLargeError, InvalidArgumentError, SegmentNotFoundError, SegmentSealedError
from ..results import AppendResult
from .container_table import ContainerTable
from .operations import Append
from .processor import OperationProcessor
from .read_index import Wakeup, complete, take_wakeups
from .segment import Segment
from .validation import as_bytes, quote

__all__ = ["AppendAnswer", "ContainerAppends", "apply_appends", "check_appends"]

AppendAnswer = AppendResult | SegmentNotFoundError | SegmentSealedError
"""One answer of ``append_each``: where the append landed, or why its segment took nothing."""

Payload = bytes | memoryview
"""A checked payload: ``bytes``, or a contiguous 1-D byte ``memoryview`` (of the caller's buffer)."""

_result = tuple.__new__
"""Builds an ``AppendResult`` from its four fields without its Python-level ``__new__`` (hot path)."""

_drain: Callable[[Iterable[object]], None] = deque[object](maxlen=0).extend
"""Runs an iterator to its end, keeping nothing: the loops below run in C, not in Python."""

_data_append = attrgetter("data.append")
_record_write = attrgetter("windex.record_write_trusted")
_length = attrgetter("length")
_sealed = attrgetter("sealed")
_futures = attrgetter("futures")
_view_shape = attrgetter("c_contiguous", "ndim", "format")
_BYTE_VIEW = frozenset({(True, 1, "B")})
_TUPLES = frozenset({tuple})
_PAIRS = frozenset({2})
_STRS = frozenset({str})
_BYTES = frozenset({bytes})
_VIEWS = frozenset({memoryview})


def apply_appends(
    processor: OperationProcessor,
    segs: Sequence[Segment],
    names: Sequence[str],
    offsets: Sequence[int],
    datas: Sequence[Payload],
    lens: Sequence[int],
    writer_id: int | None = None,
    event_number: int | None = None,
    writer_uuid: int | None = None,
) -> list[int]:
    """Stamp, log and apply checked appends (the container's lock held), the i-th of ``datas[i]``
    (``lens[i]`` bytes) to ``segs[i]`` (named ``names[i]``) at ``offsets[i]``, its length; the
    segments distinct. Each is its own operation: its own sequence number and timestamp
    (``OperationProcessor.stamp_each``), its own ``Append`` in the durable log (a view copied for
    it; ``writer_id``, ``event_number``, ``writer_uuid`` are a single append's), then its bytes,
    length, index entry and times of last write and use. Returns the timestamps. The one place
    ``append`` and ``append_each`` apply an append. O(k + bytes).

    Without a durable log the appends are stamped together, then applied phase by phase over
    all of them (the bytes of each, then each length, ...), each phase a loop in C: under the
    lock no one sees a phase half done, the segments are distinct, so the store ends as after
    applying them one by one. A clock refused (or failing) at the i-th reading applies the
    appends before it, then raises. With a log, each is stamped, logged and applied in turn
    (a record may snapshot the store first, which must hold every append logged before it).
    """
    log = processor.log
    stamps: list[int] = []
    if log is None:
        try:
            processor.stamp_each(stamps, len(segs))
        finally:
            _apply(segs, offsets, datas, lens, stamps)
        return stamps
    for i, data in enumerate(datas):
        seq, ts = processor.stamp()
        payload = data if type(data) is bytes else bytes(data)  # the log may keep it: a view is copied
        log.write(Append(seq, ts, names[i], offsets[i], payload, writer_id, event_number, writer_uuid))
        stamps.append(ts)
        _apply(segs[i : i + 1], offsets[i : i + 1], datas[i : i + 1], lens[i : i + 1], stamps[i:])
    return stamps


def _apply(
    segs: Sequence[Segment],
    offsets: Sequence[int],
    datas: Sequence[Payload],
    lens: Sequence[int],
    stamps: list[int],
) -> None:
    """Apply stamped appends to distinct segments, the first ``len(stamps)`` (those stamped), each
    phase a loop in C. Bytes first: a segment's data that fails to take an append leaves the
    appends before it applied whole, the rest not at all. O(k + bytes)."""
    k = len(stamps)
    if k < len(segs):
        segs, offsets, datas, lens = segs[:k], offsets[:k], datas[:k], lens[:k]
    took: list[None] = []
    try:
        took += map(call, map(_data_append, segs), datas)
    finally:
        if len(took) < k:
            segs, offsets, lens, stamps = (
                segs[: len(took)],
                offsets[: len(took)],
                lens[: len(took)],
                stamps[: len(took)],
            )
        ends = list(map(add, offsets, lens))
        _drain(map(setattr, segs, repeat("length"), ends))
        _drain(map(call, map(_record_write, segs), ends, stamps))
        _drain(map(setattr, segs, repeat("last_write_time"), stamps))
        _drain(map(setattr, segs, repeat("last_used"), stamps))


def check_appends(
    appends: object, max_append_bytes: int
) -> tuple[Sequence[str], Sequence[Payload], list[int]]:
    """``append_each``'s pairs checked: their names, their payloads, each as ``bytes`` or a
    contiguous 1-D byte ``memoryview`` (of the caller's buffer, not copied), and their lengths;
    raises ``InvalidArgumentError`` (or ``AppendTooLargeError``) naming the first bad pair.
    O(pairs), in C when every pair is a tuple of a str and a good payload, all ``bytes`` or all
    views (a pair at a time otherwise); copies only payloads that are neither."""
    if isinstance(appends, (bytes, bytearray, memoryview, str)) or not isinstance(appends, Sequence):
        raise InvalidArgumentError(
            "append_each takes a sequence of (segment, data) pairs, "
            f"got {type(appends).__name__} {appends!r:.60}"
        )
    pairs = tuple(appends)  # what is checked is what is applied, whatever the caller's list does meanwhile
    if pairs and set(map(type, pairs)) == _TUPLES and set(map(len, pairs)) == _PAIRS:
        names, datas = zip(*pairs, strict=True)
        kinds = set(map(type, datas))
        if set(map(type, names)) == _STRS and (kinds == _BYTES or (kinds == _VIEWS and _byte_views(datas))):
            lens = list(map(len, datas))
            if min(lens) > 0 and max(lens) <= max_append_bytes:
                return names, datas, lens
    return _check_pairs(pairs, max_append_bytes)


def _byte_views(views: Sequence[memoryview]) -> bool:
    """Whether every view is a contiguous 1-D view of bytes (``False`` for a released one). O(k), in C."""
    try:
        return set(map(_view_shape, views)) == _BYTE_VIEW
    except ValueError:  # a released view: the pairs are checked one by one, which says which
        return False


def _check_pairs(
    pairs: tuple[object, ...], max_append_bytes: int
) -> tuple[list[str], list[Payload], list[int]]:
    """``check_appends`` a pair at a time: the first bad pair named, views cast, bytes-likes copied.
    O(pairs)."""
    names: list[str] = []
    datas: list[Payload] = []
    lens: list[int] = []
    for i, pair in enumerate(pairs):
        if type(pair) is not tuple or len(pair) != 2:
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise InvalidArgumentError(
                    f"append_each: pair {i} must be a (segment, data) pair, "
                    f"got {type(pair).__name__} {pair!r:.60}"
                )
            pair = tuple(pair)
        name, data = pair
        if type(name) is not str:
            raise InvalidArgumentError(
                f"append_each: pair {i}: segment name must be a str, got {type(name).__name__} {name!r:.60}"
            )
        if type(data) is not bytes:
            if type(data) is memoryview and data.c_contiguous:
                if data.ndim != 1 or data.format != "B":
                    data = data.cast("B")  # its bytes, not copied
            else:
                try:
                    data = as_bytes(name, data)
                except InvalidArgumentError as e:
                    raise InvalidArgumentError(f"append_each: pair {i}: {e}") from None
        n = len(data)
        if not 0 < n <= max_append_bytes:
            _refuse_length(i, name, n, max_append_bytes)
        names.append(name)
        datas.append(data)
        lens.append(n)
    return names, datas, lens


def _refuse_length(i: int, name: str, n: int, max_append_bytes: int) -> None:
    if n == 0:
        raise InvalidArgumentError(f"append_each: pair {i}: segment {quote(name)}: append of 0 bytes")
    raise AppendTooLargeError(
        f"append_each: pair {i}: segment {quote(name)}: append of {n} bytes exceeds max_append_bytes "
        f"({max_append_bytes})",
        n,
        max_append_bytes,
    )


class ContainerAppends(ContainerTable):
    """``append_each`` of ``SegmentContainer``."""

    def append_each(self, appends: Sequence[tuple[str, Payload]]) -> tuple[AppendAnswer, ...]:
        """Append each ``(segment, data)`` pair in order, each its own operation; an answer per pair
        (the module's docstring says what). O(pairs + bytes), one lock hold; in C per pair (a Python
        clock's ``now`` and the watermark index's entry aside) when every segment is active, not
        sealed and named once."""
        names, datas, lens = check_appends(appends, self._max_append_bytes)
        lock = self._lock
        lock.acquire()
        try:
            self.check_open()
            found = list(map(self._segments.get, names))
            if None in found or any(map(_sealed, found)) or len(set(names)) < len(names):
                answers, wakeups = self._each_in_turn(names, datas, lens)
            else:
                segs = cast(list[Segment], found)
                offsets = list(map(_length, segs))
                stamps = apply_appends(self._processor, segs, names, offsets, datas, lens)
                answers = tuple(map(_result, repeat(AppendResult), zip(offsets, lens, stamps, repeat(False))))
                wakeups = []
                if any(map(_futures, segs)):
                    for seg in segs:
                        if seg.futures:
                            wakeups += take_wakeups(seg)
        finally:
            lock.release()
        if wakeups:
            complete(wakeups)
        return answers

    def _each_in_turn(
        self, names: Sequence[str], datas: Sequence[Payload], lens: Sequence[int]
    ) -> tuple[tuple[AppendAnswer, ...], list[Wakeup]]:
        """``append_each`` a pair at a time (the lock held), for a batch with a segment missing (or
        evicted: reactivated in its turn), sealed, or named twice. O(pairs + bytes)."""
        out: list[AppendAnswer] = []
        wakeups: list[Wakeup] = []
        segments = self._segments
        processor = self._processor
        for i, name in enumerate(names):
            seg = segments.get(name)
            if seg is None or seg.sealed:
                try:
                    seg = self._writable(name)  # raises, or reactivates an evicted segment
                except (SegmentNotFoundError, SegmentSealedError) as e:
                    out.append(e)
                    continue
            offset = seg.length
            (ts,) = apply_appends(processor, (seg,), (name,), (offset,), datas[i : i + 1], lens[i : i + 1])
            if seg.futures:
                wakeups += take_wakeups(seg)
            out.append(_result(AppendResult, (offset, lens[i], ts, False)))
        return tuple(out), wakeups
