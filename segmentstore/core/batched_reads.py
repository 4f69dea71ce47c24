"""The batched reads: many segments in one call, each with what its caller needs of them.

Three calls, each one round trip for k segments instead of k or 2k, each answering every
request on its own (one that fails says why; the others are answered):

- ``read_many`` serves a reader's poll: blocks of length-prefixed records with the
  watermark at every record start, and a look at tails that returns nothing when nothing
  moved;
- ``read_ranges`` serves a query task: byte ranges planned ahead, each with its
  ingestion runs (the ingestion time of every byte), for decoding in bulk;
- ``segment_states`` serves a planner or a reader's frontier: info, watermarks and
  successors, no data.

``read_many`` and ``read_ranges`` are two commands for a stated reason: a reader needs
the watermarks at the record boundaries it decodes (its events' times and the positions
after them) and a cheap "nothing new" for idle tails, while a Spark task reads byte
ranges fixed by its plan, whose record boundaries it finds itself, and needs every byte's
ingestion run to stamp rows column-wise. One reply shape for both would carry for each
what only the other uses.

## read_many
A reader holding k segments used to make, per poll, a ``read`` and a ``watermarks_at``
per segment with data (2k round trips over ``RemoteClient``) and a ``wait_any`` over its
tails. ``read_many`` answers all of it at once: for each request ``(segment, offset,
max_length)`` the ``SegmentRead`` that ``read`` would return (a zero-length one at the
tail carries the tail watermark and the seal, as ``read`` does) and ``watermark_at``
at the start of each whole length-prefixed record of the data (``records``: the event
frames of ``readergroup`` are such records) and at the end of the last one. So the
reader decodes its blocks and has every event's ingestion time without a second call.

A request may carry the watermark its caller knows at ``offset`` (``(segment, offset,
max_length, known)``): if a read there would return nothing new (no data, no seal, a
tail watermark not above ``known``, an offset at or beyond the length but not below the
start: what ``wait_any`` calls not ready) it is answered
``None``, a few bytes instead of a read. So one call looks at a reader's tails too.

Per request, not per call: a request whose read fails answers the error's class name
and message (the others are answered); past ``READ_MANY_REPLY_BYTES`` of reply (data
and 16 bytes per record) the remaining requests come back unread, to be asked again,
so a reply stays far below a frame's limit. ``max_length`` is at most
``MAX_READ_MANY_LENGTH`` and a call has at most ``MAX_READ_MANY`` requests (bad input is
refused whole, naming the request). Reads never wait. One hold of the store's lock
(``ReadIndex.read_many``); O(bytes + records). In process, ``read_packed`` answers the same in
columns (``PackedReads``: each read's bytes, a row per read with data, the records' starts and
watermarks in two arrays), as a decoder of many blocks takes them; its ``answers()`` are
``read_many``'s.

## segment_states and read_ranges
A reader or a query planner holding k segments used to make k ``get_info`` and k
``watermark_at`` calls, plus a ``get_successors`` per sealed one, each a round trip
over ``RemoteClient``. ``segment_states`` answers all of them at once: a request is
``(segment, position)``, its answer a ``SegmentState``:

- ``info``: the segment's ``SegmentInfo`` (length, start offset, sealed, times), or
  ``None`` with ``error`` saying why (no such segment: deleted, or never created);
- ``watermark``: ``watermark_at(segment, position)``, or ``None`` where that call would
  raise: a position below the start offset (truncated) or beyond the length;
- ``tail_watermark``: ``watermark_at(segment, info.length)``, the watermark at the
  length that ``info`` reports (a position read to ``info.length`` has it);
- ``successors``: a sealed stream segment's successors, each with all its
  predecessors (``get_successors``); ``()`` for an open segment and one that is no
  stream's.

A segment that is gone does not fail the call: its state says so, and the others
are answered. A malformed request fails the whole call (``InvalidArgumentError``
naming it) and nothing is asked. Each state is read at its own moment (a write
between two of them is seen by the later one only), and ``watermark`` and
``tail_watermark`` are true bounds whatever was written since. A wire call takes at
most ``MAX_STATE_REQUESTS`` requests (``RemoteClient`` sends more in several calls).
Costs: O(k log n) store work for k requests, plus O(successors) for sealed segments.

``read_ranges`` takes ``(segment, offset, max_length)`` requests and answers each with a
``RangeRead``: the ``SegmentRead`` a ``read`` would return and the ``ingestion_runs`` of
its bytes (``None`` for none), or the error's class and message where ``read`` would
raise (truncated, deleted, beyond the length), without failing the others. The reads
share one reply: a server gives them at most ``max_reply_bytes // 4`` bytes together,
in request order (a later read may come back shorter than asked, or empty: ask again
from its end, as after any short read). For a task reading many small ranges: one round
trip for all of them instead of two each. O(bytes + k log n).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import (
    BadOffsetError,
    InvalidArgumentError,
    SegmentNotFoundError,
    SegmentStoreError,
    SegmentTruncatedError,
)
from ..limits import INT64_MAX, INT64_MIN, shorten
from ..results import SegmentInfo, SegmentRead
from ..stream_metadata import SuccessorInfo

__all__ = [
    "ReadRequest",
    "MAX_READ_MANY",
    "MAX_READ_MANY_LENGTH",
    "READ_MANY_REPLY_BYTES",
    "check_read_requests",
    "SegmentState",
    "StateRequest",
    "MAX_STATE_REQUESTS",
    "check_state_requests",
    "segment_states",
    "RangeRead",
    "RangeRequest",
    "check_range_requests",
    "read_ranges",
]

ReadRequest = tuple[str, int, int, int | None]
"""``(segment name, read offset, max_length, known watermark or None)``."""

MAX_READ_MANY = 4096
"""Requests in one ``read_many`` call."""
MAX_READ_MANY_LENGTH = 1 << 20
"""The largest ``max_length`` of one request (a reader's default block)."""
READ_MANY_REPLY_BYTES = 2 << 20
"""Requests are answered in order while the reply so far (data, 16 bytes per record) is below this:
at most this plus one request's worst case (``MAX_READ_MANY_LENGTH`` of 4-byte records: 5 MiB)."""


def check_read_requests(requests: object) -> list[ReadRequest]:
    """The requests as a list of ``(str, int >= 0, int in [0, MAX_READ_MANY_LENGTH])``, each with an
    int64 known watermark or ``None`` after it; ``InvalidArgumentError`` naming the bad one.

    Taken once into the list returned (a caller changing its own meanwhile changes nothing), a
    4-tuple kept as it is (no copy, no append each). O(k)."""
    if type(requests) is not list and (
        isinstance(requests, (str, bytes)) or not isinstance(requests, Sequence)
    ):
        raise InvalidArgumentError(
            f"read_many: requests must be a sequence of (segment, offset, max_length[, known watermark]), "
            f"got {requests!r:.80}"
        )
    if not 0 < len(requests) <= MAX_READ_MANY:
        raise InvalidArgumentError(f"read_many: between 1 and {MAX_READ_MANY} requests, got {len(requests)}")
    out: list[ReadRequest] = list(requests)
    for i, r in enumerate(out):
        req = r
        if type(r) is not tuple or len(r) != 4:  # (the usual request is: taken as it is, once checked)
            if not isinstance(r, (tuple, list)) or not 3 <= len(r) <= 4:
                raise _bad_request(i, r)
            req = out[i] = (r[0], r[1], r[2], r[3] if len(r) == 4 else None)
        name, offset, max_length, known = req
        if not (
            type(name) is str
            and type(offset) is int
            and type(max_length) is int
            and offset >= 0
            and 0 <= max_length <= MAX_READ_MANY_LENGTH
            and (known is None or (type(known) is int and INT64_MIN <= known <= INT64_MAX))
        ):
            raise _bad_request(i, r)
    return out


def _bad_request(i: int, r: object) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"read_many: request {i} must be (segment: str, offset: int >= 0, max_length: int in "
        f"[0, {MAX_READ_MANY_LENGTH}][, known watermark: int64]), got {r!r:.80}"
    )


StateRequest = tuple[str, int]
"""``(segment name, position >= 0)``: whose state, and where its ``watermark`` is wanted."""

MAX_STATE_REQUESTS = 4096
"""Requests in one wire call: as many as a stream's active segments may be (``MAX_STREAM_SEGMENTS``)."""


@dataclass(frozen=True, slots=True)
class SegmentState:
    """One segment's answer in ``segment_states``: info, watermarks at position and tail, successors."""

    name: str
    position: int
    info: SegmentInfo | None
    watermark: int | None
    tail_watermark: int | None
    successors: tuple[SuccessorInfo, ...] = ()
    error: str | None = None
    """Why there is no ``info`` (the store's one-line message), else ``None``."""

    @property
    def exists(self) -> bool:
        return self.info is not None


def _request_sequence(command: str, shape: str, requests: object, limit: int | None) -> Sequence[Any]:
    """``requests`` if it is a sequence (not a string) of at most ``limit`` items; else the error."""
    if isinstance(requests, (str, bytes)) or not isinstance(requests, Sequence):
        raise InvalidArgumentError(f"{command}: requests must be a sequence of {shape}, got {requests!r:.80}")
    if limit is not None and len(requests) > limit:
        raise InvalidArgumentError(
            f"{command}: at most {limit} requests in one call, got {len(requests)} (send them in parts)"
        )
    return requests


def check_state_requests(requests: object, limit: int | None = None) -> list[StateRequest]:
    """The requests as a list of ``(str, int >= 0)``; ``InvalidArgumentError`` naming the bad one.

    ``limit``: at most this many (the server's ``MAX_STATE_REQUESTS``). O(k).
    """
    out: list[StateRequest] = []
    for i, r in enumerate(_request_sequence("segment_states", "(segment, position)", requests, limit)):
        ok = isinstance(r, (tuple, list)) and len(r) == 2
        if ok:
            name, pos = r
            ok = type(name) is str and type(pos) is int and 0 <= pos <= INT64_MAX
        if not ok:
            raise InvalidArgumentError(
                f"segment_states: request {i} must be (segment name, position >= 0), got {r!r:.80}"
            )
        out.append((name, pos))
    return out


def segment_states(
    get_info: Callable[[str], SegmentInfo],
    watermark_at: Callable[[str, int], int],
    get_successors: Callable[[str], tuple[SuccessorInfo, ...]],
    requests: Sequence[StateRequest],
) -> tuple[SegmentState, ...]:
    """The state of every requested segment, in request order (see the module docstring)."""
    return tuple(_state(get_info, watermark_at, get_successors, name, pos) for name, pos in requests)


def _state(
    get_info: Callable[[str], SegmentInfo],
    watermark_at: Callable[[str, int], int],
    get_successors: Callable[[str], tuple[SuccessorInfo, ...]],
    name: str,
    pos: int,
) -> SegmentState:
    try:
        info = get_info(name)
        tail = watermark_at(name, info.length)
    except SegmentNotFoundError as e:
        return SegmentState(name, pos, None, None, None, (), _message(e, name))
    except SegmentTruncatedError:  # truncated to its length between the two calls
        tail = None
    watermark: int | None
    if pos == info.length:
        watermark = tail
    elif info.start_offset <= pos < info.length:
        try:
            watermark = watermark_at(name, pos)
        except (SegmentTruncatedError, BadOffsetError, SegmentNotFoundError):
            watermark = None  # truncated or deleted since get_info: as if asked after
    else:
        watermark = None
    successors: tuple[SuccessorInfo, ...] = ()
    if info.sealed:
        try:
            successors = get_successors(name)
        except SegmentNotFoundError:
            successors = ()  # not a stream's segment (or its stream is gone)
    return SegmentState(name, pos, info, watermark, tail, successors)


def _message(e: BaseException, name: str) -> str:
    text = e.args[0] if len(e.args) == 1 and isinstance(e.args[0], str) else str(e)
    return text or f"segment {shorten(name)} not found"


RangeRequest = tuple[str, int, int]
"""``(segment name, offset >= 0, max_length >= 0)``: a ``read`` of ``read_ranges``."""


@dataclass(frozen=True, slots=True, eq=False)
class RangeRead:
    """One request's answer in ``read_ranges``: the read and its bytes' ingestion runs, or the error."""

    read: SegmentRead | None
    runs: np.ndarray | None
    """``ingestion_runs`` of the read's bytes (``None`` for no bytes), as ``ingestion_runs`` gives them."""
    error: str | None = None
    """``"ErrorClass: message"`` where ``read`` would have raised, else ``None``."""


def check_range_requests(requests: object, limit: int | None = None) -> list[RangeRequest]:
    """The requests as a list of ``(str, int >= 0, int >= 0)``; ``InvalidArgumentError`` naming a bad one."""
    out: list[RangeRequest] = []
    shape = "(segment, offset, max_length)"
    for i, r in enumerate(_request_sequence("read_ranges", shape, requests, limit)):
        ok = isinstance(r, (tuple, list)) and len(r) == 3
        if ok:
            name, offset, n = r
            ok = type(name) is str and all(type(v) is int and 0 <= v <= INT64_MAX for v in (offset, n))
        if not ok:
            raise InvalidArgumentError(
                f"read_ranges: request {i} must be (segment name, offset >= 0, max_length >= 0),"
                f" got {r!r:.80}"
            )
        out.append((name, offset, n))
    return out


def read_ranges(
    read: Callable[[str, int, int], SegmentRead],
    ingestion_runs: Callable[[str, int, int], np.ndarray],
    requests: Sequence[RangeRequest],
    max_bytes: int | None = None,
) -> tuple[RangeRead, ...]:
    """Each request's read and runs, in order, at most ``max_bytes`` of data in all (module docstring)."""
    out: list[RangeRead] = []
    budget = max_bytes
    for name, offset, n in requests:
        if budget is not None:
            n = min(n, budget)
        try:
            r = read(name, offset, n)
            runs = ingestion_runs(name, r.offset, r.offset + len(r.data)) if r.data else None
        except SegmentStoreError as e:
            out.append(RangeRead(None, None, f"{type(e).__name__}: {_message(e, name)}"))
            continue
        if budget is not None:
            budget -= len(r.data)
        out.append(RangeRead(r, runs))
    return tuple(out)
