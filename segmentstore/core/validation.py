"""Argument checks shared by the container and the read index; each error names the segment and value."""

from __future__ import annotations

import numpy as np

from ..attributes import is_core_attribute
from ..errors import InvalidArgumentError
from ..limits import (
    INT64_MAX,
    INT64_MIN,
    MAX_SEGMENT_NAME_CHARS,
    SYSTEM_NAME_EXTRA_CHARS,
    check_size,
    shorten,
)
from .segment import SYSTEM_PREFIX

__all__ = [
    "quote",
    "check_name",
    "check_new_name",
    "check_offset",
    "check_writer",
    "check_writer_uuid",
    "as_bytes",
]


def quote(name: object) -> str:
    """``repr`` of a segment name for messages, a long one cut (``limits.shorten``). O(1)."""
    return shorten(name)


def check_name(name: object) -> None:
    """A segment name is a non-empty str without surrounding spaces or NUL."""
    if not isinstance(name, str):
        raise InvalidArgumentError(f"segment name must be a str, got {type(name).__name__} {name!r:.80}")
    if not name or name.strip() != name or "\x00" in name:
        raise InvalidArgumentError(
            f"segment name {quote(name)} must be non-empty, without surrounding spaces or NUL"
        )


def check_new_name(name: object) -> str:
    """``check_name``, and at most ``MAX_SEGMENT_NAME_CHARS`` characters (a system segment's
    ``SYSTEM_NAME_EXTRA_CHARS`` more): the name of a segment being created. O(len)."""
    check_name(name)
    assert isinstance(name, str)
    limit = MAX_SEGMENT_NAME_CHARS
    if name.startswith(SYSTEM_PREFIX):
        limit += SYSTEM_NAME_EXTRA_CHARS
    check_size(
        f"segment name starting {name[:80]!r}", len(name), limit, "MAX_SEGMENT_NAME_CHARS", "characters"
    )
    return name


def check_offset(name: str, what: str, value: object) -> None:
    """``value`` is an int (or numpy integer) >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidArgumentError(
            f"segment {name!r}: {what} must be an int, got {type(value).__name__} {value!r}"
        )
    if value < 0:
        raise InvalidArgumentError(f"segment {name!r}: {what} must be >= 0, got {value}")


def check_writer(name: str, writer_id: object, event_number: object) -> None:
    """Writer id and event number are both 64-bit ints; the id is not a core attribute key."""
    for what, v in (("writer_id", writer_id), ("event_number", event_number)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise InvalidArgumentError(
                f"segment {name!r}: {what} must be an int when writer_id/event_number is given, got {v!r}"
            )
        if not INT64_MIN <= v <= INT64_MAX:
            raise InvalidArgumentError(f"segment {name!r}: {what} {v} does not fit in 64 bits")
    assert isinstance(writer_id, int)
    if is_core_attribute(writer_id):
        raise InvalidArgumentError(
            f"segment {name!r}: writer_id {writer_id} lies in the core attribute key range"
        )


def check_writer_uuid(name: str, writer_id: object, writer_uuid: object, event_number: object) -> None:
    """A 128-bit writer id in [0, 2^128) with a 64-bit event number, and no 64-bit ``writer_id`` beside it."""
    if writer_id is not None:
        raise InvalidArgumentError(f"segment {name!r}: give writer_id or writer_uuid, not both")
    if isinstance(writer_uuid, bool) or not isinstance(writer_uuid, int) or not 0 <= writer_uuid < 2**128:
        raise InvalidArgumentError(
            f"segment {name!r}: writer_uuid must be an int in [0, 2^128), got {writer_uuid!r:.60}"
        )
    e = event_number
    if isinstance(e, bool) or not isinstance(e, int) or not INT64_MIN <= e <= INT64_MAX:
        raise InvalidArgumentError(
            f"segment {name!r}: event_number must be a 64-bit int with writer_uuid, got {event_number!r}"
        )


def as_bytes(name: str, data: object) -> bytes:
    """A bytes-like payload as ``bytes``; anything else is an error."""
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise InvalidArgumentError(f"segment {quote(name)}: payload must be bytes, got {type(data).__name__}")
