"""Fetching a segment range for the decoder: reads of whole frames, on a background thread ahead of it.

``whole_frame_reads`` reads ``[begin, end)`` of a segment in reads of up to
``READ_CHUNK_BYTES`` and yields each read's bytes from a frame boundary on
(``FrameChunk``): the next read starts at the first frame the previous one cut short
(``walk_frames`` finds it by jumping from header to header), so the decoder works on
each read's own buffer, with no carry copied in front of it. A frame longer than a
read is collected over several. Over ``RemoteClient`` the next read is asked for
(``prefetch``) as soon as its start is known, before the read in hand is handed on, so
its round trip overlaps the decoding on the connection's reader thread; not a range's last
read, which may end at the tail (a read there asks again for a fresh watermark). ``fetched_ahead``
runs such a generator on a thread up to ``ahead`` items ahead of its consumer: socket
reads release the GIL and the numba kernels run with ``nogil``, so decoding overlaps
what the consumer does with the reads before (a Spark task has none: ``executor``).

With ``runs``, each read also brings the ingestion runs of its whole frames, so that
the decoder never waits for the store: they are asked for ``RUNS_AHEAD_READS`` reads'
worth of bytes at a time (``runs_of``: one ``ingestion_runs`` call, more for over
65,536 runs) and cut to each read's frames, so that a range takes one round trip per
read, not two (a call costs the client ~0.2 ms of CPU here, ~5 ns per event of a
2 MiB read). A read that returns nothing below the planned end, or bytes at the end
that are not a whole frame, raise ``DataLossError``; the store's errors pass through
in order.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import TypeVar, cast

import numpy as np

from readergroup.format.frame_batch import walk_frames
from readergroup.format.pravega_frames import walk_pravega_frames
from segmentstore.checks import checked
from segmentstore.client import RemoteClient, SegmentStoreClient
from segmentstore.errors import ProtocolError

from .errors import DataLossError

__all__ = [
    "READ_CHUNK_BYTES",
    "FETCH_AHEAD",
    "FIRST_READ_BYTES",
    "RUNS_AHEAD_READS",
    "FrameChunk",
    "whole_frame_reads",
    "fetched_ahead",
    "runs_of",
]

READ_CHUNK_BYTES = 2 << 20
"""Bytes asked for per read of a range: 2 MiB read and decode faster here than 4 or 8 (cache)."""
FETCH_AHEAD = 2
"""Reads a range's fetch thread keeps ready ahead of the decoder."""
RUNS_AHEAD_READS = 4
"""Reads' worth of bytes whose ingestion runs ``whole_frame_reads(runs=True)`` asks for at once."""
FIRST_READ_BYTES = 256 << 10
"""Bytes of a range's first read when the client fetches ahead and more than this and a whole read
follow: the first record batch sooner (a Spark task's JVM thread waits for it), while the next
read, asked for at once, comes. Over a kept connection idle for 0.4 s (TCP starts slowly again),
a range of 300,000 events gave its first batch after ~3.8 ms instead of ~7.6 and ended after ~20
ms instead of ~24: about 1 % of a Spark micro-batch's tasks, within ``bench_spark``'s noise."""

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class FrameChunk:
    """Bytes of a segment from offset ``base`` (a frame boundary); the first ``whole`` are whole frames.

    ``whole == len(data)`` except where a malformed frame stops the walk (the decoder
    reports it) or at a read's cut-off frame, which the next chunk starts with.
    """

    base: int
    data: bytes
    whole: int
    runs: np.ndarray | None = None
    """``ingestion_runs`` of the whole frames' bytes, when asked for (``whole_frame_reads(runs=True)``)."""


def whole_frame_reads(
    client: SegmentStoreClient,
    stream: str,
    segment: str,
    begin: int,
    end: int,
    chunk_bytes: int = READ_CHUNK_BYTES,
    runs: bool = False,
    pravega: bool = False,
) -> Iterator[FrameChunk]:
    """``[begin, end)`` of ``segment`` (``begin`` a frame boundary) as reads that start at frame boundaries.

    O(bytes): one read per ``chunk_bytes`` (plus re-reading each cut-off frame; over a client that
    fetches ahead, a range of more than a read and ``FIRST_READ_BYTES`` starts with a read of
    those, the next read asked for at once), one header walk per read. ``runs``: each chunk also
    carries the ingestion runs of its whole frames (``ingestion_runs`` asked for
    ``RUNS_AHEAD_READS`` reads ahead, within ``end``, on the fetching thread, so that the decoder
    never waits for the store). ``pravega``: the frames are Pravega's (``walk_pravega_frames``).
    """
    walk = walk_pravega_frames if pravega else walk_frames
    prefetch = client.prefetch if isinstance(client, RemoteClient) else None
    pos = begin  # the next byte to read
    carry = b""  # the start of a frame longer than the reads so far
    need = 0  # that frame's full length, when known
    window = _RunsWindow(client, segment, end, RUNS_AHEAD_READS * chunk_bytes)
    small_first = prefetch is not None and FIRST_READ_BYTES < chunk_bytes < end - begin - FIRST_READ_BYTES
    size = FIRST_READ_BYTES if small_first else chunk_bytes
    while pos < end:
        want = min(max(size, need - len(carry)), end - pos)
        size = chunk_bytes
        r = client.read(segment, pos, want)  # the reply asked for ahead, if it was
        if not r.data:
            raise DataLossError(
                f"segment {segment!r} of stream {stream!r}: no data at offset {pos}, below the planned "
                f"end {end}"
            )
        base = pos - len(carry)
        data = carry + r.data if carry else r.data
        whole, nxt, bad = walk(data)
        if whole == 0 and not bad:  # not one whole frame yet: read on
            carry, need = data, (nxt or 0)
            pos += len(r.data)
            continue
        after = base + whole
        if prefetch is not None and not bad and after + chunk_bytes < end:  # asked before this one is used
            prefetch(segment, after, chunk_bytes)  # (not the range's last: at the tail, a read asks again)
        times = window.runs(base, after) if runs and whole else None
        yield FrameChunk(base, data, whole, times)
        if bad:
            return  # the decoder raises on the malformed frame
        carry, need = b"", 0
        pos = base + whole
    if carry:
        raise DataLossError(
            f"segment {segment!r} of stream {stream!r}: {len(carry)} bytes before offset {end} are not a "
            "whole frame (the planned end is not a frame boundary)"
        )


def runs_of(client: SegmentStoreClient, segment: str, begin: int, end: int) -> np.ndarray:
    """Every ingestion run of bytes ``[begin, end)`` (``begin < end``): one call, or more for a
    range of over 65,536 runs (the store answers those in parts). O(runs)."""
    parts = []
    pos = begin
    while True:
        runs = np.asarray(client.ingestion_runs(segment, pos, end), dtype=np.int64)
        if runs.ndim != 2 or runs.shape[0] != 2 or runs.shape[1] == 0 or int(runs[0, -1]) < pos:
            raise ProtocolError(
                f"segment {segment!r}: ingestion_runs of [{pos}, {end}) answered no runs from {pos}"
            )
        parts.append(runs)
        last = int(runs[0, -1])
        if last >= end - 1:
            return runs if len(parts) == 1 else np.concatenate(parts, axis=1)
        pos = last + 1


class _RunsWindow:
    """Ingestion runs of a segment's bytes up to ``end``, asked for ``span`` bytes at a time.

    Bytes below a segment's length never change, nor do their ingestion times, so runs
    asked for once answer every later read inside them. O(runs) per call.
    """

    __slots__ = ("_client", "_end", "_from", "_runs", "_segment", "_span")

    def __init__(self, client: SegmentStoreClient, segment: str, end: int, span: int) -> None:
        self._client = client
        self._segment = segment
        self._end = end
        self._span = span
        self._runs: np.ndarray | None = None
        self._from = 0  # the first byte self._runs covers

    def runs(self, begin: int, end: int) -> np.ndarray:
        """The runs of bytes ``[begin, end)`` (``begin < end``); the last one ends at or after ``end - 1``."""
        r = self._runs
        if r is None or begin < self._from or int(r[0, -1]) < end - 1:
            r = self._runs = runs_of(
                self._client, self._segment, begin, max(end, min(self._end, begin + self._span))
            )
            self._from = begin
        first = int(np.searchsorted(r[0], begin))  # the run holding ``begin``
        last = int(np.searchsorted(r[0], end - 1))  # the run holding ``end - 1``
        out: np.ndarray = r[:, first : last + 1]
        return out

    @checked
    def _check(self) -> None:
        """Assert the runs held are ordered and begin at or after ``_from``."""
        if self._runs is not None:
            assert self._runs.shape[0] == 2 and self._runs.shape[1] > 0, self._runs.shape
            assert bool(np.all(np.diff(self._runs[0]) > 0)), "run ends not increasing"
            assert int(self._runs[0, 0]) >= self._from, (self._runs[0, 0], self._from)


_DONE = object()


class _Failure:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def fetched_ahead(make: Callable[[], Iterator[_T]], ahead: int = FETCH_AHEAD) -> Generator[_T, None, None]:
    """The items of ``make()``, produced on a background thread up to ``ahead`` items ahead.

    Errors are raised here, after the items before them. Closing this generator early
    stops the thread (within 0.1 s). ``ahead <= 0``: no thread, ``make()`` itself.
    """
    if ahead <= 0:
        yield from make()
        return
    q: queue.Queue[object] = queue.Queue(maxsize=ahead)
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            for item in make():
                if not put(item):
                    return
        except BaseException as e:  # handed to the consumer, raised there
            put(_Failure(e))
            return
        put(_DONE)

    thread = threading.Thread(target=run, name="ingestwm-fetch", daemon=True)
    thread.start()
    try:
        while True:
            item = q.get()
            if item is _DONE:
                return
            if isinstance(item, _Failure):
                raise item.error
            yield cast(_T, item)
    finally:
        stop.set()
        thread.join()
