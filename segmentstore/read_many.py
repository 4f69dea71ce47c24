"""``read_many``: many segments' reads, with the watermarks at their records, in one call.

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
(``ReadIndex.read_many``); O(bytes + records).
"""

from __future__ import annotations

from collections.abc import Sequence

from .errors import InvalidArgumentError
from .limits import INT64_MAX, INT64_MIN

__all__ = [
    "ReadRequest",
    "MAX_READ_MANY",
    "MAX_READ_MANY_LENGTH",
    "READ_MANY_REPLY_BYTES",
    "check_read_requests",
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
    int64 known watermark or ``None`` after it; ``InvalidArgumentError`` naming the bad one."""
    if type(requests) is not list and (
        isinstance(requests, (str, bytes)) or not isinstance(requests, Sequence)
    ):
        raise InvalidArgumentError(
            f"read_many: requests must be a sequence of (segment, offset, max_length[, known watermark]), "
            f"got {requests!r:.80}"
        )
    if not 0 < len(requests) <= MAX_READ_MANY:
        raise InvalidArgumentError(f"read_many: between 1 and {MAX_READ_MANY} requests, got {len(requests)}")
    out: list[ReadRequest] = []
    for i, r in enumerate(requests):
        if type(r) is tuple and len(r) == 4:  # the usual request: taken as it is, once checked
            req = r
        elif isinstance(r, (tuple, list)) and 3 <= len(r) <= 4:
            req = (r[0], r[1], r[2], r[3] if len(r) == 4 else None)
        else:
            raise _bad_request(i, r)
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
        out.append(req)
    return out


def _bad_request(i: int, r: object) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"read_many: request {i} must be (segment: str, offset: int >= 0, max_length: int in "
        f"[0, {MAX_READ_MANY_LENGTH}][, known watermark: int64]), got {r!r:.80}"
    )
