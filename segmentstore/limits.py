"""The store's numeric limits, defined here only: the int64 range, and the size of every field of a command.

The int64 range every time, offset and attribute value lives in (Pravega's ``long``).
``INT64_MIN`` doubles as "no watermark yet" and ``INT64_MAX`` as "end of time"
wherever a layer names them so (``readergroup.reading.frontier``, ``flink_compat.watermark``).

Field limits: a name or list a command carries is stored, logged, snapshotted and held
in memory, so each has a bound; the store enforces it (embedded and remote alike, since
the server calls the same code) with an ``InvalidArgumentError`` naming the field, its
size and the limit. Wire-level bounds (frame size, requests in flight) are the
server's (``segmentstore.net``); bytes per append are ``StoreConfig.max_append_bytes``.

- ``MAX_NAME_PART_CHARS`` (255): one part of a stream name ``scope/name``, as Pravega's
  limit for scope and stream names.
- ``MAX_SEGMENT_NAME_CHARS`` (1024): a segment name ``create_segment`` takes. A stream
  segment's name (``scope/stream/<n>.#epoch.<e>``, two parts of 255) fits with room to
  spare; a transaction's name is its parent's plus 29 characters, and a system segment
  (``_system/...``, whose name may embed another segment's) may be
  ``SYSTEM_NAME_EXTRA_CHARS`` (64) longer.
- ``MAX_ATTRIBUTE_UPDATES`` (65,536): attribute updates in one ``update_attributes``;
  ``MAX_ATTRIBUTE_KEYS`` (65,536): keys asked for in one ``get_attributes``.
- ``MAX_STREAM_SEGMENTS`` (16,384): active segments of a stream, so segments a
  ``create_stream`` or ``scale_stream`` makes and transaction segments a commit or abort
  names. ``MAX_PATTERN_CHARS`` (1024): a ``list_streams`` pattern.
- ``wait_any`` takes at most ``wait_any.MAX_WAIT_REQUESTS`` requests; ``ingestion_runs``
  answers at most ``watermark_index.MAX_RUNS`` runs per call.
"""

from __future__ import annotations

from .errors import InvalidArgumentError

__all__ = [
    "INT64_MIN",
    "INT64_MAX",
    "is_int64",
    "MAX_NAME_PART_CHARS",
    "MAX_SEGMENT_NAME_CHARS",
    "SYSTEM_NAME_EXTRA_CHARS",
    "MAX_ATTRIBUTE_UPDATES",
    "MAX_ATTRIBUTE_KEYS",
    "MAX_STREAM_SEGMENTS",
    "MAX_PATTERN_CHARS",
    "check_size",
    "shorten",
]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

MAX_NAME_PART_CHARS = 255
MAX_SEGMENT_NAME_CHARS = 1024
SYSTEM_NAME_EXTRA_CHARS = 64
MAX_ATTRIBUTE_UPDATES = 65_536
MAX_ATTRIBUTE_KEYS = 65_536
MAX_STREAM_SEGMENTS = 16_384
MAX_PATTERN_CHARS = 1024

_SHOWN_CHARS = 80


def is_int64(value: object) -> bool:
    """Whether ``value`` is an ``int`` (not a ``bool``) in ``[INT64_MIN, INT64_MAX]``. O(1)."""
    return type(value) is int and INT64_MIN <= value <= INT64_MAX


def check_size(what: str, size: int, limit: int, limit_name: str, unit: str = "") -> None:
    """Refuse ``what`` of ``size`` (characters, items) above ``limit`` with an error naming both. O(1)."""
    if size > limit:
        unit = f" {unit}" if unit else ""
        raise InvalidArgumentError(
            f"{what} has {size}{unit}, more than the limit of {limit} (segmentstore.limits.{limit_name}); "
            "nothing was changed"
        )


def shorten(name: object) -> str:
    """``repr`` of a name for an error message, cut after 80 characters (saying how long it was). O(1)."""
    if isinstance(name, str) and len(name) > _SHOWN_CHARS:
        return f"{name[:_SHOWN_CHARS]!r}... ({len(name)} characters)"
    return repr(name)
