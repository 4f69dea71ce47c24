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

What it saves is the per-call work: 1.6x as fast as a loop of ``append`` for a tick of 1,000
small appends (``bench_store``, load average 0.8).
When every pair is a tuple of a str and ``bytes`` (or of a str and a byte view) and names an
active segment, not sealed, named once in the call (a writer's tick), each step runs over all
pairs in C (``check_appends``; the lookups; ``OperationProcessor.stamp_each``; the answers):
per append, the Python that runs is the clock's ``now`` (if it is Python), ``apply_stamped``
(four lines, called from C) and the watermark index's entry, some thirteen lines where a
loop of ``append`` runs some forty. With a durable log, or when a segment is missing, sealed
or named twice, the appends go one by one through ``apply_append``, as a loop would. Inside a
simulation, where the code of each step is cold again at every tick, the Python it runs is
most of an append's cost (docs/performance.md, "Where the time goes").
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from operator import attrgetter, countOf
from typing import cast

from ..errors import AppendTooLargeError, InvalidArgumentError, SegmentNotFoundError, SegmentSealedError
from ..results import AppendResult
from .container_table import ContainerTable
from .operations import Append
from .processor import OperationProcessor
from .read_index import Wakeup, complete, take_wakeups
from .segment import Segment
from .validation import as_bytes, quote

__all__ = [
    "AppendAnswer",
    "ContainerAppends",
    "apply_append",
    "apply_appends",
    "apply_stamped",
    "check_appends",
]

AppendAnswer = AppendResult | SegmentNotFoundError | SegmentSealedError
"""One answer of ``append_each``: where the append landed, or why its segment took nothing."""

Payload = bytes | memoryview
"""A checked payload: ``bytes``, or a contiguous ``memoryview`` whose ``len`` is its byte count."""

_result = tuple.__new__
"""Builds an ``AppendResult`` from its four fields without its Python-level ``__new__`` (hot path)."""

_drain: Callable[[Iterable[object]], None] = deque[object](maxlen=0).extend
"""Runs an iterator to its end, keeping nothing (a loop in C)."""

_length = attrgetter("length")
_sealed = attrgetter("sealed")
_futures = attrgetter("futures")
_c_contiguous = attrgetter("c_contiguous")
_nbytes = attrgetter("nbytes")


def apply_append(
    processor: OperationProcessor,
    seg: Segment,
    name: str,
    offset: int,
    data: Payload,
    writer_id: int | None = None,
    event_number: int | None = None,
    writer_uuid: int | None = None,
) -> int:
    """Stamp, log and apply one checked append of ``data`` at ``offset``, the length of ``seg`` (the
    container's lock held): its sequence number and timestamp, its ``Append`` in the durable log
    (a view copied for it), then ``apply_stamped``. Returns the timestamp. How ``append`` applies
    an append, and ``append_each`` a pair at a time or with a durable log. O(len(data))."""
    seq, ts = processor.stamp()
    log = processor.log
    if log is not None:  # the log may keep the payload: a view is copied
        payload = data if type(data) is bytes else bytes(data)
        log.write(Append(seq, ts, name, offset, payload, writer_id, event_number, writer_uuid))
    apply_stamped(seg, offset, data, ts)
    return ts


def apply_stamped(seg: Segment, offset: int, data: Payload, ts: int) -> None:
    """Apply a stamped (and logged) append to ``seg``: its bytes, length, index entry, times of last
    write and use. The one place an append is applied (``apply_append``, ``apply_appends``).
    O(len(data))."""
    seg.data.append(data)
    seg.length = end = offset + len(data)
    seg.windex.record_write_trusted(end, ts)
    seg.last_write_time = seg.last_used = ts


def apply_appends(
    processor: OperationProcessor,
    segs: Sequence[Segment],
    names: Sequence[str],
    offsets: Sequence[int],
    datas: Sequence[Payload],
) -> list[int]:
    """Stamp, log and apply checked appends (the container's lock held), the i-th of ``datas[i]`` to
    ``segs[i]`` (named ``names[i]``) at ``offsets[i]``, its length; the segments distinct. Each is
    its own operation, as ``apply_append`` makes it. Returns the timestamps. O(k + bytes).

    With a durable log, each is ``apply_append``'s in turn (its record may snapshot the store
    first, which must then hold every append logged before it). Without, the appends are stamped
    together (``OperationProcessor.stamp_each``: a clock reading each, taken in C), then each
    ``apply_stamped`` in turn (called from C). A clock refused (or failing) at the i-th reading,
    or a log or a segment's data failing at the i-th append, leaves the appends before it
    applied, and raises.
    """
    if processor.log is not None:
        return list(map(apply_append, repeat(processor), segs, names, offsets, datas))
    stamps: list[int] = []
    try:
        processor.stamp_each(stamps, len(segs))
    finally:  # those stamped (all, but for a clock's error)
        _drain(map(apply_stamped, segs, offsets, datas, stamps))
    return stamps


def check_appends(
    appends: object, max_append_bytes: int
) -> tuple[Sequence[str], Sequence[Payload], list[int]]:
    """``append_each``'s pairs checked: their names, their payloads, each as ``bytes`` or a
    contiguous byte ``memoryview`` (of the caller's buffer, not copied), and their lengths;
    raises ``InvalidArgumentError`` (or ``AppendTooLargeError``) naming the first bad pair.
    O(pairs), in C when every pair is a tuple of a str and a good payload, all ``bytes`` or all
    views (a pair at a time otherwise); copies only payloads that are neither."""
    if isinstance(appends, (bytes, bytearray, memoryview, str)) or not isinstance(appends, Sequence):
        raise InvalidArgumentError(
            "append_each takes a sequence of (segment, data) pairs, "
            f"got {type(appends).__name__} {appends!r:.60}"
        )
    pairs = tuple(appends)  # what is checked is what is applied, whatever the caller's list does meanwhile
    k = len(pairs)
    if k and countOf(map(type, pairs), tuple) == k:
        try:
            names, datas = zip(*pairs, strict=True)  # (raises unless every pair is two)
            lens = list(map(len, datas))  # (raises for a released or 0-d view)
        except (ValueError, TypeError):
            pass
        else:
            kind = type(datas[0])
            if (
                countOf(map(type, names), str) == k
                and countOf(map(type, datas), kind) == k
                and (kind is bytes or (kind is memoryview and _byte_views(datas, lens)))
                and min(lens) > 0
                and max(lens) <= max_append_bytes
            ):
                return names, datas, lens
    return _check_pairs(pairs, max_append_bytes)


def _byte_views(views: Sequence[memoryview], lens: list[int]) -> bool:
    """Whether every view is contiguous and as long as its bytes (``len``, as ``lens`` has it, is its
    ``nbytes``: 1-D of bytes, or the like). O(k), in C."""
    return all(map(_c_contiguous, views)) and lens == list(map(_nbytes, views))


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
        (the module's docstring says what). O(pairs + bytes), one lock hold; in C per pair (but for
        a Python clock's ``now``, ``apply_stamped`` and the watermark index's entry) when every
        segment is active, not sealed and named once."""
        names, datas, lens = check_appends(appends, self._max_append_bytes)
        wakeups: list[Wakeup] = []  # (completed once the lock is released, even if a later append fails)
        lock = self._lock
        lock.acquire()
        try:
            self.check_open()
            found = list(map(self._segments.get, names))
            # (a Segment is true, a name not found None)
            if not all(found) or any(map(_sealed, found)) or len(set(names)) < len(names):
                answers = self._each_in_turn(names, datas, lens, wakeups)
            else:
                segs = cast(list[Segment], found)
                offsets = list(map(_length, segs))
                try:
                    stamps = apply_appends(self._processor, segs, names, offsets, datas)
                finally:  # (the reads those that landed satisfy, whether or not a later one failed)
                    if any(map(_futures, segs)):
                        for seg in segs:
                            if seg.futures:
                                wakeups += take_wakeups(seg)
                answers = tuple(map(_result, repeat(AppendResult), zip(offsets, lens, stamps, repeat(False))))
        finally:
            lock.release()
            if wakeups:
                complete(wakeups)
        return answers

    def _each_in_turn(
        self, names: Sequence[str], datas: Sequence[Payload], lens: Sequence[int], wakeups: list[Wakeup]
    ) -> tuple[AppendAnswer, ...]:
        """``append_each`` a pair at a time (the lock held), for a batch with a segment missing (or
        evicted: reactivated in its turn), sealed, or named twice; the waiting reads each append
        satisfies added to ``wakeups`` as it lands. O(pairs + bytes)."""
        out: list[AppendAnswer] = []
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
            ts = apply_append(processor, seg, name, offset, datas[i])
            if seg.futures:
                wakeups += take_wakeups(seg)
            out.append(_result(AppendResult, (offset, lens[i], ts, False)))
        return tuple(out)
